package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// sliceTestSize is the slice size of these tests, and sliceObjectSize
// their object's: seven slices, the last one short.
const (
	sliceTestSize   = 1 << 20
	sliceObjectSize = 6<<20 + 12345
)

// sliceOrigin serves objects of sliceObjectSize bytes at every path, with
// a strong ETag, Last-Modified and Accept-Ranges: bytes. With ignore it
// says Accept-Ranges but answers every request with the whole 200. After
// changeAfter requests (0: never) it serves another version (another
// body and ETag). It counts the body bytes it writes and records each
// request's Range.
type sliceOrigin struct {
	srv         *httptest.Server
	v1, v2      []byte
	ignore      bool
	changeAfter int64
	requests    atomic.Int64
	sent        atomic.Int64
	mu          sync.Mutex
	ranges      []string
}

func newSliceOrigin(t *testing.T, ignore bool, changeAfter int64) *sliceOrigin {
	t.Helper()
	o := &sliceOrigin{ignore: ignore, changeAfter: changeAfter, v1: randomBody(1, sliceObjectSize), v2: randomBody(2, sliceObjectSize)}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		n := o.requests.Add(1)
		o.mu.Lock()
		o.ranges = append(o.ranges, r.URL.Path+" "+r.Header.Get("Range"))
		o.mu.Unlock()
		body, etag := o.v1, `"v1"`
		if o.changeAfter > 0 && n > o.changeAfter {
			body, etag = o.v2, `"v2"`
		}
		h := w.Header()
		h.Set("Cache-Control", "max-age=3600")
		h.Set("Content-Type", "video/mp4")
		h.Set("Etag", etag)
		h.Set("X-Origin", "kept as is")
		cw := &countingWriter{ResponseWriter: w, n: &o.sent}
		if o.ignore {
			r.Header.Del("Range")
			h.Set("Accept-Ranges", "bytes")
		}
		http.ServeContent(cw, r, "", rangeModTime, bytes.NewReader(body))
	}))
	t.Cleanup(o.srv.Close)
	return o
}

func randomBody(seed uint64, n int) []byte {
	b := make([]byte, n)
	rng := rand.New(rand.NewPCG(seed, 7))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// countingWriter counts the body bytes written through it.
type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	k, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(k))
	return k, err
}

func (o *sliceOrigin) coralHost() string {
	ap := netip.MustParseAddrPort(o.srv.Listener.Addr().String())
	return fmt.Sprintf("%s.%d.nyud.test", ap.Addr(), ap.Port())
}

// asked is the requests for path so far: their Range fields.
func (o *sliceOrigin) asked(path string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []string
	for _, r := range o.ranges {
		if p, rng, _ := strings.Cut(r, " "); p == path {
			out = append(out, rng)
		}
	}
	return out
}

// sliceRanges are the Range fields of slices from..to of the test object.
func sliceRanges(from, to int) []string {
	m := manifest{size: sliceTestSize, length: sliceObjectSize}
	var out []string
	for k := from; k <= to; k++ {
		first, last := m.bounds(int64(k))
		out = append(out, fmt.Sprintf("bytes=%d-%d", first, last))
	}
	return out
}

func startSliceProxy(t *testing.T) *localProxy {
	return startLocalProxy(t, 256<<20, func(c *Config, _ *diskcache.Options) { c.SliceSize = sliceTestSize })
}

// TestSlices: an object above slice_size is fetched with one plain GET
// (slice 0 kept from it) and one If-Range request per other slice, each
// once; what the client gets is the origin's response byte for byte, head
// included; and ranges, HEAD, preconditions and a range past the end are
// answered from the slices as from a whole object.
func TestSlices(t *testing.T) {
	o := newSliceOrigin(t, false, 0)
	p := startSliceProxy(t)
	direct, err := http.Get(o.srv.URL + "/direct")
	if err != nil {
		t.Fatal(err)
	}
	direct.Body.Close()

	resp, body := p.rawGet(t, o.coralHost(), "/movie.mp4")
	if resp.StatusCode != http.StatusOK || !bytes.Equal(body, o.v1) {
		t.Fatalf("whole object: %d, %d bytes (equal %v)", resp.StatusCode, len(body), bytes.Equal(body, o.v1))
	}
	for _, k := range []string{"Etag", "Last-Modified", "Content-Type", "Content-Length", "Cache-Control", "X-Origin", "Accept-Ranges"} {
		if resp.Header.Get(k) != direct.Header.Get(k) {
			t.Errorf("%s: %q through the proxy, %q from the origin", k, resp.Header.Get(k), direct.Header.Get(k))
		}
	}
	want := append([]string{""}, sliceRanges(1, 6)...)
	if got := o.asked("/movie.mp4"); !slices.Equal(got, want) {
		t.Errorf("the origin was asked %q, want one plain GET and each other slice once: %q", got, want)
	}
	p.idle(t)
	if meta, ok := p.store.Peek(p.px.mustKey(t, o.coralHost(), "/movie.mp4")); !ok || meta.Extra[slicesField] == "" {
		t.Errorf("no manifest stored: %+v", meta.Extra)
	}

	for _, tc := range []struct {
		name   string
		method string
		hdr    []string
		status int
		body   []byte
		check  func(*http.Response) string
	}{
		{"hit", "GET", nil, 200, o.v1, nil},
		{"range across slices", "GET", []string{"Range", "bytes=1048000-3145800"}, 206, o.v1[1048000:3145801], nil},
		{"suffix range", "GET", []string{"Range", "bytes=-100"}, 206, o.v1[sliceObjectSize-100:], nil},
		{"If-Range matching", "GET", []string{"Range", "bytes=5-9", "If-Range", `"v1"`}, 206, o.v1[5:10], nil},
		{"If-Range not matching", "GET", []string{"Range", "bytes=5-9", "If-Range", `"v0"`}, 200, o.v1, nil},
		{"If-None-Match", "GET", []string{"If-None-Match", `"v1"`}, 304, nil, nil},
		{"If-Match failing", "GET", []string{"If-Match", `"v0"`}, 412, nil, nil},
		{"past the end", "GET", []string{"Range", "bytes=" + strconv.Itoa(sliceObjectSize) + "-"}, 416, nil, func(r *http.Response) string {
			if got := r.Header.Get("Content-Range"); got != "bytes */"+strconv.Itoa(sliceObjectSize) {
				return "Content-Range " + got
			}
			return ""
		}},
		{"HEAD", "HEAD", nil, 200, nil, func(r *http.Response) string {
			if r.Header.Get("Content-Length") != strconv.Itoa(sliceObjectSize) {
				return "Content-Length " + r.Header.Get("Content-Length")
			}
			return ""
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			resp, body := p.rawRequest(t, tc.method, o.coralHost(), "/movie.mp4", tc.hdr...)
			if resp.StatusCode != tc.status {
				t.Fatalf("status %d, want %d", resp.StatusCode, tc.status)
			}
			if tc.body != nil && !bytes.Equal(body, tc.body) {
				t.Errorf("%d bytes, not the %d wanted", len(body), len(tc.body))
			}
			if tc.check != nil {
				if why := tc.check(resp); why != "" {
					t.Error(why)
				}
			}
		})
	}
	if got := o.asked("/movie.mp4"); len(got) != len(want) {
		t.Errorf("the origin was asked again once the slices were stored: %q", got)
	}
}

// TestSlicesColdRange: a range of an object whose manifest is stored (a
// HEAD fetched it: slice 0 only) fetches the slices the range covers, and
// no other.
func TestSlicesColdRange(t *testing.T) {
	o := newSliceOrigin(t, false, 0)
	p := startSliceProxy(t)
	if resp, _ := p.rawRequest(t, "HEAD", o.coralHost(), "/a"); resp.StatusCode != 200 {
		t.Fatalf("HEAD: %d", resp.StatusCode)
	}
	resp, body := p.rawGet(t, o.coralHost(), "/a", "Range", "bytes=5243000-5243999")
	if resp.StatusCode != 206 || !bytes.Equal(body, o.v1[5243000:5244000]) {
		t.Fatalf("range: %d, %d bytes", resp.StatusCode, len(body))
	}
	if got, want := o.asked("/a"), append([]string{""}, sliceRanges(5, 5)...); !slices.Equal(got, want) {
		t.Errorf("the origin was asked %q, want %q", got, want)
	}
}

// TestSlicesOriginIgnoresRange: an origin that says Accept-Ranges but
// answers a slice's request with the whole 200 still gives every client
// the right bytes (each slice cut out of a whole body), and the origin's
// big objects are then kept whole.
func TestSlicesOriginIgnoresRange(t *testing.T) {
	o := newSliceOrigin(t, true, 0)
	p := startSliceProxy(t)
	resp, body := p.rawGet(t, o.coralHost(), "/a")
	if resp.StatusCode != 200 || !bytes.Equal(body, o.v1) {
		t.Fatalf("whole object: %d, %d bytes", resp.StatusCode, len(body))
	}
	resp, body = p.rawGet(t, o.coralHost(), "/a", "Range", "bytes=3000000-3000009")
	if resp.StatusCode != 206 || !bytes.Equal(body, o.v1[3000000:3000010]) {
		t.Fatalf("range: %d, %d bytes", resp.StatusCode, len(body))
	}
	resp, body = p.rawGet(t, o.coralHost(), "/b")
	if resp.StatusCode != 200 || !bytes.Equal(body, o.v1) {
		t.Fatalf("another object: %d, %d bytes", resp.StatusCode, len(body))
	}
	p.idle(t)
	if meta, ok := p.store.Peek(p.px.mustKey(t, o.coralHost(), "/b")); !ok || meta.Extra[slicesField] != "" || meta.Size != sliceObjectSize {
		t.Errorf("the next big object of an origin that ignores ranges: stored %v, manifest %q, size %d; want it whole", ok, meta.Extra[slicesField], meta.Size)
	}
}

// TestSlicesValidatorChanged: the object changes at the origin after its
// first slice. The client reading the old version is cut off with what
// it got a prefix of the old version, never a body of both; the manifest
// is dropped; the next request gets the new version whole.
func TestSlicesValidatorChanged(t *testing.T) {
	o := newSliceOrigin(t, false, 1)
	p := startSliceProxy(t)
	resp, err := http.DefaultClient.Do(p.request(t, "GET", o.coralHost(), "/a"))
	if err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err == nil || len(got) >= sliceObjectSize || !bytes.Equal(got, o.v1[:len(got)]) {
		t.Fatalf("read %d bytes (a prefix of version 1: %v), error %v; want a prefix cut short", len(got), bytes.Equal(got, o.v1[:min(len(got), len(o.v1))]), err)
	}
	p.idle(t)
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := p.store.Peek(p.px.mustKey(t, o.coralHost(), "/a")); !ok {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the manifest of the old version is still stored")
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp2, body := p.rawGet(t, o.coralHost(), "/a")
	if resp2.StatusCode != 200 || !bytes.Equal(body, o.v2) || resp2.Header.Get("Etag") != `"v2"` {
		t.Fatalf("after the change: %d %s, %d bytes (version 2: %v)", resp2.StatusCode, resp2.Header.Get("Etag"), len(body), bytes.Equal(body, o.v2))
	}
}

// TestRangePastEndOnMiss: a cold range past the end of an object whose
// origin ignores ranges gets 416 with the length, not the whole 200.
func TestRangePastEndOnMiss(t *testing.T) {
	o := newRangeOrigin(t, false)
	o.release()
	p := startLocalProxy(t, 256<<20, nil)
	resp, body := p.rawGet(t, o.coralHost(), "/x", "Range", "bytes=9000000-")
	if resp.StatusCode != http.StatusRequestedRangeNotSatisfiable || len(body) != 0 ||
		resp.Header.Get("Content-Range") != "bytes */"+strconv.Itoa(rangeObjectSize) {
		t.Fatalf("%d, Content-Range %q, %d body bytes; want 416, bytes */%d and none", resp.StatusCode, resp.Header.Get("Content-Range"), len(body), rangeObjectSize)
	}
	p.idle(t)
}

// TestSlicesAcrossPeers: three proxies read one big object, the first
// alone, then the other two at once. The origin is asked for the object
// once and for each slice once; every proxy serves the whole object byte
// for byte; a proxy asked for a cold range of an object its peers hold
// takes it from a peer, not the origin.
func TestSlicesAcrossPeers(t *testing.T) {
	o := newSliceOrigin(t, false, 0)
	small := newRangeOrigin(t, true)
	small.release()
	proxies := startTestProxiesWith(t, 3, 189, func(_ int, node *coraldht.Config, c *Config) {
		patientNode(node)
		c.SliceSize = sliceTestSize
	})
	get := func(p *testProxy, path string, hdr ...string) (*http.Response, []byte) {
		lp := &localProxy{px: p.px, store: p.px.store, srv: p.srv}
		return lp.rawGet(t, o.coralHost(), path, hdr...)
	}
	if resp, body := get(proxies[0], "/big"); resp.StatusCode != 200 || !bytes.Equal(body, o.v1) {
		t.Fatalf("proxy 0: %d, %d bytes", resp.StatusCode, len(body))
	}
	var wg sync.WaitGroup
	for _, p := range proxies[1:] {
		wg.Go(func() {
			if resp, body := get(p, "/big"); resp.StatusCode != 200 || !bytes.Equal(body, o.v1) {
				t.Errorf("%s: %d, %d bytes", p.srv.URL, resp.StatusCode, len(body))
			}
		})
	}
	wg.Wait()
	want := append([]string{""}, sliceRanges(1, 6)...)
	if got := o.asked("/big"); !slices.Equal(got, want) {
		t.Errorf("the origin was asked %q; want the object once and each slice once", got)
	}
	if sent := o.sent.Load(); sent > sliceObjectSize*105/100+8<<20 {
		t.Errorf("the origin sent %d bytes for a %d-byte object", sent, sliceObjectSize)
	}

	// A cold range at proxy 1 of an object proxy 0 holds whole.
	lp0 := &localProxy{px: proxies[0].px, store: proxies[0].px.store, srv: proxies[0].srv}
	if resp, _ := lp0.rawGet(t, small.coralHost(), "/whole"); resp.StatusCode != 200 {
		t.Fatalf("proxy 0, small object: %d", resp.StatusCode)
	}
	waitStored(t, proxies[0])
	before := len(small.rangeRequests())
	lp1 := &localProxy{px: proxies[1].px, store: proxies[1].px.store, srv: proxies[1].srv}
	resp, body := lp1.rawGet(t, small.coralHost(), "/whole", "Range", "bytes=1000-1999")
	if resp.StatusCode != 206 || !bytes.Equal(body, small.body[1000:2000]) || !strings.Contains(resp.Header.Get("Cache-Status"), "peer") {
		t.Errorf("a cold range at another proxy: %d, %d bytes, Cache-Status %q; want 206 from a peer", resp.StatusCode, len(body), resp.Header.Get("Cache-Status"))
	}
	if asked := small.rangeRequests()[before:]; slices.Contains(asked, "bytes=1000-1999") {
		t.Errorf("the origin was asked for the range a peer holds: %q", asked)
	}
	// And of the sliced object, at a proxy that has no copy of it, past
	// its slices' owners.
	proxies[2].px.store.Delete(proxies[2].px.mustKey(t, o.coralHost(), "/big"))
	resp, body = get(proxies[2], "/big", "Range", "bytes=2000000-2000099")
	if resp.StatusCode != 206 || !bytes.Equal(body, o.v1[2000000:2000100]) {
		t.Errorf("a cold range of the sliced object: %d, %d bytes", resp.StatusCode, len(body))
	}
	if got := o.asked("/big"); slices.Contains(got[len(want):], "bytes=2000000-2000099") {
		t.Errorf("the origin was asked for a range the peers hold: %q", got[len(want):])
	}
}

// mustKey is the cache key of a request for path on host.
func (p *Proxy) mustKey(t *testing.T, host, path string) string {
	t.Helper()
	pt, err := p.targets.parse(host, p.zone, path, "")
	if err != nil {
		t.Fatal(err)
	}
	return pt.key
}

// request is a request for path on host through p.
func (p *localProxy) request(t *testing.T, method, host, path string, hdr ...string) *http.Request {
	t.Helper()
	req, err := http.NewRequest(method, p.srv.URL+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return req
}

// rawRequest is rawGet with another method (HEAD: no body is read).
func (p *localProxy) rawRequest(t *testing.T, method, host, path string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	if method == "GET" {
		return p.rawGet(t, host, path, hdr...)
	}
	resp, err := http.DefaultClient.Do(p.request(t, method, host, path, hdr...))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	return resp, body
}

func TestParseContentRange(t *testing.T) {
	for _, tc := range []struct {
		in   string
		ok   bool
		want contentRange
	}{
		{"bytes 0-99/100", true, contentRange{0, 99, 100}},
		{"bytes 5-5/6", true, contentRange{5, 5, 6}},
		{"bytes 5-6/6", false, contentRange{}},
		{"bytes 6-5/9", false, contentRange{}},
		{"bytes 0-99/*", false, contentRange{}},
		{"bytes */100", false, contentRange{}},
		{"bytes +1-2/3", false, contentRange{}},
		{"items 0-1/2", false, contentRange{}},
		{"bytes 0-1/99999999999999999999", false, contentRange{}},
	} {
		got, ok := parseContentRange(tc.in)
		if ok != tc.ok || got != tc.want {
			t.Errorf("parseContentRange(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestParseManifest(t *testing.T) {
	m := manifest{size: 1 << 20, length: 5 << 20, vid: "0123456789abcdef"}
	if got, ok := parseManifest(m.String()); !ok || got != m {
		t.Errorf("round trip: %+v, %v", got, ok)
	}
	for _, bad := range []string{"", "1048576 5242880", "1048576 5242880 0123456789ABCDEF", "1 5242880 0123456789abcdef",
		"1048576 1048576 0123456789abcdef", "-1048576 5242880 0123456789abcdef", "1048576 5242880 0123456789abcdef x"} {
		if _, ok := parseManifest(bad); ok {
			t.Errorf("parseManifest(%q) accepted", bad)
		}
	}
}

// FuzzParseContentRange: whatever a response's Content-Range says, the
// parser never panics, and what it accepts is a range within its length
// that formats back to the canonical field.
func FuzzParseContentRange(f *testing.F) {
	for _, s := range []string{"bytes 0-99/100", "bytes 0-0/1", " bytes 1-2/3 ", "bytes */5", "bytes 0-99/*", "bytes 9223372036854775806-9223372036854775806/9223372036854775807"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		cr, ok := parseContentRange(s)
		if !ok {
			return
		}
		if cr.first < 0 || cr.first > cr.last || cr.last >= cr.length {
			t.Fatalf("%q: accepted %+v", s, cr)
		}
		again, ok := parseContentRange(fmt.Sprintf("bytes %d-%d/%d", cr.first, cr.last, cr.length))
		if !ok || again != cr {
			t.Fatalf("%q: %+v does not round trip (%+v)", s, cr, again)
		}
	})
}

// FuzzParseManifest: a manifest field read from the disk never panics the
// parser, and what it accepts describes slices within the bounds.
func FuzzParseManifest(f *testing.F) {
	f.Add("4194304 1073741824 0123456789abcdef")
	f.Add("1048576 1048577 ffffffffffffffff")
	f.Add("8388608 9 0123456789abcdef")
	f.Fuzz(func(t *testing.T, s string) {
		m, ok := parseManifest(s)
		if !ok {
			return
		}
		if m.size < MinSliceSize || m.size > MaxSliceSize || m.length <= m.size || m.count() < 2 {
			t.Fatalf("%q: accepted %+v", s, m)
		}
		if first, last := m.bounds(m.count() - 1); first > last || last != m.length-1 {
			t.Fatalf("%q: last slice %d-%d of %d", s, first, last, m.length)
		}
		if again, ok := parseManifest(m.String()); !ok || again != m {
			t.Fatalf("%q: no round trip", s)
		}
	})
}

// startLoopbackProxies starts n proxies like startTestProxiesWith, but
// every socket on 127.0.0.1 and a port of the kernel's choosing (no fixed
// address: no lab lock needed), their nodes patient (patientNode).
func startLoopbackProxies(t *testing.T, n int, configure func(*Config)) []*testProxy {
	t.Helper()
	var out []*testProxy
	var boot []netip.AddrPort
	for range n {
		node := testNodeWith(t, "127.0.0.1:0", patientNode)
		dht := &testDHT{Node: node}
		cfg := testConfig()
		configure(&cfg)
		cfg.Store = openTestStore(t, diskcache.Options{Dir: t.TempDir(), MaxBytes: 64 << 20, NoSync: true})
		cfg.Node = func() DHT { return dht }
		px, srv := serveAsPeer(t, cfg, netip.MustParseAddr("127.0.0.1"))
		out = append(out, &testProxy{px: px, node: node, dht: dht, srv: srv})
		boot = append(boot, node.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, p := range out {
		if err := p.node.Bootstrap(ctx, boot...); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestSlicesCrowdAtOnce: three proxies, two clients at each, all asking
// for a cold big object at the same instant. The origin is asked for the
// object once and for each other slice once (the put+get of each slice
// decides which proxy fetches it; the others wait for it, however early
// they ask), and every client gets every byte.
func TestSlicesCrowdAtOnce(t *testing.T) {
	o := newSliceOrigin(t, false, 0)
	proxies := startLoopbackProxies(t, 3, func(c *Config) { c.SliceSize = sliceTestSize })
	var wg sync.WaitGroup
	gate := make(chan struct{})
	for i := range 6 {
		p := proxies[i%3]
		lp := &localProxy{px: p.px, store: p.px.store, srv: p.srv}
		wg.Go(func() {
			<-gate
			if resp, body := lp.rawGet(t, o.coralHost(), "/crowd"); resp.StatusCode != 200 || !bytes.Equal(body, o.v1) {
				t.Errorf("client %d: %d, %d bytes", i, resp.StatusCode, len(body))
			}
		})
	}
	close(gate)
	wg.Wait()
	got := o.asked("/crowd")
	slices.Sort(got)
	want := append([]string{""}, sliceRanges(1, 6)...)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("the origin was asked %q; want the object once and each other slice once", got)
	}
	for _, p := range proxies {
		waitStored(t, p)
	}
}

// TestSliceAskedBackDuringPutGet: a peer's request for a slice this
// proxy is fetching, arriving while the fetch's put+get is still out,
// waits for its answer: if it names the asker and this proxy's address
// is the lower, the request gets 504 at once (the asker then fetches the
// slice for both). The request used to be checked only on arrival, and
// then waited for the slice: two proxies whose fetches asked each other
// waited for each other for origin_timeout + peer_timeout (18 s by
// default) before either went to the origin, longer than
// TestSlicesCrowdAtOnce's clients wait (it failed so under load, with
// 'i/o timeout' and the last slice never asked of the origin).
func TestSliceAskedBackDuringPutGet(t *testing.T) {
	o := newSliceOrigin(t, false, 0)
	self := netip.MustParseAddrPort("127.0.0.1:1")
	asker := netip.MustParseAddrPort("127.0.0.1:2") // above self
	p := startLocalProxy(t, 256<<20, func(c *Config, _ *diskcache.Options) {
		c.SliceSize = sliceTestSize
		c.PeerAddress = self
		c.OriginTimeout = time.Minute // waiting the fetch out would take that long
	})
	if resp, body := p.rawGet(t, o.coralHost(), "/a"); resp.StatusCode != 200 || !bytes.Equal(body, o.v1) {
		t.Fatalf("the object: %d, %d bytes", resp.StatusCode, len(body))
	}
	p.idle(t)
	objKey := p.px.mustKey(t, o.coralHost(), "/a")
	meta, ok := p.store.Peek(objKey)
	if !ok {
		t.Fatal("the object's manifest is not stored")
	}
	m, ok := parseManifest(meta.Extra[slicesField])
	if !ok {
		t.Fatalf("no manifest in %q", meta.Extra[slicesField])
	}
	// Slice 6 is not here, and a fetch of it is under way, its put+get
	// not answered yet.
	const k = 6
	key := sliceKey(objKey, m, k)
	if err := p.store.Delete(key); err != nil {
		t.Fatal(err)
	}
	f, started := p.px.slices.start(key)
	if !started {
		t.Fatal("slice 6 is already being fetched")
	}
	t.Cleanup(func() { p.px.endSlice(key, f, errors.New("test over")) })

	first, last := m.bounds(k)
	req := p.request(t, http.MethodGet, o.coralHost(), "/a",
		"Cache-Control", "only-if-cached", sliceField, m.vid+" "+strconv.Itoa(k),
		"Range", fmt.Sprintf("bytes=%d-%d", first, last), peerAskerField, asker.String())
	status := make(chan int, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			status <- 0
			return
		}
		resp.Body.Close()
		status <- resp.StatusCode
	}()
	// The request holds the manifest open from its lookup on: it has
	// come (and, before the fix, made its one check).
	for deadline := time.Now().Add(10 * time.Second); p.store.Stats().Readers == 0; time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the peer's request never reached the manifest")
		}
	}
	// The put+get answers: the fetch asks the asker.
	f.asking.Store(&[]netip.AddrPort{asker})
	f.peersKnown()
	select {
	case got := <-status:
		if got != http.StatusGatewayTimeout {
			t.Errorf("a peer asked back by the fetch it waits for: %d, want 504", got)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("a peer asked back by the fetch it waits for still waits 20 s later (origin_timeout 1 min)")
	}
}
