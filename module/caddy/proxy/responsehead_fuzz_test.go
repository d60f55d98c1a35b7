package proxy

import (
	"bytes"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// byteConn is a net.Conn that reads b (deadlines are ignored).
type byteConn struct {
	net.Conn
	r *bytes.Reader
}

func (c byteConn) Read(p []byte) (int, error)      { return c.r.Read(p) }
func (c byteConn) SetReadDeadline(time.Time) error { return nil }

// FuzzReadHead: readHead never panics; a head it accepts keeps within the
// bounds, has no framing fields left, only valid field names and values,
// and reads back the same when written out again.
func FuzzReadHead(f *testing.F) {
	for _, s := range []string{
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\nContent-Length: 3\r\n\r\nbody",
		"HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\nHTTP/1.0 404 Not Found\nX-A:  b \n\n",
		"HTTP/1.1 200 OK\r\nX-A: a\r\n folded\r\n\r\n",
		"HTTP/1.1 2000\r\n\r\n",
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		resp, codings, _, src, err := readHead(byteConn{r: bytes.NewReader(b)}, time.Second)
		if err != nil {
			return
		}
		if src.n > int64(len(b)) || resp.StatusCode < 200 || resp.StatusCode > 999 {
			t.Fatalf("read %d of %d bytes, status %d", src.n, len(b), resp.StatusCode)
		}
		n := 0
		for k, vs := range resp.Header {
			if !validFieldName(k) || k == "Transfer-Encoding" || k == "Content-Length" {
				t.Fatalf("field %q", k)
			}
			for _, v := range vs {
				if !validFieldValue(v) || v != strings.Trim(v, " \t") {
					t.Fatalf("%s: %q", k, v)
				}
			}
			n += len(vs)
		}
		if n > maxHeadFields {
			t.Fatalf("%d fields", n)
		}
		for _, c := range codings {
			if c == "" || c != strings.ToLower(c) {
				t.Fatalf("codings %q", codings)
			}
		}
		var again bytes.Buffer
		again.WriteString(resp.Proto + " " + resp.Status + "\r\n")
		resp.Header.Write(&again)
		again.WriteString("\r\n")
		resp2, _, _, _, err := readHead(byteConn{r: bytes.NewReader(again.Bytes())}, time.Second)
		if err != nil {
			t.Fatalf("written out again: %v\n%q", err, again.String())
		}
		if resp2.StatusCode != resp.StatusCode || !equalHeaders(resp.Header, resp2.Header) {
			t.Fatalf("round trip: %d %v, then %d %v", resp.StatusCode, resp.Header, resp2.StatusCode, resp2.Header)
		}
	})
}

func equalHeaders(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if strings.Join(v, "\x00") != strings.Join(b[k], "\x00") {
			return false
		}
	}
	return true
}
