package proxylab

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"
)

// Addresses: the origin is 127.0.70.1; each test has its own /24 for its
// proxies, so a process left over from one test cannot disturb another.
//
//	127.0.71.1        TestCrowdOneProxy
//	127.0.72.1–.5     TestFlashCrowdFiveProxies
//	127.0.73.1        TestJoinerFirstByte
//	127.0.74.1, .2    TestPeerKilledMidTransfer/content-length
//	127.0.74.11, .12  TestPeerKilledMidTransfer/chunked
//	127.0.75.1        TestStaleWhenOriginDown
//	127.0.76.1        TestCookiesStripped
//	127.0.77.1        TestPrivateOriginsRefused
//	127.0.77.2, .3    TestPrivateOriginByName
//	127.0.78.1        TestMemoryOneGiB
//	127.0.79.1        TestReloadKeepsNodeAndCache

// TestCrowdOneProxy: 100 concurrent cold requests for one object at one
// proxy make exactly one origin fetch, and every client gets the whole
// body. The origin holds the body after 64 KiB until all 100 clients are
// reading the one download (the admin API counts the cache's readers), so
// the crowd is provably concurrent.
func TestCrowdOneProxy(t *testing.T) {
	o := newOrigin(t)
	p := startOne(t, netip.MustParseAddr("127.0.71.1"), proxyOptions{})
	c := newClient(t)
	const clients, size = 100, 1 << 20
	path := "/crowd/object.bin"
	uri := fmt.Sprintf("%s?size=%d&hold=%d", path, size, 64<<10)
	want := newContent(path, size).bytes()
	defer o.release(path)

	type result struct {
		status      int
		cacheStatus string
		body        []byte
		err         error
	}
	results := make(chan result, clients)
	var wg sync.WaitGroup
	for range clients {
		wg.Go(func() {
			resp, b, err := fetch(c, p, o.coralHost(), uri)
			if err != nil {
				results <- result{err: err, body: b}
				return
			}
			results <- result{status: resp.StatusCode, cacheStatus: resp.Header.Get("Cache-Status"), body: b}
		})
	}
	waitFor(t, "all clients reading the download", 30*time.Second, []*proxy{p}, func() error {
		st, err := p.status()
		if err != nil {
			return err
		}
		inProgress, readers, _, _ := st.cacheTotals()
		if readers < clients {
			return fmt.Errorf("%d readers of %d downloads in progress; origin asked %d times", readers, inProgress, o.count(path))
		}
		return nil
	})
	o.release(path)
	wg.Wait()
	close(results)

	kinds := map[string]int{}
	for r := range results {
		switch {
		case r.err != nil:
			t.Errorf("client: %v after %d bytes", r.err, len(r.body))
		case r.status != http.StatusOK || !bytes.Equal(r.body, want):
			t.Errorf("client: status %d, %d bytes, correct %v", r.status, len(r.body), bytes.Equal(r.body, want))
		}
		kinds[r.cacheStatus]++
	}
	t.Logf("origin fetches: %d; Cache-Status: %v", o.count(path), kinds)
	if n := o.count(path); n != 1 {
		t.Errorf("origin fetched %s %d times for %d concurrent requests, want 1", path, n, clients)
	}
	var misses, collapsed int
	for cs, n := range kinds {
		switch {
		case strings.Contains(cs, "collapsed"):
			collapsed += n
		case detail(cs) == "origin":
			misses += n
		}
	}
	if misses != 1 || collapsed != clients-1 {
		t.Errorf("Cache-Status: %d misses from the origin and %d collapsed, want 1 and %d", misses, collapsed, clients-1)
	}
}

// TestFlashCrowdFiveProxies: five proxies in one DSHT network, each asked
// for the same eight objects at the same instant, fetch each object from
// the origin exactly once; the other copies come from peers (or by joining
// a download), and every body is correct.
func TestFlashCrowdFiveProxies(t *testing.T) {
	o := newOrigin(t)
	var ips []netip.Addr
	for i := range 5 {
		ips = append(ips, netip.AddrFrom4([4]byte{127, 0, 72, byte(1 + i)}))
	}
	ps := startNetwork(t, ips, proxyOptions{})
	c := newClient(t)
	const objects, size, rate = 8, 256 << 10, 1 << 20 // each download takes ~250 ms

	type result struct {
		proxy, object int
		status        int
		cacheStatus   string
		body          []byte
		err           error
	}
	results := make(chan result, len(ps)*objects)
	start := make(chan struct{})
	var waiting, wg sync.WaitGroup
	for pi, p := range ps {
		for obj := range objects {
			waiting.Add(1)
			wg.Go(func() {
				uri := fmt.Sprintf("/flash/%d.bin?size=%d&rate=%d", obj, size, rate)
				ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
				defer cancel()
				req := request(ctx, p, o.coralHost(), uri)
				waiting.Done()
				<-start
				r := result{proxy: pi, object: obj}
				resp, err := c.Do(req)
				if err == nil {
					r.status, r.cacheStatus = resp.StatusCode, resp.Header.Get("Cache-Status")
					r.body, err = io.ReadAll(resp.Body)
					resp.Body.Close()
				}
				r.err = err
				results <- r
			})
		}
	}
	waiting.Wait()
	close(start)
	wg.Wait()
	close(results)

	fromOrigin := map[int]int{}
	kinds := map[string]int{}
	for r := range results {
		want := newContent(fmt.Sprintf("/flash/%d.bin", r.object), size).bytes()
		switch {
		case r.err != nil:
			t.Errorf("object %d via %s: %v after %d bytes", r.object, ps[r.proxy].name, r.err, len(r.body))
			continue
		case r.status != http.StatusOK || !bytes.Equal(r.body, want):
			t.Errorf("object %d via %s: status %d, %d bytes, correct %v", r.object, ps[r.proxy].name, r.status, len(r.body), bytes.Equal(r.body, want))
		}
		d := detail(r.cacheStatus)
		kinds[d]++
		switch {
		case d == "origin" && !strings.Contains(r.cacheStatus, "collapsed"):
			fromOrigin[r.object]++
		case strings.HasPrefix(d, "peer") || strings.Contains(r.cacheStatus, "collapsed"):
		default:
			t.Errorf("object %d via %s: Cache-Status %q says neither origin, peer nor collapsed", r.object, ps[r.proxy].name, r.cacheStatus)
		}
	}
	var counts []int64
	for obj := range objects {
		path := fmt.Sprintf("/flash/%d.bin", obj)
		counts = append(counts, o.count(path))
		if n := o.count(path); n != 1 {
			t.Errorf("%s fetched from the origin %d times by %d proxies, want 1", path, n, len(ps))
		}
		if fromOrigin[obj] != 1 {
			t.Errorf("%s: %d responses say they came from the origin, want 1", path, fromOrigin[obj])
		}
	}
	t.Logf("origin fetches per object: %v; where the bytes came from: %v", counts, kinds)
}

// TestJoinerFirstByte: a client that asks for an object while another
// client's download of it is under way (the origin sends it over ~2 s)
// gets its first byte within 100 ms, and both get the whole body.
func TestJoinerFirstByte(t *testing.T) {
	o := newOrigin(t)
	p := startOne(t, netip.MustParseAddr("127.0.73.1"), proxyOptions{})
	c := newClient(t)
	const size, rate = 2 << 20, 1 << 20
	const limit = 100 * time.Millisecond
	path := "/joiner/object.bin"
	uri := fmt.Sprintf("%s?size=%d&rate=%d", path, size, rate)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	t0 := time.Now()
	resp1, err := c.Do(request(ctx, p, o.coralHost(), uri))
	if err != nil {
		t.Fatal(err)
	}
	defer resp1.Body.Close()
	v1 := newVerifier(newContent(path, size))
	first := make([]byte, 1)
	if _, err := io.ReadFull(resp1.Body, first); err != nil {
		t.Fatal(err)
	}
	v1.Write(first)
	// Client 1 reads the rest meanwhile.
	done1 := make(chan error, 1)
	var end1 time.Time
	go func() {
		_, err := io.Copy(v1, resp1.Body)
		end1 = time.Now()
		done1 <- err
	}()

	join := time.Now()
	resp2, err := c.Do(request(ctx, p, o.coralHost(), uri))
	if err != nil {
		t.Fatal(err)
	}
	defer resp2.Body.Close()
	header2 := time.Since(join)
	buf := make([]byte, 64<<10)
	n, err := resp2.Body.Read(buf)
	if n == 0 {
		t.Fatalf("joiner: no first byte: %v", err)
	}
	ttfb := time.Since(join)
	v2 := newVerifier(newContent(path, size))
	v2.Write(buf[:n])
	if _, err := io.Copy(v2, resp2.Body); err != nil {
		t.Errorf("joiner: body: %v after %d bytes", err, v2.n)
	}
	if err := <-done1; err != nil {
		t.Errorf("first client: body: %v after %d bytes", err, v1.n)
	}
	t.Logf("joiner: header after %v, first byte after %v (%d bytes in the first read), joined %v into the download; first client done after %v; Cache-Status %q",
		header2.Round(time.Microsecond), ttfb.Round(time.Microsecond), n, join.Sub(t0).Round(time.Millisecond),
		end1.Sub(t0).Round(time.Millisecond), resp2.Header.Get("Cache-Status"))
	if ttfb >= limit {
		t.Errorf("joiner's first byte after %v, want < %v", ttfb, limit)
	}
	if !join.Add(ttfb).Before(end1) {
		t.Errorf("the first client's download had finished before the joiner's first byte: not a join mid-download")
	}
	if err := v1.check(true); err != nil {
		t.Errorf("first client: %v", err)
	}
	if err := v2.check(true); err != nil {
		t.Errorf("joiner: %v", err)
	}
	if !strings.Contains(resp2.Header.Get("Cache-Status"), "collapsed") {
		t.Errorf("joiner's Cache-Status %q does not say collapsed", resp2.Header.Get("Cache-Status"))
	}
	if n := o.count(path); n != 1 {
		t.Errorf("origin asked %d times, want 1", n)
	}
}

// TestPeerKilledMidTransfer: proxy B copies an object from proxy A while A
// is still downloading it; A is killed (SIGKILL) mid-body. B's client gets
// the whole correct body or a clean abort, never a wrong body presented as
// complete, and a later request to B gets the whole body. With a
// Content-Length the client would notice a short body by itself; sent
// chunked, only the proxy's abort (no last chunk) tells it.
func TestPeerKilledMidTransfer(t *testing.T) {
	for _, tc := range []struct {
		name    string
		a, b    netip.Addr
		chunked bool
	}{
		{"content-length", netip.MustParseAddr("127.0.74.1"), netip.MustParseAddr("127.0.74.2"), false},
		{"chunked", netip.MustParseAddr("127.0.74.11"), netip.MustParseAddr("127.0.74.12"), true},
	} {
		t.Run(tc.name, func(t *testing.T) { testPeerKilled(t, tc.a, tc.b, tc.chunked) })
	}
}

func testPeerKilled(t *testing.T, ipA, ipB netip.Addr, chunked bool) {
	o := newOrigin(t)
	ps := startNetwork(t, []netip.Addr{ipA, ipB}, proxyOptions{})
	a, b := ps[0], ps[1]
	c := newClient(t)
	const size, half = 1 << 20, 512 << 10
	path := "/killed/object.bin"
	uri := fmt.Sprintf("%s?size=%d&hold=%d", path, size, half) // the origin stops halfway until released
	if chunked {
		uri += "&chunked=1"
	}
	defer o.release(path)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	body := newContent(path, size)

	// A downloads from the origin; its client reads the first half.
	respA, err := c.Do(request(ctx, a, o.coralHost(), uri))
	if err != nil {
		t.Fatal(err)
	}
	defer respA.Body.Close()
	vA := newVerifier(body)
	if _, err := io.CopyN(vA, respA.Body, half); err != nil {
		t.Fatalf("A's client: %v", err)
	}
	// B finds A through the DSHT and copies from it.
	respB, err := c.Do(request(ctx, b, o.coralHost(), uri))
	if err != nil {
		t.Fatal(err)
	}
	defer respB.Body.Close()
	csB := respB.Header.Get("Cache-Status")
	if !strings.HasPrefix(detail(csB), "peer") {
		t.Fatalf("B did not fetch from its peer: Cache-Status %q (origin asked %d times)", csB, o.count(path))
	}
	if chunked && respB.ContentLength >= 0 {
		t.Fatalf("B's response has Content-Length %d; the chunked case needs none", respB.ContentLength)
	}
	vB := newVerifier(body)
	if _, err := io.CopyN(vB, respB.Body, half); err != nil {
		t.Fatalf("B's client, first half: %v", err)
	}
	if n := o.count(path); n != 1 {
		t.Fatalf("origin asked %d times before the kill, want 1 (B should use A)", n)
	}

	a.kill()
	o.release(path)
	_, errB := io.Copy(vB, respB.Body)
	switch {
	case errB == nil:
		// Only acceptable if it is the whole, correct body.
		if err := vB.check(true); err != nil {
			t.Errorf("B's client saw a clean end of a wrong body (Content-Length %d): %v", respB.ContentLength, err)
		}
		t.Logf("B's client got the whole body")
	default:
		if err := vB.check(false); err != nil {
			t.Errorf("B's client got wrong bytes before the abort: %v", err)
		}
		t.Logf("B's client: clean abort after %d of %d bytes: %v", vB.n, size, errB)
	}

	// B's copy was dropped, not kept: the next request gets the whole
	// object (from the origin: A is gone).
	waitDownloads(t, b)
	st, err := b.status()
	if err != nil {
		t.Fatal(err)
	}
	_, _, commits, aborts := st.cacheTotals()
	if errB != nil && aborts < 1 {
		t.Errorf("B: the truncated download was not aborted (commits %d, aborts %d)", commits, aborts)
	}
	retry := time.Now()
	resp, got, err := fetch(c, b, o.coralHost(), uri)
	if err != nil {
		t.Fatalf("retry at B: %v after %d bytes", err, len(got))
	}
	if resp.StatusCode != http.StatusOK || !bytes.Equal(got, body.bytes()) {
		t.Errorf("retry at B: status %d, %d bytes, correct %v", resp.StatusCode, len(got), bytes.Equal(got, body.bytes()))
	}
	t.Logf("retry at B: %v, Cache-Status %q; origin asked %d times; B's cache: %d commits, %d aborts before it",
		time.Since(retry).Round(time.Millisecond), resp.Header.Get("Cache-Status"), o.count(path), commits, aborts)
}

// TestStaleWhenOriginDown: a copy that has gone stale is served (200, the
// same body, Cache-Status stale) when the origin is down.
func TestStaleWhenOriginDown(t *testing.T) {
	o := newOrigin(t)
	// min_ttl 0: the origin's max-age=1 stands, instead of Coral's 5 minutes.
	p := startOne(t, netip.MustParseAddr("127.0.75.1"), proxyOptions{extra: []string{"min_ttl 0"}})
	c := newClient(t)
	path := "/stale/doc.bin"
	uri := path + "?size=10000&maxage=1"
	want := newContent(path, 10000).bytes()

	resp, b, err := fetch(c, p, o.coralHost(), uri)
	if err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(b, want) {
		t.Fatalf("first request: %v, %v, %d bytes", err, resp, len(b))
	}
	waitDownloads(t, p)
	objs, err := p.cacheObjects()
	if err != nil {
		t.Fatal(err)
	}
	var expires time.Time
	for _, ob := range objs {
		if strings.Contains(ob.URL, path) && ob.Expires != nil {
			expires = *ob.Expires
		}
	}
	if expires.IsZero() {
		t.Fatalf("the object is not in the cache listing: %+v", objs)
	}
	if left := time.Until(expires); left > 5*time.Second {
		t.Fatalf("cached copy fresh for another %v: max-age=1 with min_ttl 0 should give about 1s", left)
	}
	o.stop()
	waitFor(t, "the copy goes stale", 10*time.Second, []*proxy{p}, func() error {
		if left := time.Until(expires); left >= 0 {
			return fmt.Errorf("fresh for another %v", left)
		}
		return nil
	})
	resp, b, err = fetch(c, p, o.coralHost(), uri)
	if err != nil {
		t.Fatal(err)
	}
	cs := resp.Header.Get("Cache-Status")
	t.Logf("with the origin down: %d, Cache-Status %q", resp.StatusCode, cs)
	if resp.StatusCode != http.StatusOK || !bytes.Equal(b, want) {
		t.Errorf("with the origin down: status %d, %d bytes, correct %v", resp.StatusCode, len(b), bytes.Equal(b, want))
	}
	if !strings.Contains(cs, "stale") {
		t.Errorf("Cache-Status %q does not say stale", cs)
	}
	if n := o.count(path); n != 1 {
		t.Errorf("origin served %d requests, want 1", n)
	}
}

// TestCookiesStripped: a client's Cookie never reaches the origin, and the
// origin's Set-Cookie never reaches a client, neither on the miss nor on
// the hit.
func TestCookiesStripped(t *testing.T) {
	o := newOrigin(t)
	p := startOne(t, netip.MustParseAddr("127.0.76.1"), proxyOptions{})
	c := newClient(t)
	path := "/cookies/page.bin"
	uri := path + "?size=5000&setcookie=1"
	want := newContent(path, 5000).bytes()
	for i, what := range []string{"miss", "hit"} {
		resp, b, err := fetch(c, p, o.coralHost(), uri, "Cookie", "client-session=c00k1e")
		if err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		if resp.StatusCode != http.StatusOK || !bytes.Equal(b, want) {
			t.Errorf("%s: status %d, %d bytes", what, resp.StatusCode, len(b))
		}
		if sc := resp.Header.Values("Set-Cookie"); len(sc) > 0 {
			t.Errorf("%s: Set-Cookie reached the client: %q", what, sc)
		}
		if cs := resp.Header.Get("Cache-Status"); i == 1 && !strings.Contains(cs, "hit") {
			t.Errorf("second request: Cache-Status %q, want a hit", cs)
		}
		if i == 0 {
			waitDownloads(t, p)
		}
	}
	hdrs := o.requestHeaders(path)
	if len(hdrs) != 1 {
		t.Fatalf("origin got %d requests, want 1", len(hdrs))
	}
	if v := hdrs[0].Values("Cookie"); len(v) > 0 {
		t.Errorf("the client's Cookie reached the origin: %q", v)
	}
	if !strings.Contains(hdrs[0].Get("Via"), "coral") {
		t.Errorf("the origin's request has no Via from the proxy (%v): are these the proxy's headers?", hdrs[0])
	}
}

// TestPrivateOriginsRefused: a proxy without allow_origins refuses origins
// on loopback and private addresses with a 4xx and never contacts them (nor
// the DSHT); a host that is not Coralized gets 421.
func TestPrivateOriginsRefused(t *testing.T) {
	o := newOrigin(t)
	p := startOne(t, netip.MustParseAddr("127.0.77.1"), proxyOptions{noAllowOrigins: true})
	c := newClient(t)
	for _, tc := range []struct {
		host, path string
		want       int // 0: any 4xx
	}{
		{o.coralHost(), "/private/object.bin", http.StatusForbidden}, // the lab's origin, 127.0.70.1
		{"127.0.70.1.nyud.test", "/", http.StatusForbidden},
		{"127.0.0.1.nyud.test", "/", http.StatusForbidden},
		{"10.0.0.1.nyud.test", "/", http.StatusForbidden},    // refused before any dial
		{"192.168.1.1.nyud.test", "/", http.StatusForbidden}, // refused before any dial
		{"localhost.nyud.test", "/", 0},                      // single-label name: malformed (400)
		{"www.example.com", "/", http.StatusMisdirectedRequest},
		{p.ip.String(), "/", http.StatusMisdirectedRequest},
	} {
		resp, b, err := fetch(c, p, tc.host, tc.path)
		if err != nil {
			t.Errorf("%s: %v", tc.host, err)
			continue
		}
		t.Logf("%s%s: %d %s", tc.host, tc.path, resp.StatusCode, errorText(resp, b))
		switch {
		case tc.want != 0 && resp.StatusCode != tc.want:
			t.Errorf("%s: %d, want %d", tc.host, resp.StatusCode, tc.want)
		case tc.want == 0 && (resp.StatusCode < 400 || resp.StatusCode > 499):
			t.Errorf("%s: %d, want a 4xx", tc.host, resp.StatusCode)
		}
	}
	if n := o.total(); n != 0 {
		t.Errorf("refused requests reached the origin %d times", n)
	}
	st, err := p.status()
	if err != nil {
		t.Fatal(err)
	}
	if len(st.RecentFetches) != 0 || st.DHT == nil || st.DHT.PutGets != 0 {
		t.Errorf("refused requests caused fetches %v or put+gets (%+v)", st.RecentFetches, st.DHT)
	}
}

// TestPrivateOriginByName: the origin guard holds after name resolution.
// A name that resolves to the lab's origin (127.0.70.1, through a private
// /etc/hosts) is refused by a proxy without allow_origins, with a 4xx
// (README: 403, "checked on the address actually dialled, after name
// resolution"), and the origin is never contacted; a proxy with
// allow_origins fetches it by the same name (so the name does resolve).
func TestPrivateOriginByName(t *testing.T) {
	if why := hostsSupported(); why != "" {
		if ciRun() {
			t.Fatal(why + " (CI=true)")
		}
		t.Skip(why)
	}
	o := newOrigin(t)
	const name = "origin.proxylab.test"
	hosts := []string{originIP.String() + " " + name}
	host := fmt.Sprintf("%s.%d.%s", name, o.addr.Port(), zone)
	c := newClient(t)
	path := "/byname/object.bin"
	want := newContent(path, 64<<10).bytes()

	allowed := startOne(t, netip.MustParseAddr("127.0.77.3"), proxyOptions{hosts: hosts})
	resp, b, err := fetch(c, allowed, host, path)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || !bytes.Equal(b, want) || o.count(path) != 1 {
		t.Fatalf("with allow_origins, %s: status %d, %d bytes, origin asked %d times: does the name resolve in the proxy?",
			host, resp.StatusCode, len(b), o.count(path))
	}

	refusing := startOne(t, netip.MustParseAddr("127.0.77.2"), proxyOptions{hosts: hosts, noAllowOrigins: true})
	resp, b, err = fetch(c, refusing, host, path)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("without allow_origins, %s: %d %s", host, resp.StatusCode, errorText(resp, b))
	if n := o.count(path); n != 1 {
		t.Errorf("the proxy without allow_origins contacted the origin (%d requests in all, want the 1 from the other proxy)", n)
	}
	if resp.StatusCode != http.StatusForbidden {
		t.Errorf("a name resolving to a loopback origin got %d, want 403 as for an address in the Host", resp.StatusCode)
	}
}

// TestMemoryOneGiB: serving a 1 GiB object, first from the origin and then
// from the cache, grows the Caddy process's peak RSS by less than 64 MiB.
// The origin makes the object up as it goes; the client checks every byte
// as it streams by.
func TestMemoryOneGiB(t *testing.T) {
	const size, limit = 1 << 30, 64 << 20
	need := uint64(3 << 30)
	dir := t.TempDir()
	var fs syscall.Statfs_t
	if err := syscall.Statfs(dir, &fs); err != nil {
		t.Fatal(err)
	}
	if free := fs.Bavail * uint64(fs.Bsize); free < need {
		msg := fmt.Sprintf("%d MiB free in %s, the test needs %d MiB", free>>20, dir, need>>20)
		if ciRun() {
			t.Fatal(msg + " (CI=true)")
		}
		t.Skip(msg)
	}
	o := newOrigin(t)
	// max_object_size: the default, an eighth of the cache, would relay
	// the object uncached.
	p := startOne(t, netip.MustParseAddr("127.0.78.1"), proxyOptions{extra: []string{"cache_size 2GiB", "max_object_size 1GiB"}})
	c := newClient(t)
	// Warm up: the first request through each code path allocates what
	// any request would (buffers, pools, the DSHT's tables).
	if _, _, err := fetch(c, p, o.coralHost(), "/memory/warmup.bin?size=1048576"); err != nil {
		t.Fatal(err)
	}
	waitDownloads(t, p)
	if _, _, err := fetch(c, p, o.coralHost(), "/memory/warmup.bin?size=1048576"); err != nil {
		t.Fatal(err)
	}

	path := "/memory/big.bin"
	uri := fmt.Sprintf("%s?size=%d", path, size)
	measure := func(what string) string {
		t.Helper()
		rss0, hwm0, err := memory(p.pid())
		if err != nil {
			t.Fatal(err)
		}
		base := hwm0 // without a reset, the peak so far is all we can compare with
		if err := resetPeak(p.pid()); err != nil {
			t.Logf("cannot reset VmHWM (%v): comparing with the peak so far", err)
		} else {
			base = rss0
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		start := time.Now()
		resp, err := c.Do(request(ctx, p, o.coralHost(), uri))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		v := newVerifier(newContent(path, size))
		_, err = io.CopyBuffer(v, resp.Body, make([]byte, 1<<20))
		took := time.Since(start)
		if err != nil {
			t.Fatalf("%s: %v after %d bytes", what, err, v.n)
		}
		if err := v.check(true); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
		rss1, hwm1, err := memory(p.pid())
		if err != nil {
			t.Fatal(err)
		}
		growth := hwm1 - base
		t.Logf("%s: 1 GiB in %v (%.0f MiB/s), Cache-Status %q; RSS %d MiB before, %d MiB after, peak %d MiB: growth %d MiB (limit %d)",
			what, took.Round(time.Millisecond), float64(size>>20)/took.Seconds(), resp.Header.Get("Cache-Status"),
			rss0>>20, rss1>>20, hwm1>>20, growth>>20, limit>>20)
		if growth >= limit {
			t.Errorf("%s: peak RSS grew by %d MiB, want < %d MiB", what, growth>>20, limit>>20)
		}
		return resp.Header.Get("Cache-Status")
	}
	if cs := measure("from the origin"); detail(cs) != "origin" {
		t.Errorf("first request: Cache-Status %q, want the origin", cs)
	}
	waitDownloads(t, p)
	if cs := measure("from the cache"); !strings.Contains(cs, "hit") {
		t.Errorf("second request: Cache-Status %q, want a hit", cs)
	}
	if n := o.count(path); n != 1 {
		t.Errorf("origin asked %d times, want 1", n)
	}
}

// TestReloadKeepsNodeAndCache: `caddy reload` with a changed coral_proxy
// configuration keeps the DSHT node (same socket, same ID, no second bind)
// and every cached object: the object fetched before the reload is a local
// hit after it, and the origin is not asked again.
func TestReloadKeepsNodeAndCache(t *testing.T) {
	o := newOrigin(t)
	p := startOne(t, netip.MustParseAddr("127.0.79.1"), proxyOptions{})
	c := newClient(t)
	path := "/reload/object.bin"
	uri := path + "?size=20000"
	want := newContent(path, 20000).bytes()
	if resp, b, err := fetch(c, p, o.coralHost(), uri); err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(b, want) {
		t.Fatalf("before the reload: %v", err)
	}
	waitDownloads(t, p)
	var before struct {
		Node struct {
			ID      string `json:"id"`
			Address string `json:"address"`
		} `json:"node"`
	}
	if err := p.admin("/coral/status", &before); err != nil {
		t.Fatal(err)
	}

	// A changed handler configuration (a rate limit instead of none).
	cfgPath := filepath.Join(filepath.Dir(p.proc.LogFile), "Caddyfile")
	cfg, err := os.ReadFile(cfgPath)
	if err != nil {
		t.Fatal(err)
	}
	changed := strings.Replace(string(cfg), "rate_limit off", "rate_limit 1000 1000", 1)
	if changed == string(cfg) {
		t.Fatal("the lab's Caddyfile has no rate_limit line to change")
	}
	if err := os.WriteFile(cfgPath, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(caddyBinary(t), "reload", "--config", cfgPath, "--adapter", "caddyfile",
		"--address", netip.AddrPortFrom(p.ip, adminPort).String()).CombinedOutput()
	if err != nil {
		t.Fatalf("caddy reload: %v\n%s", err, out)
	}
	var raw json.RawMessage
	if err := p.admin("/config/", &raw); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(raw), `"rate_limit":1000`) {
		t.Fatalf("the reloaded configuration is not active: %s", raw)
	}

	var after struct {
		Node struct {
			ID      string `json:"id"`
			Address string `json:"address"`
		} `json:"node"`
	}
	if err := p.admin("/coral/status", &after); err != nil {
		t.Fatal(err)
	}
	if after.Node != before.Node || after.Node.ID == "" {
		t.Errorf("node before the reload %+v, after %+v; want the same node", before.Node, after.Node)
	}
	resp, b, err := fetch(c, p, o.coralHost(), uri)
	if err != nil || resp.StatusCode != http.StatusOK || !bytes.Equal(b, want) {
		t.Fatalf("after the reload: %v", err)
	}
	if cs := resp.Header.Get("Cache-Status"); !strings.Contains(cs, "hit") || detail(cs) != "local" {
		t.Errorf("after the reload: Cache-Status %q, want a local hit (the cache kept)", cs)
	}
	if n := o.count(path); n != 1 {
		t.Errorf("origin asked %d times, want 1", n)
	}
	log, err := os.ReadFile(p.proc.LogFile)
	if err != nil {
		t.Fatal(err)
	}
	for _, bad := range []string{"address already in use", "panic"} {
		if strings.Contains(string(log), bad) {
			t.Errorf("the log mentions %q", bad)
		}
	}
	if !p.running() {
		t.Error("Caddy exited")
	}
}
