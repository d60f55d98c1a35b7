//go:build linux

package main

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"testing"
)

// serveRaw answers every request with raw bytes written on the hijacked
// connection, then closes it: responses no well-behaved server sends.
func serveRaw(t *testing.T, raw func(w *bufio.ReadWriter)) string {
	t.Helper()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		c, rw, err := w.(http.Hijacker).Hijack()
		if err != nil {
			t.Error(err)
			return
		}
		defer c.Close()
		raw(rw)
		_ = rw.Flush()
	}))
	t.Cleanup(srv.Close)
	return srv.URL
}

// checkOnce GETs url with Go's client, as the crowd does, and checks the
// response against obj.
func checkOnce(t *testing.T, url string, obj *object, bySHA map[[32]byte]string) (bool, string, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	body, readErr := io.ReadAll(resp.Body)
	resp.Body.Close()
	return check(obj, resp, body, readErr, bySHA)
}

func TestCheckClassifiesResponses(t *testing.T) {
	objs := makeObjects(2)
	a, b := objs[0], objs[1]
	bySHA := map[[32]byte]string{a.SHA256: a.Path, b.SHA256: b.Path}
	header := func(w *bufio.ReadWriter, extra string) {
		fmt.Fprintf(w, "HTTP/1.1 200 OK\r\nConnection: close\r\n%s\r\n", extra)
	}
	cases := []struct {
		name               string
		raw                func(w *bufio.ReadWriter)
		ok                 bool
		failure, violation bool
		want               string
	}{
		{"whole body with Content-Length", func(w *bufio.ReadWriter) {
			header(w, "Content-Length: "+strconv.Itoa(len(a.Body))+"\r\n")
			w.Write(a.Body)
		}, true, false, false, ""},
		{"whole chunked body", func(w *bufio.ReadWriter) {
			header(w, "Transfer-Encoding: chunked\r\n")
			fmt.Fprintf(w, "%x\r\n", len(a.Body))
			w.Write(a.Body)
			w.WriteString("\r\n0\r\n\r\n")
		}, true, false, false, ""},
		{"cut short of its Content-Length: the client sees it", func(w *bufio.ReadWriter) {
			header(w, "Content-Length: "+strconv.Itoa(len(a.Body))+"\r\n")
			w.Write(a.Body[:len(a.Body)/2])
		}, false, true, false, ""},
		{"chunked without its terminator: the client sees it", func(w *bufio.ReadWriter) {
			header(w, "Transfer-Encoding: chunked\r\n")
			fmt.Fprintf(w, "%x\r\n", len(a.Body)/2)
			w.Write(a.Body[:len(a.Body)/2])
			w.WriteString("\r\n")
		}, false, true, false, ""},
		{"cut short, ended by close: presented as complete", func(w *bufio.ReadWriter) {
			header(w, "")
			w.Write(a.Body[:len(a.Body)/2])
		}, false, false, true, violationTruncated},
		{"another URL's body", func(w *bufio.ReadWriter) {
			header(w, "Content-Length: "+strconv.Itoa(len(b.Body))+"\r\n")
			w.Write(b.Body)
		}, false, false, true, violationOtherURL},
		{"one byte changed", func(w *bufio.ReadWriter) {
			body := append([]byte(nil), a.Body...)
			body[len(body)-1] ^= 1
			header(w, "Content-Length: "+strconv.Itoa(len(body))+"\r\n")
			w.Write(body)
		}, false, false, true, violationCorrupt},
		{"not 200", func(w *bufio.ReadWriter) {
			w.WriteString("HTTP/1.1 502 Bad Gateway\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		}, false, true, false, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			ok, failure, violation := checkOnce(t, serveRaw(t, c.raw), a, bySHA)
			if ok != c.ok || (failure != "") != c.failure || (violation != "") != c.violation || (c.want != "" && violation != c.want) {
				t.Errorf("ok %v, failure %q, violation %q; want ok %v, failure %v, violation %q", ok, failure, violation, c.ok, c.failure, c.want)
			}
		})
	}
}

func TestObjectsDistinct(t *testing.T) {
	objs := makeObjects(40)
	seen := map[[32]byte]bool{}
	for i, o := range objs {
		if seen[o.SHA256] {
			t.Fatalf("object %d repeats another's body", i)
		}
		seen[o.SHA256] = true
		if len(o.Body) != objectSizes[i%len(objectSizes)] {
			t.Errorf("object %d: %d bytes", i, len(o.Body))
		}
	}
}

// TestObjectsServed checks the count of objects served and fetched, and
// that an object a client got before the origin's first fetch of it (or
// with none at all) is listed.
func TestObjectsServed(t *testing.T) {
	results := []result{
		{At: 1.5, Object: 0, OK: true},
		{At: 1.0, Object: 0, OK: false}, // failures count for nothing
		{At: 2.0, Object: 1, OK: true},
		{At: 2.5, Object: 2, OK: true}, // no fetch at all
		{At: 3.0, Object: 3, OK: true}, // before its fetch
		{At: 3.0, Object: 4, OK: false},
	}
	fetches := []originFetch{
		{At: 1.4, Object: 0}, {At: 0.5, Object: 1}, {At: 1.9, Object: 1},
		{At: 3.1, Object: 3}, {At: 2.0, Object: 5},
	}
	served, fetched, nowhere := objectsServed(results, fetches)
	if served != 4 || fetched != 4 || fmt.Sprint(nowhere) != "[2 3]" {
		t.Errorf("served %d, fetched %d, from nowhere %v; want 4, 4, [2 3]", served, fetched, nowhere)
	}
	served, fetched, nowhere = objectsServed(results[:2], fetches[:1])
	if served != 1 || fetched != 1 || nowhere != nil {
		t.Errorf("served %d, fetched %d, from nowhere %v; want 1, 1, none", served, fetched, nowhere)
	}
}
