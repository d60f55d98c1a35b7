package coralcaddy

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/coralcdn/coral/coraldht/host"
)

// countingOrigin is an origin web server that counts what it serves.
type countingOrigin struct {
	*httptest.Server
	mu       sync.Mutex
	requests map[string]int
	cookies  int // requests that arrived with a Cookie header
	gate     chan struct{}
	arrived  chan struct{} // closed when the first request arrives
	once     sync.Once
}

func newCountingOrigin(t *testing.T, handler func(o *countingOrigin, w http.ResponseWriter, r *http.Request)) *countingOrigin {
	o := &countingOrigin{requests: map[string]int{}, gate: make(chan struct{}), arrived: make(chan struct{})}
	o.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.requests[r.URL.Path]++
		if r.Header.Get("Cookie") != "" {
			o.cookies++
		}
		o.mu.Unlock()
		o.once.Do(func() { close(o.arrived) })
		handler(o, w, r)
	}))
	t.Cleanup(o.Close)
	return o
}

func (o *countingOrigin) count(path string) int {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.requests[path]
}

func (o *countingOrigin) port() string {
	_, port, _ := net.SplitHostPort(o.Listener.Addr().String())
	return port
}

// coralHost is the Coralized host name of the origin.
func (o *countingOrigin) coralHost() string {
	_, port, _ := net.SplitHostPort(o.Listener.Addr().String())
	return "127.0.0.1." + port + ".nyud.test"
}

var testProxyPort atomic.Int32

func startProxy(t testing.TB, options ...string) (tester *caddytest.Tester, base string) {
	t.Helper()
	port := 9180 + int(testProxyPort.Add(1))
	tester = caddytest.NewTester(t)
	tester.InitServer(proxyConfig(port, t.TempDir(), options...), "caddyfile")
	return tester, fmt.Sprintf("http://127.0.0.1:%d", port)
}

func proxyConfig(port int, dir string, options ...string) string {
	return fmt.Sprintf(`{
		skip_install_trust
		admin {$CORAL_TEST_ADMIN}
		http_port %d
		grace_period 1ns
		coral {
			listen 127.0.3.50:%d
		}
	}
	:%d {
		coral_proxy nyud.test {
			cache_dir %s
			allow_origins 127.0.0.0/8 127.0.0.1 # the origins run in this process: its own address, listed alone
			%s
		}
	}`, port, 4100+port%100, port, dir, strings.Join(options, "\n"))
}

func get(t *testing.T, base, host, path string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, base+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s%s: body: %v", host, path, err)
	}
	return resp, b
}

func TestProxyEndToEnd(t *testing.T) {
	body := bytes.Repeat([]byte("coral "), 50_000) // 300 kB
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/big":
			w.Header().Set("Content-Type", "text/plain")
			w.Header().Set("Set-Cookie", "session=secret")
			w.Header().Set("Cache-Control", "max-age=600")
			<-o.gate // hold the response until the crowd has gathered
			w.Write(body)
		case "/missing":
			w.Header().Set("Cache-Control", "max-age=60")
			http.NotFound(w, r)
		case "/gone":
			http.NotFound(w, r)
		default:
			w.Write([]byte("page " + r.URL.Path))
		}
	})
	_, base := startProxy(t, "rate_limit off") // the crowd comes from one address here
	host := o.coralHost()

	// A flash crowd of 100 cold requests: one origin fetch, 100 full bodies.
	var wg sync.WaitGroup
	statuses := make(chan string, 100)
	for range 100 {
		wg.Go(func() {
			resp, b := get(t, base, host, "/big", "Cookie", "session=mine")
			if resp.StatusCode != http.StatusOK || !bytes.Equal(b, body) {
				t.Errorf("status %d, %d bytes", resp.StatusCode, len(b))
			}
			if resp.Header.Get("Set-Cookie") != "" {
				t.Errorf("Set-Cookie passed to the client")
			}
			statuses <- resp.Header.Get("Cache-Status")
		})
	}
	// The origin answers once the first request has reached it; requests
	// arriving before or after either join the download or hit the cache.
	<-o.arrived
	close(o.gate)
	wg.Wait()
	close(statuses)
	if n := o.count("/big"); n != 1 {
		t.Errorf("origin fetched /big %d times for 100 concurrent requests, want 1", n)
	}
	if o.cookies != 0 {
		t.Errorf("%d requests reached the origin with a Cookie", o.cookies)
	}
	kinds := map[string]int{}
	for s := range statuses {
		kinds[strings.SplitN(s, ";", 3)[1]]++
	}
	t.Logf("Cache-Status kinds: %v", kinds)

	// Now a local hit.
	waitDownloads(t)
	resp, b := get(t, base, host, "/big")
	if !bytes.Equal(b, body) || !strings.Contains(resp.Header.Get("Cache-Status"), "hit") {
		t.Errorf("second request: %q, %d bytes", resp.Header.Get("Cache-Status"), len(b))
	}
	if o.count("/big") != 1 {
		t.Errorf("a hit went to the origin")
	}
	// A range from the cache.
	resp, b = get(t, base, host, "/big", "Range", "bytes=6-11")
	if resp.StatusCode != http.StatusPartialContent || string(b) != "coral " {
		t.Errorf("range: %d %q", resp.StatusCode, b)
	}

	// Negative caching: a 404 the origin declares fresh is cached too; a
	// bare one for negative_ttl. The proxy asks neutral (none of the
	// client's fields), so the bare 404 needs no second request.
	for range 3 {
		for _, path := range []string{"/missing", "/gone"} {
			resp, _ = get(t, base, host, path)
			if resp.StatusCode != http.StatusNotFound {
				t.Errorf("%s: %d", path, resp.StatusCode)
			}
		}
	}
	if n := o.count("/missing"); n != 1 {
		t.Errorf("origin asked for /missing %d times, want 1", n)
	}
	if n := o.count("/gone"); n != 1 {
		t.Errorf("origin asked for the bare 404 /gone %d times, want 1", n)
	}
}

func TestProxyRefusals(t *testing.T) {
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) { w.Write([]byte("x")) })
	_, base := startProxy(t)
	for _, tc := range []struct {
		name, method, host string
		status             int
	}{
		{"not Coralized", http.MethodGet, "www.example.com", http.StatusMisdirectedRequest},
		{"zone twice", http.MethodGet, "a.nyud.test.nyud.test", http.StatusForbidden},
		{"POST", http.MethodPost, o.coralHost(), http.StatusMethodNotAllowed},
		{"private origin", http.MethodGet, "10.0.0.1.nyud.test", http.StatusForbidden},
		{"metadata service", http.MethodGet, "169.254.169.254.nyud.test", http.StatusForbidden},
	} {
		req, _ := http.NewRequest(tc.method, base+"/", nil)
		req.Host = tc.host
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != tc.status {
			t.Errorf("%s: %d, want %d", tc.name, resp.StatusCode, tc.status)
		}
		if tc.status == http.StatusMethodNotAllowed && resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("405 without Allow")
		}
	}
	if n := o.count("/"); n != 0 {
		t.Errorf("refused requests reached the origin %d times", n)
	}
	// only-if-cached, as peers ask: 504 for what is not cached.
	resp, _ := get(t, base, o.coralHost(), "/nothing", "Cache-Control", "only-if-cached")
	if resp.StatusCode != http.StatusGatewayTimeout || o.count("/nothing") != 0 {
		t.Errorf("only-if-cached miss: %d, origin %d", resp.StatusCode, o.count("/nothing"))
	}
}

// TestProxyTruncatedOrigin: an origin that dies mid-body must not leave a
// complete-looking object behind, and the client must see the failure.
func TestProxyTruncatedOrigin(t *testing.T) {
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "100000")
		w.Write(bytes.Repeat([]byte("x"), 1000))
		if f, ok := w.(http.Flusher); ok {
			f.Flush()
		}
		panic(http.ErrAbortHandler)
	})
	_, base := startProxy(t)
	for i := range 2 {
		req, _ := http.NewRequest(http.MethodGet, base+"/cut", nil)
		req.Host = o.coralHost()
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			continue // the proxy aborted before the header: fine
		}
		b, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil && len(b) == 100000 {
			t.Fatalf("request %d: a truncated body was delivered as complete", i)
		}
		if err == nil && resp.StatusCode == http.StatusOK {
			t.Errorf("request %d: %d bytes with no error", i, len(b))
		}
	}
	if n := o.count("/cut"); n != 2 {
		t.Errorf("origin asked %d times; the failed object must not be cached", n)
	}
}

// TestProxyRevalidationAndStale: a copy that is stale at once (max-age=0,
// and min_ttl 0 for strict RFC 9111) is revalidated with its ETag on every
// request; a 304 serves the cached bytes; once the origin is gone, the
// stale copy is served rather than an error.
func TestProxyRevalidationAndStale(t *testing.T) {
	var conditional atomic.Int32
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("ETag", `"v1"`)
		w.Header().Set("Cache-Control", "max-age=0")
		if r.Header.Get("If-None-Match") == `"v1"` {
			conditional.Add(1)
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Write([]byte("version one"))
	})
	_, base := startProxy(t, "min_ttl 0", "default_ttl 0")
	host := o.coralHost()
	_, b := get(t, base, host, "/doc")
	if string(b) != "version one" {
		t.Fatalf("first: %q", b)
	}
	waitDownloads(t)
	resp, b := get(t, base, host, "/doc")
	if string(b) != "version one" || conditional.Load() != 1 || !strings.Contains(resp.Header.Get("Cache-Status"), "revalidated") {
		t.Errorf("second: %q, %d conditional requests, Cache-Status %q", b, conditional.Load(), resp.Header.Get("Cache-Status"))
	}
	o.Close() // the origin dies
	resp, b = get(t, base, host, "/doc")
	if resp.StatusCode != http.StatusOK || string(b) != "version one" || !strings.Contains(resp.Header.Get("Cache-Status"), `detail="stale"`) {
		t.Errorf("origin down: %d %q, Cache-Status %q", resp.StatusCode, b, resp.Header.Get("Cache-Status"))
	}
}

// TestProxyReloadKeepsNodeAndCache: a config reload (Caddy's /load, as
// `caddy reload` does) keeps the DSHT node (no second bind of its socket)
// and the cache (a cached object is still a hit).
func TestProxyReloadKeepsNodeAndCache(t *testing.T) {
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Write([]byte("kept"))
	})
	port := 9180 + int(testProxyPort.Add(1))
	dir := t.TempDir()
	tester := caddytest.NewTester(t)
	tester.InitServer(proxyConfig(port, dir), "caddyfile")
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	get(t, base, o.coralHost(), "/k")
	waitDownloads(t)
	nodeKey := fmt.Sprintf("127.0.3.50:%d", 4100+port%100)
	before := pooledNode(nodeKey)

	// Reload with another cache size: same node, same cache.
	tester.InitServer(proxyConfig(port, dir, "cache_size 512MiB"), "caddyfile")
	resp, b := get(t, base, o.coralHost(), "/k")
	if string(b) != "kept" || !strings.Contains(resp.Header.Get("Cache-Status"), "hit") || o.count("/k") != 1 {
		t.Errorf("after the reload: %q, Cache-Status %q, origin asked %d times", b, resp.Header.Get("Cache-Status"), o.count("/k"))
	}
	if after := pooledNode(nodeKey); before == nil || before != after {
		t.Errorf("the reload replaced the DSHT node")
	}
}

// pooledNode is the instance of the node running on listen address key.
func pooledNode(key string) *host.Instance {
	for _, inst := range host.Running() {
		if inst.Listen().String() == key {
			return inst
		}
	}
	return nil
}

// TestProxyJoinerGetsBytesAtOnce: a client that joins a download in
// progress gets the bytes already fetched while the origin is still
// holding back the rest.
func TestProxyJoinerGetsBytesAtOnce(t *testing.T) {
	first := bytes.Repeat([]byte("a"), 64<<10)
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", fmt.Sprint(2*len(first)))
		w.Header().Set("Cache-Control", "max-age=600")
		w.Write(first)
		w.(http.Flusher).Flush()
		<-o.gate
		w.Write(first)
	})
	_, base := startProxy(t)
	open := func() (*http.Response, error) {
		req, _ := http.NewRequest(http.MethodGet, base+"/slow", nil)
		req.Host = o.coralHost()
		return http.DefaultClient.Do(req)
	}
	a, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer a.Body.Close()
	if _, err := io.ReadFull(a.Body, make([]byte, len(first))); err != nil {
		t.Fatal(err)
	}
	// The origin is blocked now. A second client joins and must get the
	// first part without waiting for the origin.
	b, err := open()
	if err != nil {
		t.Fatal(err)
	}
	defer b.Body.Close()
	got := make([]byte, len(first))
	if _, err := io.ReadFull(b.Body, got); err != nil || !bytes.Equal(got, first) {
		t.Fatalf("joiner: %v", err)
	}
	if !strings.Contains(b.Header.Get("Cache-Status"), "collapsed") {
		t.Errorf("joiner's Cache-Status %q", b.Header.Get("Cache-Status"))
	}
	close(o.gate)
	rest, err := io.ReadAll(b.Body)
	if err != nil || len(rest) != len(first) {
		t.Errorf("joiner's rest: %d bytes, %v", len(rest), err)
	}
	if n := o.count("/slow"); n != 1 {
		t.Errorf("origin asked %d times", n)
	}
}

// TestProxyRedirects: an absolute redirect to the origin's host is
// Coralized; one that would loop back to the same Coralized URL is passed
// on as the origin sent it and not cached.
func TestProxyRedirects(t *testing.T) {
	var o *countingOrigin
	o = newCountingOrigin(t, func(_ *countingOrigin, w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/moved":
			http.Redirect(w, r, o.URL+"/new?x=1", http.StatusMovedPermanently)
		case "/self":
			// A CDN-unaware site sending its visitors back to "itself".
			w.Header().Set("Location", "http://127.0.0.1:"+o.port()+"/self")
			w.WriteHeader(http.StatusFound)
		}
	})
	_, base := startProxy(t)
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	req, _ := http.NewRequest(http.MethodGet, base+"/moved", nil)
	req.Host = o.coralHost()
	resp, err := noFollow.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if want := "http://" + o.coralHost() + "/new?x=1"; resp.Header.Get("Location") != want {
		t.Errorf("Location %q, want %q", resp.Header.Get("Location"), want)
	}
	for range 2 {
		req, _ = http.NewRequest(http.MethodGet, base+"/self", nil)
		req.Host = o.coralHost()
		resp, err = noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if strings.Contains(resp.Header.Get("Location"), "nyud.test") {
			t.Errorf("a self-redirect was Coralized into a loop: %q", resp.Header.Get("Location"))
		}
	}
	if n := o.count("/self"); n != 2 {
		t.Errorf("the looping redirect was cached (origin asked %d times)", n)
	}
}

// TestProxyVary: a response that varies on a request field other than
// Accept-Encoding is cached per variant: each variant is fetched once and
// served only to requests that select it.
func TestProxyVary(t *testing.T) {
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Vary", "Accept-Encoding, Accept-Language")
		w.Header().Set("Cache-Control", "max-age=600")
		w.Write([]byte("lang=" + r.Header.Get("Accept-Language")))
	})
	_, base := startProxy(t)
	steps := []struct {
		lang, want, status string
		fetches            int // origin fetches so far
	}{
		// The first miss asks neutral, learns the origin varies on
		// Accept-Language, and asks again with the client's.
		{"fr", "lang=fr", "fwd=uri-miss", 2},
		{"de", "lang=de", "fwd=uri-miss", 3},
		{"fr", "lang=fr", "hit", 3},
		{"de", "lang=de", "hit", 3},
		{"", "lang=", "fwd=uri-miss", 4}, // no Accept-Language is a variant of its own
		{"", "lang=", "hit", 4},
		{"fr", "lang=fr", "hit", 4},
	}
	for i, st := range steps {
		var hdr []string
		if st.lang != "" {
			hdr = []string{"Accept-Language", st.lang}
		}
		resp, body := get(t, base, o.coralHost(), "/v", hdr...)
		if string(body) != st.want {
			t.Fatalf("step %d (%q): body %q, want %q", i, st.lang, body, st.want)
		}
		if cs := resp.Header.Get("Cache-Status"); !strings.Contains(cs, st.status) {
			t.Errorf("step %d (%q): Cache-Status %q, want %q", i, st.lang, cs, st.status)
		}
		if n := o.count("/v"); n != st.fetches {
			t.Errorf("step %d (%q): %d origin fetches, want %d", i, st.lang, n, st.fetches)
		}
		waitDownloads(t)
	}
}

// TestProxyUncachedLargeBody: a response that may not be stored is
// streamed whole to the request that fetched it, however long it takes.
func TestProxyUncachedLargeBody(t *testing.T) {
	chunk := bytes.Repeat([]byte("u"), 64<<10)
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "no-store")
		for range 64 { // 4 MiB, flushed as it goes
			w.Write(chunk)
			w.(http.Flusher).Flush()
		}
	})
	_, base := startProxy(t)
	resp, body := get(t, base, o.coralHost(), "/big")
	if resp.StatusCode != http.StatusOK || len(body) != 64*len(chunk) {
		t.Fatalf("status %d, %d bytes, want %d", resp.StatusCode, len(body), 64*len(chunk))
	}
	if cs := resp.Header.Get("Cache-Status"); !strings.Contains(cs, "stored=false") {
		t.Errorf("Cache-Status %q", cs)
	}
}

// TestProxyStalledOrigin: an origin that stops sending mid-body is cut off
// after origin_timeout; the client gets a clean abort, not a body that
// looks complete, and nothing is cached.
func TestProxyStalledOrigin(t *testing.T) {
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Length", "2000")
		w.Write(bytes.Repeat([]byte("s"), 1000))
		w.(http.Flusher).Flush()
		select { // stalls until the proxy gives up (or the test ends)
		case <-r.Context().Done():
		case <-o.gate:
		}
	})
	defer close(o.gate)
	_, base := startProxy(t, "origin_timeout 300ms")
	req, _ := http.NewRequest(http.MethodGet, base+"/stall", nil)
	req.Host = o.coralHost()
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("a stalled download ended cleanly with %d bytes", len(body))
	}
	if len(body) >= 2000 {
		t.Fatalf("got %d bytes of a 2000-byte object from a stalled origin", len(body))
	}
	// Nothing was kept: the next request goes to the origin again.
	waitDownloads(t)
	resp2, err := http.DefaultClient.Do(req.Clone(context.Background()))
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp2.Body)
	resp2.Body.Close()
	if n := o.count("/stall"); n != 2 {
		t.Errorf("origin asked %d times, want 2 (the aborted object must not be cached)", n)
	}
}

// TestProxyAbuseControls: the blacklist (403), the per-client rate limit
// (429 with Retry-After) and the bandwidth budget (a redirect to the origin
// with coral-no-serve) as configured in a Caddyfile.
func TestProxyAbuseControls(t *testing.T) {
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Write(bytes.Repeat([]byte("b"), 600))
	})
	list := filepath.Join(t.TempDir(), "blacklist")
	if err := os.WriteFile(list, []byte("# blocked sites\nblocked.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	within0 := metricsCounterValue(coralBudgetDecisions.WithLabelValues("within_share"))
	exhausted0 := metricsCounterValue(coralBudgetDecisions.WithLabelValues("exhausted"))
	_, base := startProxy(t, "blacklist "+list, "rate_limit 1 3", "bandwidth_budget 1KiB per 1h")
	if resp, _ := get(t, base, "www.blocked.example.nyud.test", "/"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("blacklisted: %d", resp.StatusCode)
	}
	// The budget: 600 bytes served, then 600 more, then over 1 KiB.
	noFollow := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	var codes []int
	var last *http.Response
	for range 4 {
		req, _ := http.NewRequest(http.MethodGet, base+"/x", nil)
		req.Host = o.coralHost()
		resp, err := noFollow.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		codes = append(codes, resp.StatusCode)
		last = resp
	}
	// Requests 1–2 are served (1200 bytes), request 3 is over the budget,
	// and request 4 is over the rate (burst 3 at 1/s).
	if codes[0] != 200 || codes[1] != 200 || codes[2] != http.StatusFound || codes[3] != http.StatusTooManyRequests {
		t.Errorf("status codes %v, want [200 200 302 429]", codes)
	}
	if last.Header.Get("Retry-After") == "" {
		t.Errorf("429 without Retry-After")
	}
	// The budget's decisions, by decision (one origin: its share is the
	// whole budget, so it is exhausted, not over its share).
	within := metricsCounterValue(coralBudgetDecisions.WithLabelValues("within_share")) - within0
	exhausted := metricsCounterValue(coralBudgetDecisions.WithLabelValues("exhausted")) - exhausted0
	if within != 2 || exhausted != 1 {
		t.Errorf("caddy_coral_budget_decisions_total: within_share +%v, exhausted +%v; want +2 and +1", within, exhausted)
	}
}

// waitDownloads waits until no download is in progress in the test Caddy's
// caches (read from the admin API), so that what follows sees committed
// objects: a client gets the last byte just before the cache commits.
func waitDownloads(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		resp, err := http.Get("http://" + testAdmin + "/coral/status")
		if err != nil {
			t.Fatal(err)
		}
		var st struct {
			Caches []struct {
				InProgress int `json:"in_progress"`
			} `json:"caches"`
		}
		err = json.NewDecoder(resp.Body).Decode(&st)
		resp.Body.Close()
		if err != nil {
			t.Fatal(err)
		}
		busy := 0
		for _, c := range st.Caches {
			busy += c.InProgress
		}
		if busy == 0 {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d downloads still in progress after 10s", busy)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestRefusalsSayWhy (issue 22, defect 6): a 403 for an origin on a
// private address or on the blacklist carries a short body saying why.
func TestRefusalsSayWhy(t *testing.T) {
	bl := filepath.Join(t.TempDir(), "blacklist")
	if err := os.WriteFile(bl, []byte("blocked.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, base := startProxy(t, "blacklist "+bl)
	for host, want := range map[string]string{
		"10.0.0.1.nyud.test":            "origin address not allowed",
		"www.blocked.example.nyud.test": "blacklist",
	} {
		resp, body := get(t, base, host, "/")
		if resp.StatusCode != 403 || !strings.Contains(string(body), want) || !strings.HasPrefix(resp.Header.Get("Content-Type"), "text/plain") {
			t.Errorf("%s: %d %q (%s), want 403 with a body saying %q", host, resp.StatusCode, body, resp.Header.Get("Content-Type"), want)
		}
	}
}
