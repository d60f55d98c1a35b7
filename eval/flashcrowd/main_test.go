package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestLineReserve(t *testing.T) {
	now := time.Unix(1000, 0)
	l := &line{rate: 1000, burst: 100, tokens: 100, now: func() time.Time { return now }, last: now}
	if d := l.reserve(100); d != 0 {
		t.Fatalf("the burst waited %v", d)
	}
	// Overdrawn: each reservation waits behind the previous ones.
	if d := l.reserve(500); d != 500*time.Millisecond {
		t.Errorf("500 bytes at 1000 B/s: wait %v, want 500ms", d)
	}
	if d := l.reserve(250); d != 750*time.Millisecond {
		t.Errorf("the next 250 bytes: wait %v, want 750ms", d)
	}
	// After the queue drains, a long idle refills only up to the burst.
	now = now.Add(10 * time.Second)
	if d := l.reserve(100); d != 0 {
		t.Errorf("after an idle period: wait %v", d)
	}
	if d := l.reserve(1); d != time.Millisecond {
		t.Errorf("beyond the burst: wait %v, want 1ms", d)
	}
}

// TestLineShared sends through one line from several responses at once and
// checks that together they take as long as the rate says.
func TestLineShared(t *testing.T) {
	const rate, each, senders = 400_000.0, 20_000, 4
	l := newLine(rate, lineChunk)
	start := time.Now()
	var wg sync.WaitGroup
	for range senders {
		wg.Go(func() {
			rec := httptest.NewRecorder()
			n, err := l.send(context.Background(), rec, bytes.Repeat([]byte{1}, each), lineChunk)
			if err != nil || n != each || rec.Body.Len() != each {
				t.Errorf("sent %d (%v), recorded %d", n, err, rec.Body.Len())
			}
		})
	}
	wg.Wait()
	want := time.Duration((senders*each - lineChunk) / rate * float64(time.Second))
	if got := time.Since(start); got < want*9/10 || got > want*3 {
		t.Errorf("%d bytes through a %v B/s line took %v, want about %v", senders*each, rate, got, want)
	}
}

func TestClassify(t *testing.T) {
	for _, c := range []struct{ cs, source, via string }{
		{`coral; hit; detail="local"`, "local", ""},
		{`coral; fwd=uri-miss; detail="origin"`, "origin", ""},
		{`coral; fwd=uri-miss; detail="peer-l2"`, "peer-l2", ""},
		{`coral; fwd=uri-miss; detail="peer-l0"`, "peer-l0", ""},
		{`coral; fwd=uri-miss; collapsed; detail="origin"`, "collapsed", "origin"},
		{`coral; fwd=uri-miss; collapsed; detail="peer-l1"`, "collapsed", "peer-l1"},
		{`coral; fwd=uri-miss; stored=false; detail="origin"`, "other", "origin"},
		{`coral; hit; fwd=stale; detail="stale"`, "other", "stale"},
		{`coral; fwd=miss; detail="only-if-cached"`, "other", "only-if-cached"},
		{``, "none", ""},
		{`other-cache; hit`, "none", ""},
	} {
		s, v := classify(c.cs)
		if s != c.source || v != c.via {
			t.Errorf("classify(%q) = %q, %q; want %q, %q", c.cs, s, v, c.source, c.via)
		}
	}
}

func TestClusters(t *testing.T) {
	// 12 proxies, 2 regions of 6, 4 metros of 3, each metro inside one
	// region.
	var got []string
	for i := range 12 {
		c1, c2 := clusterOf(i, 12, 2, 4)
		got = append(got, string(rune('0'+c1))+string(rune('0'+c2)))
	}
	if s := strings.Join(got, " "); s != "00 00 00 01 01 01 12 12 12 13 13 13" {
		t.Errorf("placement %s", s)
	}
	for i := range 10 {
		c1, c2 := clusterOf(i, 10, 2, 4)
		if c2*2/4 != c1 {
			t.Errorf("proxy %d of 10: metro %d outside region %d", i, c2, c1)
		}
	}
}

func TestFiles(t *testing.T) {
	for i := range 12 {
		if got := fileIndex(filePath(i), 12); got != i {
			t.Errorf("fileIndex(%s) = %d", filePath(i), got)
		}
	}
	for _, p := range []string{"/f00", "/f13", "/f1", "/f001", "/x01", "/", "/f01/"} {
		if got := fileIndex(p, 12); got != -1 {
			t.Errorf("fileIndex(%s) = %d, want -1", p, got)
		}
	}
	a, b := fileBody(0, 41<<10), fileBody(1, 41<<10)
	if len(a) != 41<<10 || bytes.Equal(a, b) || !bytes.Equal(a, fileBody(0, 41<<10)) {
		t.Error("file bodies are not fixed and distinct")
	}
}

func TestOriginServes(t *testing.T) {
	o := newOrigin(netip.MustParseAddrPort("127.0.100.1:8080"), 2, 3000, 8000)
	srv := httptest.NewServer(o)
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodGet, srv.URL+"/f02", nil)
	req.Header.Set(reqHeader, "c7")
	resp, err := srv.Client().Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var body bytes.Buffer
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || !bytes.Equal(body.Bytes(), o.files[1]) || !strings.Contains(resp.Header.Get("Cache-Control"), "max-age=86400") {
		t.Errorf("status %d, %d bytes, Cache-Control %q", resp.StatusCode, body.Len(), resp.Header.Get("Cache-Control"))
	}
	resp, err = srv.Client().Get(srv.URL + "/f03")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != 404 {
		t.Errorf("/f03 of 2 files: status %d, want 404", resp.StatusCode)
	}
	resp, err = srv.Client().Get(srv.URL + errorPath)
	if err != nil {
		t.Fatal(err)
	}
	body.Reset()
	_, _ = body.ReadFrom(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 404 || !bytes.Equal(body.Bytes(), o.errorBody) || resp.Header.Get("Cache-Control") != "" || resp.Header.Get("Expires") != "" {
		t.Errorf("error URL: status %d, body %q, Cache-Control %q: want a bare 404", resp.StatusCode, body.Bytes(), resp.Header.Get("Cache-Control"))
	}
	log, per, errs := o.fetches()
	if len(log) != 3 || log[0].Request != "c7" || log[0].Bytes != 3000 || log[1].File != -1 || log[2].File != errorFile || per[0] != 0 || per[1] != 1 || errs != 1 {
		t.Errorf("log %+v, per file %v, error URL %d", log, per, errs)
	}
}

func TestSummarize(t *testing.T) {
	p := defaultParams()
	p.Duration, p.Files = 2*time.Minute, 2
	recs := []*record{
		{ID: "b0", Client: -1, At: 0, File: 0, OK: true, Source: "origin", LatencyMS: 10000, CacheStatus: `coral; fwd=uri-miss; detail="origin"`},
		{ID: "b1", Client: -1, At: 0, File: 0, OK: true, Source: "peer-l0", LatencyMS: 10100},
		{ID: "b2", Client: -1, At: 0, File: 1, OK: true, Source: "origin", LatencyMS: 9000},
		{ID: "c1", Client: 3, At: 5, File: 0, OK: true, Source: "collapsed", Via: "origin", LatencyMS: 5000},
		{ID: "c2", Client: 3, At: 65, File: 0, OK: true, Source: "local", LatencyMS: 2},
		{ID: "c3", Client: 4, At: 70, File: 1, OK: false, Err: "status 502"},
	}
	fetches := []originFetch{{At: 0.01, Path: "/f01", File: 0, Request: "b0"}, {At: 0.02, Path: "/f02", File: 1, Request: "b2"}}
	rep := &report{}
	summarize(rep, p, recs, fetches, []int{1, 1}, 0)
	check(rep, p)
	if len(rep.Minutes) != 2 {
		t.Fatalf("%d minutes", len(rep.Minutes))
	}
	m1, m2 := rep.Minutes[0], rep.Minutes[1]
	if m1.Requests != 4 || m1.BySource["origin"] != 2 || m1.BySource["peer-l0"] != 1 || m1.BySource["collapsed"] != 1 || m1.OriginFetches != 2 {
		t.Errorf("minute 1: %+v", m1)
	}
	if m2.Requests != 2 || m2.BySource["local"] != 1 || m2.Failed != 1 || m2.OriginFetches != 0 {
		t.Errorf("minute 2: %+v", m2)
	}
	if rep.Totals.Failed != 1 || rep.Totals.Collapsed["origin"] != 1 || len(rep.BurstRequests) != 3 || len(rep.NonLocal) != 2 {
		t.Errorf("totals %+v, %d burst, %d non-local", rep.Totals, len(rep.BurstRequests), len(rep.NonLocal))
	}
	if l := rep.Latency["all"]; l.Count != 5 || l.Max != 10100 || l.P50 != 9000 {
		t.Errorf("latency %+v", l)
	}
	if rep.Origin.Log[0].Proxy != 0 || rep.Origin.Log[0].CacheStatus == "" {
		t.Errorf("origin fetch not traced to its request: %+v", rep.Origin.Log[0])
	}
	// One request failed: no pass, though the origin fetches are right.
	if rep.Pass || len(rep.Problems) != 1 || !strings.Contains(rep.Problems[0], "1 of 6 requests failed") {
		t.Errorf("pass %v, problems %q", rep.Pass, rep.Problems)
	}

	// A second fetch of one file fails the acceptance, too.
	recs[5].OK, recs[5].Source = true, "origin"
	fetches = append(fetches, originFetch{At: 70, Path: "/f02", File: 1, Request: "c3"})
	rep = &report{}
	summarize(rep, p, recs, fetches, []int{1, 2}, 0)
	check(rep, p)
	if rep.Pass || len(rep.Problems) != 2 || !strings.Contains(rep.Problems[1], "/f02 fetched from the origin 2 times") {
		t.Errorf("pass %v, problems %q", rep.Pass, rep.Problems)
	}
	var out strings.Builder
	printReport(&out, rep, p)
	for _, want := range []string{"origin fetches, minute 1", "f02:2", "c3", "Acceptance: 3 origin fetches for 2 files"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("report lacks %q:\n%s", want, out.String())
		}
	}
	dir := t.TempDir()
	if err := plotLoad(filepath.Join(dir, "a.png"), rep); err != nil {
		t.Error(err)
	}
	if err := plotLatency(filepath.Join(dir, "b.png"), rep); err != nil {
		t.Error(err)
	}
}

func TestValidate(t *testing.T) {
	if err := validate(defaultParams()); err != nil {
		t.Errorf("defaults: %v", err)
	}
	for _, f := range []func(*params){
		func(p *params) { p.L2 = 3 },
		func(p *params) { p.Files = 10 },
		func(p *params) { p.Net = "127.0.0" },
		func(p *params) { p.Net = "127.0.101" },
		func(p *params) { p.Net = "127.0.109" },
		func(p *params) { p.Net = "10.0.100" },
		func(p *params) { p.Clients = 5000 },
	} {
		p := defaultParams()
		f(&p)
		if err := validate(p); err == nil {
			t.Errorf("accepted %+v", p)
		}
	}
	if a := sourceAddr(0); a != netip.MustParseAddr("127.0.101.1") {
		t.Errorf("client 0 at %v", a)
	}
	if a := sourceAddr(250); a != netip.MustParseAddr("127.0.102.1") {
		t.Errorf("client 250 at %v", a)
	}
}

func TestCaddyfile(t *testing.T) {
	p := defaultParams()
	nw, err := newNetwork(p, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	c := nw.proxies[4].caddyfile
	for _, want := range []string{"admin 127.0.100.14:2019", "listen 127.0.100.14:4000", "bootstrap 127.0.100.10:4000", "cluster 1 region-a", "cluster 2 metro-a1",
		"levels 60ms 20ms", "bind 127.0.100.14", "coral_proxy nyud.test", "allow_origins 127.0.100.0/24", "peer_address 127.0.100.14:8080", "key_file "} {
		if !strings.Contains(c, want) {
			t.Errorf("proxy 4's Caddyfile lacks %q:\n%s", want, c)
		}
	}
	if strings.Contains(nw.proxies[0].caddyfile, "bootstrap") {
		t.Error("proxy 0 bootstraps")
	}
	if !strings.Contains(nw.proxies[11].caddyfile, "cluster 2 metro-b1") {
		t.Errorf("proxy 11:\n%s", nw.proxies[11].caddyfile)
	}
	// Not pinned: the same node, no cluster lines.
	p.Pin = false
	nw, err = newNetwork(p, t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	if c := nw.proxies[4].caddyfile; strings.Contains(c, "cluster ") || !strings.Contains(c, "levels 60ms 20ms") {
		t.Errorf("-pin=false: proxy 4's Caddyfile:\n%s", c)
	}
}

// TestSummarizeErrorCrowd: a crowd on the error URL passes when every
// answer is the origin's 404, whatever reached the origin, which is
// counted.
func TestSummarizeErrorCrowd(t *testing.T) {
	p := defaultParams()
	p.ErrorCrowd, p.Files = true, 2
	ld := &load{p: p, files: [][]byte{{1}, {2}}, errorBody: []byte("404 page not found\n")}
	if got := ld.targets(); len(got) != 1 || got[0] != errorFile {
		t.Fatalf("targets %v", got)
	}
	good, bad := &record{ID: "c1", Client: 1, File: errorFile}, &record{ID: "c2", Client: 2, File: errorFile}
	ld.check(good, 404, `coral; fwd=uri-miss; detail="origin"`, ld.errorBody, nil)
	ld.check(bad, 200, "", []byte{1}, nil)
	if !good.OK || bad.OK {
		t.Fatalf("404 with the origin's body: ok %v; 200: ok %v (%s)", good.OK, bad.OK, bad.Err)
	}
	fetches := []originFetch{{At: 0.1, Path: errorPath, File: errorFile, Request: "c1"}}
	rep := &report{}
	summarize(rep, p, []*record{good}, fetches, []int{0, 0}, 1)
	check(rep, p)
	if !rep.Pass || rep.Origin.ErrorFetches != 1 || len(rep.Warnings) != 1 || !strings.Contains(rep.Warnings[0], "1 of 1 requests for /missing reached the origin") {
		t.Errorf("pass %v, problems %q, warnings %q", rep.Pass, rep.Problems, rep.Warnings)
	}
}
