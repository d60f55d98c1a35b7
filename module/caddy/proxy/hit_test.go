package proxy

import (
	"bytes"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/abuse"
	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// The cache-hit path: a complete, fresh object served from the local disk
// cache (serveStored).

const hitHost = "127.0.0.1.8080.nyud.test" // origin 127.0.0.1:8080, never contacted

var hitLastModified = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// hitProxy is a proxy (no DSHT node, abuse controls with a rate limit
// that never refuses, as in eval/httpbench) whose cache holds path's
// object of size bytes, stored with the metadata the proxy keeps for an
// origin's response.
func hitProxy(tb testing.TB, path string, size int) (px *Proxy, dir string, body []byte) {
	tb.Helper()
	dir = tb.TempDir()
	store := openTestStore(tb, diskcache.Options{Dir: dir, MaxBytes: 64 << 20, NoSync: true})
	controls, err := abuse.New(abuse.Config{Rate: 1e6, Burst: 1e6})
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(controls.Close)
	cfg := testConfig()
	cfg.Store, cfg.Abuse = store, controls
	cfg.PeerAddress = netip.MustParseAddrPort("127.0.0.2:8080")
	if px, err = New(cfg); err != nil {
		tb.Fatal(err)
	}

	body = make([]byte, size)
	for i := range body {
		body[i] = byte(i*7 + i>>8)
	}
	o, err := coralname.ParseHost(hitHost, cfg.Zone)
	if err != nil {
		tb.Fatal(err)
	}
	key := coralname.CacheKey("http", o.Host, o.Port, path, "")
	now := time.Now()
	m := diskcache.Meta{
		Key:    key,
		Status: http.StatusOK,
		Header: http.Header{
			"Content-Type":   {"application/octet-stream"},
			"Cache-Control":  {"public, max-age=86400"},
			"Last-Modified":  {hitLastModified.Format(http.TimeFormat)},
			"Content-Length": {strconv.Itoa(size)},
			"Date":           {now.UTC().Format(http.TimeFormat)},
		},
		Stored:  now,
		Expires: now.Add(24 * time.Hour),
		Size:    int64(size),
		Extra:   map[string]string{"source": "origin", "url": "http://127.0.0.1:8080" + path},
	}
	w, err := store.Create(key, m)
	if err != nil {
		tb.Fatal(err)
	}
	if _, err := w.Write(body); err != nil {
		tb.Fatal(err)
	}
	if err := w.Commit(m); err != nil {
		tb.Fatal(err)
	}
	return px, dir, body
}

func hitRequest(method, path string, hdr ...string) *http.Request {
	r := httptest.NewRequest(method, "http://"+hitHost+path, nil)
	r.RemoteAddr = "127.0.0.9:40000"
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	return r
}

// serveHit serves r and returns the recorded response.
func serveHit(t *testing.T, px *Proxy, r *http.Request) *httptest.ResponseRecorder {
	t.Helper()
	rec := httptest.NewRecorder()
	if err := px.ServeHTTP(rec, r); err != nil {
		t.Fatalf("%s %s: %v", r.Method, r.URL, err)
	}
	return rec
}

// checkHit fails unless rec is a local hit of body with the stored header.
func checkHit(t *testing.T, rec *httptest.ResponseRecorder, body []byte) {
	t.Helper()
	hdr := rec.Header()
	if rec.Code != http.StatusOK || !bytes.Equal(rec.Body.Bytes(), body) {
		t.Fatalf("status %d, %d bytes (want 200, %d bytes)", rec.Code, rec.Body.Len(), len(body))
	}
	for k, want := range map[string]string{
		"Cache-Status":   `coral; hit; detail="local"`,
		"Via":            "1.1 coral",
		"Content-Type":   "application/octet-stream",
		"Cache-Control":  "public, max-age=86400",
		"Last-Modified":  hitLastModified.Format(http.TimeFormat),
		"Content-Length": strconv.Itoa(len(body)),
		"Accept-Ranges":  "bytes",
	} {
		if got := hdr.Values(k); len(got) != 1 || got[0] != want {
			t.Errorf("%s: %q, want %q", k, got, want)
		}
	}
	if age, err := strconv.Atoi(hdr.Get("Age")); err != nil || age < 0 {
		t.Errorf("Age %q", hdr.Get("Age"))
	}
}

// TestHitReadsNoMetadataFile: once an object has been served twice, a hit
// reads no metadata. The proof: with the metadata damaged behind the
// store's back (a small object's metadata is at the end of its one file),
// hits still serve the right header and bytes, and the store reads no
// metadata. (A Get that read it would then drop the object; see
// diskcache's TestHotSkipsMetaFile.)
func TestHitReadsNoMetadataFile(t *testing.T) {
	px, dir, body := hitProxy(t, "/1k", 1024)
	for range 2 {
		checkHit(t, serveHit(t, px, hitRequest(http.MethodGet, "/1k")), body)
	}
	reads := px.store.Stats().MetaReads
	if reads != 2 {
		t.Fatalf("the first two hits read %d metadata files, want 2", reads)
	}
	damaged := 0
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err == nil && strings.HasSuffix(p, ".obj") {
			damaged++
			var b []byte
			if b, err = os.ReadFile(p); err == nil {
				b[len(b)-1] ^= 1
				err = os.WriteFile(p, b, 0o600)
			}
		}
		return err
	})
	if err != nil || damaged != 1 {
		t.Fatalf("damaging the metadata: %v (%d files)", err, damaged)
	}
	for range 3 {
		checkHit(t, serveHit(t, px, hitRequest(http.MethodGet, "/1k")), body)
	}
	rec := serveHit(t, px, hitRequest(http.MethodHead, "/1k"))
	if rec.Code != http.StatusOK || rec.Body.Len() != 0 || rec.Header().Get("Content-Length") != "1024" {
		t.Fatalf("HEAD: %d, %d bytes, Content-Length %q", rec.Code, rec.Body.Len(), rec.Header().Get("Content-Length"))
	}
	if st := px.store.Stats(); st.MetaReads != reads || st.Corrupt != 0 || st.Entries != 1 {
		t.Fatalf("after the hits: %d metadata reads (want %d), %d corrupt, %d entries", st.MetaReads, reads, st.Corrupt, st.Entries)
	}
}

// TestHitHeaderNotShared: the store shares one decoded header among all
// hits, so what a hit puts in the response header must be the response's
// own. Something after the handler that edits values in place (Caddy's
// header directive replaces values that way) must not change what the next
// hit serves.
func TestHitHeaderNotShared(t *testing.T) {
	px, _, body := hitProxy(t, "/1k", 1024)
	for range 3 {
		rec := serveHit(t, px, hitRequest(http.MethodGet, "/1k"))
		checkHit(t, rec, body)
		for _, vs := range rec.Header() {
			for i := range vs {
				vs[i] = "scribbled"
			}
		}
		rec.Header()["Cache-Control"] = append(rec.Header()["Cache-Control"][:1], "appended")
	}
}

// TestHitConditionalAndRange: conditional and range requests on a hit get
// what http.ServeContent gives them, and a plain request the same header as
// a conditional one that does not match.
func TestHitConditionalAndRange(t *testing.T) {
	px, _, body := hitProxy(t, "/1k", 1024)
	lm := hitLastModified.Format(http.TimeFormat)
	for _, c := range []struct {
		hdr    []string
		status int
		body   []byte
	}{
		{[]string{"If-Modified-Since", lm}, http.StatusNotModified, nil},
		{[]string{"If-Modified-Since", hitLastModified.Add(-time.Hour).Format(http.TimeFormat)}, http.StatusOK, body},
		{[]string{"If-Unmodified-Since", hitLastModified.Add(-time.Hour).Format(http.TimeFormat)}, http.StatusPreconditionFailed, nil},
		{[]string{"Range", "bytes=10-19"}, http.StatusPartialContent, body[10:20]},
		{[]string{"Range", "bytes=10-19", "If-Range", lm}, http.StatusPartialContent, body[10:20]},
		{[]string{"Range", "bytes=10-19", "If-Range", hitLastModified.Add(-time.Hour).Format(http.TimeFormat)}, http.StatusOK, body},
		{[]string{"Range", "bytes=5000-"}, http.StatusRequestedRangeNotSatisfiable, nil},
	} {
		rec := serveHit(t, px, hitRequest(http.MethodGet, "/1k", c.hdr...))
		if rec.Code != c.status || (c.body != nil && !bytes.Equal(rec.Body.Bytes(), c.body)) {
			t.Errorf("%q: status %d, %d bytes; want %d, %d bytes", c.hdr, rec.Code, rec.Body.Len(), c.status, len(c.body))
		}
		if c.status == http.StatusOK {
			checkHit(t, rec, body)
		}
	}
	plain := serveHit(t, px, hitRequest(http.MethodGet, "/1k")).Header()
	cond := serveHit(t, px, hitRequest(http.MethodGet, "/1k", "If-None-Match", `"nope"`)).Header()
	for _, hdr := range []http.Header{plain, cond} {
		hdr.Del("Age") // may tick between the two
	}
	if !equalHeader(plain, cond) {
		t.Errorf("plain request's header\n%v\ndiffers from a non-matching conditional request's\n%v", plain, cond)
	}
}

func equalHeader(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		vb := b[k]
		if len(va) != len(vb) {
			return false
		}
		for i := range va {
			if va[i] != vb[i] {
				return false
			}
		}
	}
	return true
}

// discardWriter is a ResponseWriter that keeps nothing, with a ReadFrom
// as net/http's (so bodies may be copied through it without an allocation).
type discardWriter struct {
	hdr    http.Header
	status int
	n      int64
	buf    []byte
}

func (d *discardWriter) Header() http.Header { return d.hdr }

func (d *discardWriter) WriteHeader(code int) {
	if d.status == 0 {
		d.status = code
	}
}

func (d *discardWriter) Write(p []byte) (int, error) {
	d.WriteHeader(http.StatusOK)
	d.n += int64(len(p))
	return len(p), nil
}

func (d *discardWriter) ReadFrom(r io.Reader) (int64, error) {
	return io.CopyBuffer(struct{ io.Writer }{d}, r, d.buf)
}

// BenchmarkServeHit: the proxy's whole ServeHTTP for a cache hit, without
// the network and Caddy's server around it (nor the adapter's idle
// writer), for the two object sizes of eval/httpbench.
func BenchmarkServeHit(b *testing.B) {
	for _, size := range []int{1 << 10, 100 << 10} {
		path := "/" + strconv.Itoa(size>>10) + "k"
		b.Run(path[1:], func(b *testing.B) {
			px, _, _ := hitProxy(b, path, size)
			r := hitRequest(http.MethodGet, path)
			w := &discardWriter{hdr: http.Header{}, buf: make([]byte, 32<<10)}
			b.ReportAllocs()
			for b.Loop() {
				clear(w.hdr)
				w.status, w.n = 0, 0
				if err := px.ServeHTTP(w, r); err != nil {
					b.Fatal(err)
				}
				if w.status != http.StatusOK || w.n != int64(size) {
					b.Fatalf("status %d, %d bytes", w.status, w.n)
				}
			}
		})
	}
}
