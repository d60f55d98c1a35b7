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
// that answer but its own. Whichever request comes first, the crowd
// reaches the origin twice: once for each set of fields.
func TestErrorCrowdCollapsed(t *testing.T) {
	// The origin holds each request until the test opens the gate of its
	// path and language, so who starts each download is decided here.
	var gmu sync.Mutex
	gates := map[string]chan struct{}{}
	gate := func(key string) chan struct{} {
		gmu.Lock()
		defer gmu.Unlock()
		if gates[key] == nil {
			gates[key] = make(chan struct{})
		}
		return gates[key]
	}
	opened := map[string]bool{}
	open := func(key string) {
		if !opened[key] {
			opened[key] = true
			close(gate(key))
		}
	}
	o := newRecordingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		<-gate(r.URL.Path + " " + r.Header.Get("Accept-Language"))
		http.Error(w, "broken for "+r.Header.Get("Accept-Language"), http.StatusInternalServerError)
	})
	t.Cleanup(func() { // before the origin's Close, which waits for its handlers
		for _, path := range []string{"/en-first", "/fr-first"} {
			open(path + " en")
			open(path + " fr")
		}
	})
	p := startLocalProxy(t, 0, func(c *Config, so *diskcache.Options) { c.MaxDownloadsPerClient = 64 })
	origin := func(path string) int {
		n := 0
		for _, r := range o.requests() {
			if r.URL.Path == path {
				n++
			}
		}
		return n
	}
	until := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never happened (origin %d, waiting %d)", what, len(o.requests()), p.px.waiting())
			}
		}
	}
	for _, first := range []string{"en", "fr"} {
		path := "/" + first + "-first"
		lang := func(i int) string {
			switch {
			case i == 0:
				return first
			case i == 19:
				return "fr"
			}
			return "en"
		}
		bodies := make([]string, 20)
		var wg sync.WaitGroup
		ask := func(i int) {
			wg.Go(func() {
				resp, body := p.get(t, o.coralHost(), path, "Accept-Language", lang(i))
				bodies[i] = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(body))
			})
		}
		ask(0)
		until(path+": the first request at the origin", func() bool { return origin(path) == 1 })
		for i := 1; i < 20; i++ {
			ask(i)
		}
		until(path+": the crowd waiting", func() bool { return p.px.waiting() == 20 })
		open(path + " " + first)
		// The others, whose fields differ from the first's, start one
		// more download between them.
		others := 1 // the one "fr" after an "en"
		if first == "fr" {
			others = 18 // every "en"
		}
		until(path+": the second download", func() bool { return origin(path) == 2 && p.px.waiting() == others })
		open(path + " en")
		open(path + " fr")
		wg.Wait()
		for i, b := range bodies {
			if want := "500 broken for " + lang(i); b != want {
				t.Errorf("%s: request %d: %q, want %q", path, i, b, want)
			}
		}
		if n := origin(path); n != 2 {
			t.Errorf("%s: 20 concurrent requests for a 500 in two languages: %d origin requests, want 2", path, n)
		}
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
