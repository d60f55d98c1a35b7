package purge

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/diskcache"
)

func TestParsePurgeURL(t *testing.T) {
	zones := []string{"nyud.test", "Other.Test."}
	key := func(host string, port int, path, query string) string {
		return coralname.CacheKey("http", host, port, path, query)
	}
	same := []struct {
		url, norm string
	}{
		{"http://www.example.com.nyud.test/a.jpg", "//www.example.com/a.jpg"},
		{"http://www.example.com/a.jpg", "//www.example.com/a.jpg"},
		{"https://www.example.com/a.jpg", "//www.example.com/a.jpg"},
		{"https://www.example.com:443/a.jpg", "//www.example.com/a.jpg"},
		{"http://www.example.com:80/a.jpg", "//www.example.com/a.jpg"},
		{"HTTP://WWW.Example.COM./a.jpg#frag", "//www.example.com/a.jpg"},
		{"http://www.example.com.nyud.test:8090/a.jpg", "//www.example.com/a.jpg"}, // a proxy's port
		{"http://WWW.EXAMPLE.COM.NYUD.TEST./a.jpg", "//www.example.com/a.jpg"},     // case, root dot
		{"http://www.example.com.other.test/a.jpg", "//www.example.com/a.jpg"},     // the other zone
		{"http://www.example.com/x/../a.jpg", "//www.example.com/a.jpg"},           // dot segments
		{"http://www.example.com/%61.jpg", "//www.example.com/a.jpg"},              // unreserved escape
		{"http://www.example.com.8080.nyud.test/a?b=1", "//www.example.com:8080/a?b=1"},
		{"http://www.example.com:8080/a?b=1", "//www.example.com:8080/a?b=1"},
		{"https://www.example.com:8443/a", "//www.example.com:8443/a"},
		{"http://www.example.com:443/a", "//www.example.com:443/a"},
		{"http://192.0.2.7/a", "//192.0.2.7/a"},
		{"http://192.0.2.7.nyud.test/a", "//192.0.2.7/a"},
		{"http://www.example.com", "//www.example.com/"},
		{"http://www.example.com?q", "//www.example.com/?q"},
		{"http://a_b.example.com/", "//a_b.example.com/"},
	}
	for _, c := range same {
		spec, err := ParseURL(c.url, false, zones)
		if err != nil {
			t.Errorf("%s: %v", c.url, err)
			continue
		}
		h, port, p, q := purgeSplitNorm(t, c.norm)
		if spec.Norm != c.norm || spec.Key != key(h, port, p, q) || spec.Prefix {
			t.Errorf("%s: %+v, want norm %s", c.url, spec, c.norm)
		}
		pspec, err := ParseURL(c.url, true, zones)
		if err != nil || pspec.Norm != c.norm || !pspec.Prefix || pspec.Key != "" {
			t.Errorf("%s as a prefix: %+v, %v", c.url, pspec, err)
		}
	}
	for _, bad := range []string{
		"",
		"/a.jpg",
		"www.example.com/a.jpg",
		"ftp://www.example.com/a",
		"http://user:pw@www.example.com/a",
		"http:www.example.com/a",
		"http:///a",
		"http://[2001:db8::1]/a",
		"http://localhost/a",
		"http://intranet/a",
		"http://127.1/a",
		"http://example.123/a",
		"http://www.example.com:0/a",
		"http://www.example.com:65536/a",
		"http://www.example.com:080/a",
		"http://-bad-.example.com/a",
		"http://a.nyud.test.example.com/a", // the zone inside an origin
		"http://a.nyud.test.nyud.test/a",   // the zone twice
		"http://nyud.test/a",               // the zone alone
		"http://www.exämple.com/a",         // not punycode
		"http://www.example.com.99999.nyud.test/a",
		"http://%zz/a",
		"http://" + strings.Repeat("a", URLMax) + ".com/",
	} {
		if spec, err := ParseURL(bad, false, zones); err == nil {
			t.Errorf("%q accepted as %+v", bad, spec)
		} else if !errors.Is(err, ErrURL) {
			t.Errorf("%q: %v does not wrap ErrURL", bad, err)
		}
	}
	// Without zones (cannot happen through the API, which needs a proxy),
	// origin URLs still parse.
	if spec, err := ParseURL("http://www.example.com/a", false, nil); err != nil || spec.Norm != "//www.example.com/a" {
		t.Errorf("no zones: %+v, %v", spec, err)
	}
}

// purgeSplitNorm splits "//host[:port]/path[?query]".
func purgeSplitNorm(t *testing.T, norm string) (host string, port int, path, query string) {
	u, err := url.Parse("http:" + norm)
	if err != nil {
		t.Fatal(err)
	}
	if p := u.Port(); p != "" {
		port, _ = strconv.Atoi(p)
	}
	return u.Hostname(), port, u.EscapedPath(), u.RawQuery
}

// TestStoredNorm: the URL stored with an object (the origin URL, http or
// https) gives back the key it was stored under.
func TestStoredNorm(t *testing.T) {
	type origin struct {
		scheme, host string
		port         int
		path, query  string
	}
	for _, tc := range []origin{
		{"http", "www.example.com", 0, "/a.jpg", ""},
		{"http", "www.example.com", 8080, "/a b/%7e", "x=1&y"},
		{"https", "www.example.com", 0, "/", ""},
		{"https", "www.example.com", 8443, "/a", ""},
		{"http", "192.0.2.1", 81, "/a/../b", ""},
	} {
		stored := coralname.OriginURL(tc.scheme, tc.host, tc.port, tc.path, tc.query).String()
		norm, ok := StoredNorm(stored)
		want := coralname.CacheKey("http", tc.host, tc.port, tc.path, tc.query)
		if !ok || KeyOfNorm(norm) != want {
			t.Errorf("%+v stored as %s: norm %q (%v), key %s; want %s", tc, stored, norm, ok, KeyOfNorm(norm), want)
		}
	}
	for _, bad := range []string{"", "/a", "ftp://x/a", "http:opaque", "http://x:port/"} {
		if n, ok := StoredNorm(bad); ok {
			t.Errorf("%q gives %q", bad, n)
		}
	}
}

// TestPurgeMessages: the purge payloads between proxies.
func TestPurgeMessages(t *testing.T) {
	key := coralname.CacheKey("http", "www.example.com", 0, "/a.jpg", "")
	for _, spec := range []Spec{
		{Key: key},
		{Prefix: true, Norm: "//www.example.com/img/"},
		{Prefix: true, Norm: "//www.example.com:8080/"},
		{Prefix: true, Norm: "//192.0.2.1/a?b=%20"},
	} {
		b, err := EncodeRequest(spec)
		if err != nil {
			t.Fatalf("%+v: %v", spec, err)
		}
		got, err := DecodeRequest(b)
		want := spec
		if !spec.Prefix {
			want.Norm = ""
		}
		if err != nil || got != want {
			t.Errorf("%+v → %x → %+v, %v", spec, b, got, err)
		}
	}
	for name, spec := range map[string]Spec{
		"bad key":        {Key: "xyz"},
		"short key":      {Key: key[:38]},
		"empty prefix":   {Prefix: true},
		"no host":        {Prefix: true, Norm: "///a"},
		"no slash":       {Prefix: true, Norm: "//www.example.com"},
		"relative":       {Prefix: true, Norm: "/a"},
		"too long":       {Prefix: true, Norm: "//www.example.com/" + strings.Repeat("a", coraldht.MaxAppPayload)},
		"space":          {Prefix: true, Norm: "//www.example.com/a b"},
		"bad port":       {Prefix: true, Norm: "//www.example.com:0/"},
		"host with @":    {Prefix: true, Norm: "//user@www.example.com/"},
		"host with junk": {Prefix: true, Norm: "//www.exa mple.com/"},
	} {
		if b, err := EncodeRequest(spec); err == nil {
			t.Errorf("%s: encoded as %x", name, b)
		}
	}
	good, _ := EncodeRequest(Spec{Key: key})
	for name, b := range map[string][]byte{
		"empty":     nil,
		"version 2": append([]byte{2}, good[1:]...),
		"mode 2":    append([]byte{1, 2}, good[2:]...),
		"short key": good[:21],
		"long key":  append(append([]byte(nil), good...), 0),
		"prefix /":  []byte("\x01\x01/"),
	} {
		if spec, err := DecodeRequest(b); err == nil {
			t.Errorf("%s: %x accepted as %+v", name, b, spec)
		}
	}

	for _, r := range []Reply{
		{Status: StatusOK, Purged: 3, Variants: 2, Aborted: 1, Pending: 0, Scanned: 1 << 31, Complete: true},
		{Status: StatusRefused, Detail: "coral purge: malformed"},
		{Status: StatusNoCache, Complete: true},
	} {
		got, err := DecodeReply(EncodeReply(r))
		if err != nil || got != r {
			t.Errorf("%+v → %+v, %v", r, got, err)
		}
	}
	long := EncodeReply(Reply{Status: StatusRefused, Detail: strings.Repeat("x", 2000)})
	if len(long) != coraldht.MaxAppPayload {
		t.Errorf("a long detail makes a reply of %d bytes", len(long))
	}
	for name, b := range map[string][]byte{
		"short":      make([]byte, ReplyFixed-1),
		"version 0":  make([]byte, ReplyFixed),
		"status 3":   append([]byte{1, 3}, make([]byte, ReplyFixed-2)...),
		"flags 0x02": append(append([]byte{1, 0}, make([]byte, 20)...), 2),
	} {
		if r, err := DecodeReply(b); err == nil {
			t.Errorf("%s: accepted as %+v", name, r)
		}
	}
}

// FuzzDecodePurgeRequest: whatever a member sends, decoding never panics,
// and what it accepts re-encodes to the same bytes.
func FuzzDecodePurgeRequest(f *testing.F) {
	for _, spec := range []Spec{
		{Key: coralname.CacheKey("http", "www.example.com", 0, "/a.jpg", "")},
		{Prefix: true, Norm: "//www.example.com/img/"},
		{Prefix: true, Norm: "//127.0.0.1:8080/a?b"},
	} {
		b, err := EncodeRequest(spec)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{1, 1, '/', '/'})
	f.Fuzz(func(t *testing.T, b []byte) {
		spec, err := DecodeRequest(b)
		if err != nil {
			return
		}
		again, err := EncodeRequest(spec)
		if err != nil || !bytes.Equal(again, b) {
			t.Fatalf("%x → %+v → %x, %v", b, spec, again, err)
		}
	})
}

// FuzzDecodePurgeReply: likewise for a peer's reply.
func FuzzDecodePurgeReply(f *testing.F) {
	f.Add(EncodeReply(Reply{Status: StatusOK, Purged: 7, Scanned: 100000, Complete: true}))
	f.Add(EncodeReply(Reply{Status: StatusRefused, Detail: "coral purge: malformed purge message: mode 9"}))
	f.Add(EncodeReply(Reply{Status: StatusNoCache}))
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := DecodeReply(b)
		if err != nil {
			return
		}
		if len(b) > coraldht.MaxAppPayload {
			return // CallApp never returns more; the encoder cuts the detail
		}
		if again := EncodeReply(r); !bytes.Equal(again, b) {
			t.Fatalf("%x → %+v → %x", b, r, again)
		}
	})
}

// FuzzParsePurgeURL: whatever an operator types, parsing never panics; an
// accepted URL's key is the hash of its normalized form, the normalized
// form parses to itself, and its Coralized form names the same key.
func FuzzParsePurgeURL(f *testing.F) {
	for _, s := range []string{
		"http://www.example.com.nyud.test/a.jpg", "https://www.example.com:8443/a/../b?c=%7e#f",
		"http://192.0.2.1.8080.nyud.test/", "http://www.example.com", "http://a_b.example.com/%zz",
	} {
		f.Add(s, false)
	}
	f.Add("http://www.example.com/img/", true)
	zones := []string{"nyud.test"}
	f.Fuzz(func(t *testing.T, raw string, prefix bool) {
		spec, err := ParseURL(raw, prefix, zones)
		if err != nil {
			return
		}
		if prefix != spec.Prefix || (!prefix && spec.Key != KeyOfNorm(spec.Norm)) || (prefix && spec.Key != "") {
			t.Fatalf("%q: %+v", raw, spec)
		}
		again, err := ParseURL("http:"+spec.Norm, prefix, zones)
		if err != nil || again != spec {
			t.Fatalf("%q → %+v; its normalized form → %+v, %v", raw, spec, again, err)
		}
		if prefix && len(spec.Norm) <= coraldht.MaxAppPayload-2 {
			if _, err := EncodeRequest(spec); err != nil {
				t.Fatalf("%q: prefix %q does not encode: %v", raw, spec.Norm, err)
			}
		}
		u, _ := url.Parse("http:" + spec.Norm)
		port := 0
		if p := u.Port(); p != "" {
			port, _ = strconv.Atoi(p)
		}
		coral := "http://" + coralname.Coralize(coralname.Origin{Host: u.Hostname(), Port: port}, "nyud.test") + u.EscapedPath()
		if u.RawQuery != "" {
			coral += "?" + u.RawQuery
		}
		if c, err := ParseURL(coral, prefix, zones); err != nil || c != spec {
			t.Fatalf("%q → %+v; Coralized %q → %+v, %v", raw, spec, coral, c, err)
		}
	})
}

// BenchmarkPurgePrefixScan measures a prefix purge over a cache of
// PURGE_BENCH_OBJECTS (default 20000) objects that matches none of them:
// the cost per object scanned, and the longest another user of the store
// waited for its lock meanwhile.
func BenchmarkPurgePrefixScan(b *testing.B) {
	n := 20000
	if v := os.Getenv("PURGE_BENCH_OBJECTS"); v != "" {
		fmt.Sscan(v, &n)
	}
	store, err := diskcache.Open(diskcache.Options{Dir: b.TempDir(), MaxBytes: 1 << 40, NoSync: true})
	if err != nil {
		b.Fatal(err)
	}
	defer store.Close()
	for i := range n {
		path := fmt.Sprintf("/obj/%d.jpg", i)
		key := coralname.CacheKey("http", "www.example.com", 0, path, "")
		m := diskcache.Meta{Status: 200, Header: http.Header{"Content-Type": {"image/jpeg"}}, Size: 1,
			Stored: time.Now(), Expires: time.Now().Add(time.Hour), Extra: map[string]string{"url": coralname.OriginURL("http", "www.example.com", 0, path, "").String(), "source": "origin"}}
		w, err := store.Create(key, m)
		if err != nil {
			b.Fatal(err)
		}
		w.Write([]byte("x"))
		if err := w.Commit(m); err != nil {
			b.Fatal(err)
		}
	}
	c := Cache{Dir: "bench", Store: store}
	stop := make(chan struct{})
	waits := make(chan time.Duration, 1)
	go func() {
		var worst time.Duration
		for {
			select {
			case <-stop:
				waits <- worst
				return
			default:
			}
			t0 := time.Now()
			store.Stat("0000000000000000000000000000000000000000")
			worst = max(worst, time.Since(t0))
		}
	}()
	b.ResetTimer()
	for range b.N {
		r := purgePrefix(context.Background(), c, "//www.example.org/")
		if r.Scanned != n || r.Purged != 0 {
			b.Fatalf("%+v", r)
		}
	}
	b.StopTimer()
	close(stop)
	worst := <-waits
	b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*n), "ns/object")
	b.ReportMetric(float64(worst.Microseconds()), "µs-max-lock-wait")
}
