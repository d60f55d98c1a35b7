package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// TestNegativeCaching: issue 41. A bare 404 (no freshness information)
// is kept for the negative lifetime, so a crowd on a page that is gone
// costs its origin the fetch and the proxy's check without the client's
// fields, then nothing; a 403 and a 500 are not kept; and a client's own
// fields cannot plant an error for others: a 404 the origin gives only to
// an evil User-Agent is relayed to that client alone, and the next client
// gets the page (CPDoS, "Your Cache Has Fallen").
func TestNegativeCaching(t *testing.T) {
	o := newRecordingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.Contains(r.UserAgent(), "evil"):
			http.Error(w, "blocked", http.StatusNotFound)
		case r.URL.Path == "/gone":
			http.Error(w, "gone", http.StatusNotFound)
		case r.URL.Path == "/forbidden":
			http.Error(w, "no", http.StatusForbidden)
		case r.URL.Path == "/broken":
			http.Error(w, "broken", http.StatusInternalServerError)
		default:
			w.Header().Set("Cache-Control", "max-age=600")
			io.WriteString(w, "the page")
		}
	})
	p := startLocalProxy(t, 0, nil)
	asked := func(path string) int {
		n := 0
		for _, r := range o.requests() {
			if r.URL.Path == path {
				n++
			}
		}
		return n
	}
	for i := range 5 {
		if resp, _ := p.get(t, o.coralHost(), "/gone"); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("request %d for /gone: %d, want 404", i, resp.StatusCode)
		}
	}
	if n := asked("/gone"); n != 2 {
		t.Errorf("5 requests for a bare 404: the origin asked %d times, want 2 (the fetch and the check without the client's fields)", n)
	}
	for _, path := range []string{"/forbidden", "/broken"} {
		for range 3 {
			p.get(t, o.coralHost(), path)
		}
		if n := asked(path); n != 3 {
			t.Errorf("3 requests for %s: the origin asked %d times, want 3 (not kept)", path, n)
		}
	}
	if resp, _ := p.get(t, o.coralHost(), "/page", "User-Agent", "evil/1"); resp.StatusCode != http.StatusNotFound {
		t.Fatalf("the evil client: %d, want its 404", resp.StatusCode)
	}
	if resp, body := p.get(t, o.coralHost(), "/page", "User-Agent", "browser/1"); resp.StatusCode != http.StatusOK || body != "the page" {
		t.Errorf("the next client after a provoked 404: %d %q, want 200 with the page", resp.StatusCode, body)
	}
	// A 404 provoked once the page is stored does not replace it.
	p.get(t, o.coralHost(), "/page", "User-Agent", "evil/2")
	if resp, body := p.get(t, o.coralHost(), "/page"); resp.StatusCode != http.StatusOK || body != "the page" {
		t.Errorf("after a provoked 404 on a stored page: %d %q, want the page", resp.StatusCode, body)
	}
}

// TestErrorCrowdCollapsed: issue 41. Concurrent identical requests for
// a URL whose origin answers a bare 500 (never kept) wait for one origin
// response and all get it; a request that sent other fields does not get
// that answer but its own.
func TestErrorCrowdCollapsed(t *testing.T) {
	gate := make(chan struct{})
	o := newRecordingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		<-gate
		if r.URL.Path == "/nostore" {
			w.Header().Set("Cache-Control", "no-store")
			io.WriteString(w, "yours")
			return
		}
		http.Error(w, "broken for "+r.Header.Get("Accept-Language"), http.StatusInternalServerError)
	})
	open := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(open) // before the origin's Close, which waits for its handlers
	p := startLocalProxy(t, 0, func(c *Config, so *diskcache.Options) { c.MaxDownloadsPerClient = 64 })
	crowd := func(path string, n int, lang func(i int) string) []string {
		bodies := make([]string, n)
		var wg sync.WaitGroup
		for i := range n {
			wg.Go(func() {
				resp, body := p.get(t, o.coralHost(), path, "Accept-Language", lang(i))
				bodies[i] = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(body))
			})
		}
		// Every request is waiting (the first at the origin) before the
		// origin answers.
		for deadline := time.Now().Add(10 * time.Second); len(o.requests()) < 1 || p.px.waiting() < n; {
			if time.Now().After(deadline) {
				t.Fatalf("%s: the crowd never gathered", path)
			}
			time.Sleep(time.Millisecond)
		}
		open()
		wg.Wait()
		return bodies
	}
	lang := func(i int) string {
		if i == 19 {
			return "fr"
		}
		return "en"
	}
	bodies := crowd("/broken", 20, lang)
	for i, b := range bodies {
		if want := "500 broken for " + lang(i); b != want && !(i == 0 && b == "500 broken for fr") {
			t.Errorf("request %d: %q, want %q", i, b, want)
		}
	}
	if n := len(o.requests()); n > 2 {
		t.Errorf("20 concurrent requests for a 500, one with other fields: %d origin requests, want at most 2", n)
	}
}

// waiting is how many requests hold the downloads running.
func (p *Proxy) waiting() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	n := 0
	for _, d := range p.inflight {
		n += d.holders
	}
	return n
}
