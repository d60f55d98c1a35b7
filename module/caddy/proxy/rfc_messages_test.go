package proxy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"strings"
	"sync"
	"testing"
)

// Messages (RFC 9110 §15.2, RFC 9112 §6, RFC 9111 §3.1, §4.4): interim
// responses reach the client and are never cached; transfer codings are
// undone and never stored; unsafe methods are refused, which is why
// nothing is ever invalidated.

// TestRFCInterimResponses: a 103 Early Hints from the origin reaches the
// client that caused the fetch (RFC 9110 §15.2: a proxy forwards 1xx
// responses), with its own fields only; the cached response is served
// later without it.
func TestRFCInterimResponses(t *testing.T) {
	origin := newRecordingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Link", "</style.css>; rel=preload; as=style")
		w.WriteHeader(http.StatusEarlyHints)
		w.Header().Del("Link")
		w.Header().Set("Cache-Control", "max-age=600")
		io.WriteString(w, "page")
	})
	p := startLocalProxy(t, 0, nil)
	fetch := func() (hints []http.Header, resp *http.Response, body string) {
		var mu sync.Mutex
		trace := &httptrace.ClientTrace{Got1xxResponse: func(code int, h textproto.MIMEHeader) error {
			mu.Lock()
			defer mu.Unlock()
			if code == http.StatusEarlyHints {
				hints = append(hints, http.Header(h).Clone())
			}
			return nil
		}}
		req, _ := http.NewRequestWithContext(httptrace.WithClientTrace(context.Background(), trace), http.MethodGet, p.srv.URL+"/page", nil)
		req.Host = origin.coralHost()
		resp, err := p.srv.Client().Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, _ := io.ReadAll(resp.Body)
		return hints, resp, string(b)
	}
	hints, resp, body := fetch()
	if len(hints) != 1 || hints[0].Get("Link") != "</style.css>; rel=preload; as=style" {
		t.Errorf("miss: early hints %v, want one with the Link", hints)
	}
	if resp.StatusCode != http.StatusOK || body != "page" || resp.Header.Get("Link") != "" {
		t.Errorf("miss: %d %q, Link %q (the hint's field must not leak into the final response)", resp.StatusCode, body, resp.Header.Get("Link"))
	}
	p.idle(t)
	hints, resp, body = fetch()
	if len(hints) != 0 || resp.StatusCode != http.StatusOK || body != "page" || !strings.Contains(resp.Header.Get("Cache-Status"), "hit") {
		t.Errorf("hit: hints %v, %d %q %q; want the stored final response only", hints, resp.StatusCode, body, resp.Header.Get("Cache-Status"))
	}
	if n := len(origin.requests()); n != 1 {
		t.Errorf("origin asked %d times", n)
	}
}

// rawOrigin is an origin that writes each response byte for byte.
type rawOrigin struct {
	ln    net.Listener
	mu    sync.Mutex
	reply map[string]string // path → everything after the status line
	asked int
}

func newRawOrigin(t *testing.T) *rawOrigin {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	o := &rawOrigin{ln: ln, reply: map[string]string{}}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				br := bufio.NewReader(c)
				for {
					req, err := http.ReadRequest(br)
					if err != nil {
						return
					}
					o.mu.Lock()
					o.asked++
					rest := o.reply[req.URL.Path]
					o.mu.Unlock()
					if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\n"+rest); err != nil || req.Close || strings.Contains(rest, "Connection: close") {
						return
					}
				}
			}()
		}
	}()
	return o
}

func (o *rawOrigin) coralHost() string {
	ap := netip.MustParseAddrPort(o.ln.Addr().String())
	return fmt.Sprintf("%s.%d.nyud.test", ap.Addr(), ap.Port())
}

func chunk(s string) string { return fmt.Sprintf("%x\r\n%s\r\n", len(s), s) }

// TestRFCTransferCodings: responses whose Transfer-Encoding net/http
// refuses are fetched and decoded by the proxy itself (RFC 9112 §6.1,
// §6.3), relayed and cached without the coding (RFC 9111 §3.1: it is a
// hop-by-hop property of the message); a coding the proxy cannot undo is
// a 502, never corrupt content.
func TestRFCTransferCodings(t *testing.T) {
	var gz bytes.Buffer
	zw := gzip.NewWriter(&gz)
	io.WriteString(zw, "gzipped body")
	zw.Close()
	o := newRawOrigin(t)
	cc := "Cache-Control: max-age=600\r\n"
	o.reply["/gzip-chunked"] = cc + "Transfer-Encoding: gzip, chunked\r\n\r\n" + chunk(gz.String()) + "0\r\n\r\n"
	o.reply["/two-lines"] = cc + "Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n" +
		chunk(chunk("twice chunked")+"0\r\n\r\n") + "0\r\n\r\n"
	o.reply["/close-delimited"] = cc + "Transfer-Encoding: gzip\r\nConnection: close\r\n\r\n" + gz.String()
	o.reply["/with-length"] = cc + "Transfer-Encoding: identity, chunked\r\nContent-Length: 3\r\n\r\n" + chunk("not three bytes") + "0\r\n\r\n"
	o.reply["/unknown"] = cc + "Transfer-Encoding: x-fancy\r\nConnection: close\r\n\r\nwhatever"
	p := startLocalProxy(t, 0, nil)
	for _, tc := range []struct{ path, body string }{
		{"/gzip-chunked", "gzipped body"},
		{"/two-lines", "twice chunked"},
		{"/close-delimited", "gzipped body"},
		{"/with-length", "not three bytes"},
	} {
		for i, want := range []string{"miss", "hit"} {
			resp, body := p.get(t, o.coralHost(), tc.path)
			if resp.StatusCode != http.StatusOK || body != tc.body {
				t.Errorf("%s (%s): %d %q, want %q", tc.path, want, resp.StatusCode, body, tc.body)
			}
			if te := resp.Header.Values("Transfer-Encoding"); len(te) != 0 {
				t.Errorf("%s: Transfer-Encoding %q relayed", tc.path, te)
			}
			if i == 1 && !strings.Contains(resp.Header.Get("Cache-Status"), "hit") {
				t.Errorf("%s: second request %q, want a hit", tc.path, resp.Header.Get("Cache-Status"))
			}
			p.idle(t)
		}
		tg, _ := parseTarget(o.coralHost(), "nyud.test", tc.path, "")
		if m, ok := p.store.Peek(tg.Key()); !ok || len(m.Header.Values("Transfer-Encoding")) != 0 {
			t.Errorf("%s: stored %v with Transfer-Encoding %q", tc.path, ok, m.Header.Values("Transfer-Encoding"))
		}
	}
	if resp, body := p.get(t, o.coralHost(), "/unknown"); resp.StatusCode != http.StatusBadGateway {
		t.Errorf("an unknown transfer coding: %d %q, want 502", resp.StatusCode, body)
	}
}

// TestRFCUnsafeMethods: POST, PUT, DELETE and other unsafe methods get 405
// with Allow: GET, HEAD. They never reach the origin, so no response to
// one can ever change the resource, and there is nothing to invalidate
// (RFC 9111 §4.4 applies to caches that forward them).
func TestRFCUnsafeMethods(t *testing.T) {
	origin := newRecordingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		io.WriteString(w, "stored")
	})
	p := startLocalProxy(t, 0, nil)
	p.get(t, origin.coralHost(), "/doc")
	p.idle(t)
	for _, m := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, "M-SEARCH"} {
		resp, _ := p.raw(t, m+" /doc HTTP/1.1\r\nHost: "+origin.coralHost()+"\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: %d, Allow %q; want 405 with Allow: GET, HEAD", m, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}
	if n := len(origin.requests()); n != 1 {
		t.Errorf("origin asked %d times, want 1: unsafe methods must not reach it", n)
	}
	if _, body := p.get(t, origin.coralHost(), "/doc"); body != "stored" {
		t.Errorf("after the refused methods: %q", body)
	}
}
