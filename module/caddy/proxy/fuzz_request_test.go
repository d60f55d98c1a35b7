package proxy

import (
	"bufio"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// FuzzRequestThroughProxy drives whole requests (request line, Host and
// other fields, as raw bytes through net/http's own parser) through the
// handler against an in-process origin, and checks the invariants that
// keep the cache from being poisoned:
//
//   - every request the origin gets is for the origin the Coralized host
//     names (its Host is that origin's host and port);
//   - every object stored is stored under the key of exactly the URL the
//     origin was asked for (the key hashes the normalized URL, and the
//     recorded URL is the origin's request line);
//   - nothing panics (other than http.ErrAbortHandler, the way a handler
//     cuts a body short on purpose).
//
// "ORIGIN" in the request line, the host and the fields stands for the
// in-process origin's Coralized name (127.0.0.1.<port>.nyud.test).
func FuzzRequestThroughProxy(f *testing.F) {
	origin := newRecordingOrigin(f, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Write([]byte("origin " + r.RequestURI))
	})
	p := startLocalProxy(f, 0, func(c *Config, _ *diskcache.Options) { c.OriginTimeout = 2 * time.Second })
	// No name resolution: a fuzzed host must not make the test wait on DNS.
	noDNS := &net.Resolver{PreferGo: true, Dial: func(context.Context, string, string) (net.Conn, error) {
		return nil, errors.New("no DNS in this test")
	}}
	tr := p.px.origin.Transport.(*http.Transport)
	dialer := &net.Dialer{Timeout: time.Second, Resolver: noDNS, Control: p.px.guard.control}
	tr.DialContext = dialer.DialContext
	coralHost := origin.coralHost()

	for _, seed := range [][3]string{
		{"GET / HTTP/1.1", "ORIGIN", ""},
		{"GET http:@127.0.0.1:1/ HTTP/1.1", "ORIGIN", ""},
		{"GET http:ORIGIN/x HTTP/1.1", "ORIGIN", ""},
		{"GET /upload/%2e%2e/index.html HTTP/1.1", "ORIGIN", ""},
		{"GET http://ORIGIN/abs?q=1 HTTP/1.1", "other.example", ""},
		{"GET http://user:pw@ORIGIN/ HTTP/1.1", "ORIGIN", ""},
		{"GET /a?b=%zz&c=d#frag HTTP/1.1", "ORIGIN:8080", "Accept: */*\r\nX-Original-URL: /admin"},
		{"GET //127.0.0.1:1/x HTTP/1.1", "ORIGIN", ""},
		{"GET /x HTTP/1.1", "ORIGIN", "Cache-Control: only-if-cached"},
		{"HEAD /x HTTP/1.0", "ORIGIN", "Authorization: Basic eDp5"},
		{"GET /%2e%2e%2f%2e%2e%2fetc/passwd HTTP/1.1", "ORIGIN", ""},
		{"GET /a/./b/../../../c;x=1?%41=%7e HTTP/1.1", "ORIGIN.", "Connection: X-Forwarded-Host\r\nX-Forwarded-Host: evil"},
		{"GET * HTTP/1.1", "ORIGIN", ""},
		{"GET /x HTTP/1.1", "ORIGIN.nyud.test", ""},
		{"GET /x HTTP/1.1", "127.0.0.1.1.nyud.test", ""},
		{"GET /x HTTP/1.1", "www.example.com.nyud.test", ""},
	} {
		f.Add(seed[0], seed[1], seed[2])
	}
	f.Fuzz(func(t *testing.T, line, host, fields string) {
		expand := func(s string) string { return strings.ReplaceAll(s, "ORIGIN", coralHost) }
		raw := expand(line) + "\r\nHost: " + expand(host) + "\r\n"
		if fields != "" {
			raw += expand(fields) + "\r\n"
		}
		req, err := http.ReadRequest(bufio.NewReader(strings.NewReader(raw + "\r\n")))
		if err != nil {
			return // net/http's server would have refused it
		}
		req.RemoteAddr = "127.0.0.9:1234"
		origin.mu.Lock()
		origin.seen = nil
		origin.mu.Unlock()
		rec := httptest.NewRecorder()
		func() {
			defer func() {
				if v := recover(); v != nil && v != http.ErrAbortHandler {
					panic(v)
				}
			}()
			serveOrError(p.px, rec, req)
		}()
		p.idle(t)

		asked := map[string]bool{}
		for _, or := range origin.requests() {
			tg, err := requestTarget(req, p.px.zone)
			if err != nil {
				t.Fatalf("%q: the origin was asked for %s although the request is refused: %v", raw, or.RequestURI, err)
			}
			if want := tg.OriginURL().Host; or.Host != want {
				t.Fatalf("%q: the origin got Host %q, want the Coralized origin %q", raw, or.Host, want)
			}
			asked["http://"+or.Host+or.RequestURI] = true
		}
		var keys []string
		p.store.Range(func(info diskcache.Info) bool {
			keys = append(keys, info.Key)
			return true
		})
		for _, key := range keys {
			m, ok := p.store.Peek(key)
			if !ok {
				continue
			}
			stored := m.Extra["url"]
			if !asked[stored] {
				t.Fatalf("%q: stored %s under %s, a URL the origin was not asked for (asked: %v)", raw, stored, key, asked)
			}
			u, err := url.Parse(stored)
			if err != nil {
				t.Fatalf("%q: stored URL %q: %v", raw, stored, err)
			}
			port, _ := coralname.URLPort(u)
			if want := coralname.CacheKey("http", u.Hostname(), port, u.EscapedPath(), u.RawQuery); key != want {
				t.Fatalf("%q: %s stored under %s, but its key is %s", raw, stored, key, want)
			}
			if err := p.store.Delete(key); err != nil {
				t.Fatal(err)
			}
		}
	})
}
