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
// costs its origin one request, sequential or concurrent: the proxy asks
// neutral (none of the client's fields: neutral.go), so the answer needs
// no confirmation. A 500 is not kept. And a client's own fields cannot
// plant an error for others: a client whose User-Agent the origin answers
// with 404 gets the page everyone gets, and the page is what is stored.
// (The old code asked twice for the 404: the fetch with the client's
// fields, then the check without them.)
func TestNegativeCaching(t *testing.T) {
	o := newRecordingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.Contains(r.UserAgent(), "evil"):
			http.Error(w, "blocked", http.StatusNotFound)
		case strings.HasPrefix(r.URL.Path, "/gone"):
			http.Error(w, "gone", http.StatusNotFound)
		case r.URL.Path == "/broken":
			http.Error(w, "broken", http.StatusInternalServerError)
		default:
			w.Header().Set("Cache-Control", "max-age=600")
			io.WriteString(w, "the page")
		}
	})
	p := startLocalProxy(t, 0, func(c *Config, so *diskcache.Options) { c.MaxDownloadsPerClient = 64 })
	asked := func(path string) int { return o.asked(path) }
	for i := range 5 {
		if resp, _ := p.get(t, o.coralHost(), "/gone", "User-Agent", fmt.Sprintf("browser/%d", i), "Accept-Language", "fr"); resp.StatusCode != http.StatusNotFound {
			t.Fatalf("request %d for /gone: %d, want 404", i, resp.StatusCode)
		}
	}
	if n := asked("/gone"); n != 1 {
		t.Errorf("5 sequential requests for a bare 404: the origin asked %d times, want 1", n)
	}
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Go(func() {
			if resp, _ := p.get(t, o.coralHost(), "/gone-crowd", "User-Agent", fmt.Sprintf("browser/%d", i)); resp.StatusCode != http.StatusNotFound {
				t.Errorf("concurrent request %d for /gone-crowd: %d, want 404", i, resp.StatusCode)
			}
		})
	}
	wg.Wait()
	if n := asked("/gone-crowd"); n != 1 {
		t.Errorf("50 concurrent requests for a bare 404: the origin asked %d times, want 1", n)
	}
	for range 3 {
		p.get(t, o.coralHost(), "/broken")
	}
	if n := asked("/broken"); n != 3 {
		t.Errorf("3 requests for /broken: the origin asked %d times, want 3 (not kept)", n)
	}
	if resp, body := p.get(t, o.coralHost(), "/page", "User-Agent", "evil/1"); resp.StatusCode != http.StatusOK || body != "the page" {
		t.Fatalf("the evil client: %d %q, want the page everyone gets", resp.StatusCode, body)
	}
	p.idle(t)
	if resp, body := p.get(t, o.coralHost(), "/page", "User-Agent", "browser/1"); resp.StatusCode != http.StatusOK || body != "the page" {
		t.Errorf("the next client after the evil one: %d %q, want 200 with the page", resp.StatusCode, body)
	}
	for _, r := range o.requests() {
		if strings.Contains(r.UserAgent(), "evil") || strings.Contains(r.UserAgent(), "browser") || r.Header.Get("X-Forwarded-For") != "" {
			t.Errorf("%s: the origin got a client's fields (User-Agent %q, X-Forwarded-For %q); want the neutral request", r.URL.Path, r.UserAgent(), r.Header.Get("X-Forwarded-For"))
		}
	}
}

// TestNegativeCachingFieldsMatter: issue 41. An origin that shows it
// looks at clients' fields (a Vary naming User-Agent) is asked with them,
// and each client gets its variant; its bare errors are then kept only if
// a request without the client's fields gets them too, so a User-Agent it
// answers with 404 plants nothing, on a URL stored or not. A 403 to the
// neutral request (a filter that wants a browser's User-Agent) is asked
// again with the client's fields, and the origin remembered.
func TestNegativeCachingFieldsMatter(t *testing.T) {
	o := newRecordingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		switch {
		case strings.Contains(r.UserAgent(), "evil"):
			http.Error(w, "blocked", http.StatusNotFound)
		case strings.HasPrefix(r.URL.Path, "/gone"):
			http.Error(w, "gone", http.StatusNotFound)
		default:
			w.Header().Set("Cache-Control", "max-age=600")
			w.Header().Set("Vary", "User-Agent")
			io.WriteString(w, "page for "+strings.Fields(r.UserAgent())[0])
		}
	})
	p := startLocalProxy(t, 0, nil)
	get := func(path, ua string) (int, string) {
		t.Helper()
		resp, body := p.get(t, o.coralHost(), path, "User-Agent", ua)
		p.idle(t)
		return resp.StatusCode, body
	}
	// The neutral request learns the origin varies, then the client's own.
	if code, body := get("/page", "browser/1"); code != http.StatusOK || body != "page for browser/1" {
		t.Fatalf("browser/1: %d %q", code, body)
	}
	if n := o.asked("/page"); n != 2 {
		t.Errorf("the first request for a page that varies: %d origin requests, want 2 (neutral, then the client's)", n)
	}
	if code, body := get("/page", "browser/2"); code != http.StatusOK || body != "page for browser/2" {
		t.Errorf("browser/2: %d %q, want its own variant", code, body)
	}
	if code, body := get("/page", "browser/1"); code != http.StatusOK || body != "page for browser/1" {
		t.Errorf("browser/1 again: %d %q", code, body)
	}
	if n := o.asked("/page"); n != 3 {
		t.Errorf("%d origin requests for /page, want 3", n)
	}
	// A stored page, and a URL not stored: the evil User-Agent gets its
	// 404, alone.
	for _, path := range []string{"/page", "/other"} {
		if code, _ := get(path, "evil/1"); code != http.StatusNotFound {
			t.Errorf("evil on %s: %d, want its 404", path, code)
		}
		if code, body := get(path, "browser/3"); code != http.StatusOK || body != "page for browser/3" {
			t.Errorf("browser/3 on %s after the evil client: %d %q, want its page", path, code, body)
		}
	}
	// A bare 404 for everyone, fetched with the client's fields: kept
	// after the confirmation.
	for range 3 {
		if code, _ := get("/gone", "browser/1"); code != http.StatusNotFound {
			t.Errorf("/gone: %d", code)
		}
	}
	if n := o.asked("/gone"); n != 2 {
		t.Errorf("3 requests for a bare 404 of an origin that varies on User-Agent: %d origin requests, want 2 (the client's, the check)", n)
	}

	// A filter that refuses the proxy's own User-Agent.
	f := newRecordingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if !strings.Contains(r.UserAgent(), "Mozilla") {
			http.Error(w, "no robots", http.StatusForbidden)
			return
		}
		w.Header().Set("Cache-Control", "max-age=600")
		io.WriteString(w, "for browsers")
	})
	for i, path := range []string{"/a", "/b"} {
		resp, body := p.get(t, f.coralHost(), path, "User-Agent", "Mozilla/5.0")
		if resp.StatusCode != http.StatusOK || body != "for browsers" {
			t.Errorf("a browser behind a filter, %s: %d %q", path, resp.StatusCode, body)
		}
		if want := 2 - i; f.asked(path) != want { // then remembered
			t.Errorf("%s: %d origin requests, want %d", path, f.asked(path), want)
		}
	}
}

// TestNegativeCrowdAcrossProxies: issue 41's bound. A crowd on a bare
// 404 across three proxies, concurrent and then sequential, each client
// with its own User-Agent, costs the origin one request: the first proxy
// asks neutral and keeps the answer, the others find it through the DSHT.
func TestNegativeCrowdAcrossProxies(t *testing.T) {
	proxies := startTestProxiesIn(t, 3, 190)
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		time.Sleep(20 * time.Millisecond) // a slow origin, so the crowd overlaps: not a synchronisation
		http.Error(w, "gone", http.StatusNotFound)
	})
	ask := func(p *testProxy, i int) {
		req, _ := http.NewRequest(http.MethodGet, p.srv.URL+"/gone", nil)
		req.Host = o.coralHost()
		req.Header.Set("User-Agent", fmt.Sprintf("browser/%d", i))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusNotFound {
			t.Errorf("request %d via %s: %d, want 404", i, p.srv.URL, resp.StatusCode)
		}
	}
	var wg sync.WaitGroup
	for i := range 60 {
		wg.Go(func() { ask(proxies[i%3], i) })
	}
	wg.Wait()
	for i := range 60 {
		ask(proxies[i%3], 60+i)
	}
	if n := o.count("/gone"); n != 1 {
		t.Errorf("120 requests for a bare 404 across 3 proxies: %d origin requests, want 1", n)
	}
}

// TestErrorCrowdCollapsed: issue 41. Concurrent identical requests for
// a URL whose origin answers a bare 500 (never kept) wait for one origin
// response and all get it; a request that sent other fields does not get
// that answer but its own (the origin says it varies on Accept-Language).
// Whichever request comes first, the crowd reaches the origin twice: once
// for each set of fields.
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
		w.Header().Set("Vary", "Accept-Language")
		if r.URL.Path == "/negotiates" {
			return
		}
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
	// The origin says it varies on Accept-Language, so the proxy asks it
	// with the client's fields from then on (neutral.go).
	p.get(t, o.coralHost(), "/negotiates", "Accept-Language", "en")
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

// TestErrorCrowdNeutral: issue 41. A crowd on a 500 from an origin that
// names no client field in Vary waits for one neutral request, and every
// request gets its answer whatever fields it sent: one origin request.
func TestErrorCrowdNeutral(t *testing.T) {
	gate := make(chan struct{})
	o := newRecordingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		<-gate
		http.Error(w, "broken", http.StatusInternalServerError)
	})
	opened := sync.OnceFunc(func() { close(gate) })
	t.Cleanup(opened) // before the origin's Close, which waits for its handlers
	p := startLocalProxy(t, 0, func(c *Config, so *diskcache.Options) { c.MaxDownloadsPerClient = 64 })
	until := func(what string, ok func() bool) {
		t.Helper()
		for deadline := time.Now().Add(10 * time.Second); !ok(); time.Sleep(time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%s never happened (origin %d, waiting %d)", what, len(o.requests()), p.px.waiting())
			}
		}
	}
	bodies := make([]string, 20)
	var wg sync.WaitGroup
	ask := func(i int) {
		wg.Go(func() {
			resp, body := p.get(t, o.coralHost(), "/broken", "Accept-Language", fmt.Sprintf("l%d", i), "User-Agent", fmt.Sprintf("browser/%d", i))
			bodies[i] = fmt.Sprintf("%d %s", resp.StatusCode, strings.TrimSpace(body))
		})
	}
	ask(0)
	until("the first request at the origin", func() bool { return o.asked("/broken") == 1 })
	for i := 1; i < 20; i++ {
		ask(i)
	}
	until("the crowd waiting", func() bool { return p.px.waiting() == 20 })
	opened()
	wg.Wait()
	for i, b := range bodies {
		if b != "500 broken" {
			t.Errorf("request %d: %q, want the 500", i, b)
		}
	}
	if n := o.asked("/broken"); n != 1 {
		t.Errorf("20 concurrent requests with 20 sets of fields for a 500: %d origin requests, want 1", n)
	}
}

// asked is how many requests for path the origin got.
func (o *recordingOrigin) asked(path string) int {
	n := 0
	for _, r := range o.requests() {
		if r.URL.Path == path {
			n++
		}
	}
	return n
}
