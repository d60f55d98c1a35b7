package coralname

import (
	"crypto/sha1"
	"encoding/hex"
	"strings"
	"testing"
)

func TestNormalizeURL(t *testing.T) {
	cases := []struct {
		name              string
		scheme, host      string
		port              int
		path, query, want string
	}{
		{"basic", "http", "www.example.com", 0, "/a.jpg", "", "//www.example.com/a.jpg"},
		{"host case and dot", "HTTP", "WWW.Example.COM.", 0, "/", "", "//www.example.com/"},
		{"empty path", "http", "example.com", 0, "", "", "//example.com/"},
		{"relative path", "http", "example.com", 0, "a/b", "", "//example.com/a/b"},
		{"default http port", "http", "example.com", 80, "/", "", "//example.com/"},
		{"default https port", "https", "example.com", 443, "/", "", "//example.com/"},
		{"https 80 kept", "https", "example.com", 80, "/", "", "//example.com:80/"},
		{"http 443 kept", "http", "example.com", 443, "/", "", "//example.com:443/"},
		{"other port", "http", "example.com", 8080, "/", "", "//example.com:8080/"},
		{"negative port is default", "http", "example.com", -1, "/", "", "//example.com/"},
		{"scheme independent", "https", "example.com", 0, "/x", "", "//example.com/x"},
		{"ipv6 host", "http", "2001:DB8::1", 8080, "/", "", "//[2001:db8::1]:8080/"},
		{"ipv6 bracketed", "http", "[::1]", 0, "/", "", "//[::1]/"},
		{"host cannot run into path", "http", "a/b", 0, "/c", "", "//a%2Fb/c"},

		// RFC 3986 §6.2.2.2: percent-encoding normalization.
		{"hex upper", "http", "h.com", 0, "/a%2fb%3a", "", "//h.com/a%2Fb%3A"},
		{"decode unreserved", "http", "h.com", 0, "/%7Euser/%41%62%2D%2E%5F", "", "//h.com/~user/Ab-._"},
		{"reserved stays encoded", "http", "h.com", 0, "/a%2Fb", "", "//h.com/a%2Fb"},
		{"stray percent", "http", "h.com", 0, "/100%", "", "//h.com/100%25"},
		{"bad escape", "http", "h.com", 0, "/%zz%4", "", "//h.com/%25zz%254"},
		{"encode space and unicode", "http", "h.com", 0, "/a b/ü", "", "//h.com/a%20b/%C3%BC"},
		{"encode nul", "http", "h.com", 0, "/a\x00", "", "//h.com/a%00"},
		{"sub-delims kept", "http", "h.com", 0, "/!$&'()*+,;=:@", "", "//h.com/!$&'()*+,;=:@"},

		// RFC 3986 §5.2.4: dot segments.
		{"dot segments", "http", "h.com", 0, "/a/b/c/./../../g", "", "//h.com/a/g"},
		{"climb above root", "http", "h.com", 0, "/../../etc/passwd", "", "//h.com/etc/passwd"},
		{"only dots", "http", "h.com", 0, "/..", "", "//h.com/"},
		{"trailing dotdot", "http", "h.com", 0, "/a/b/..", "", "//h.com/a/"},
		{"trailing dot", "http", "h.com", 0, "/a/.", "", "//h.com/a/"},
		{"encoded dots", "http", "h.com", 0, "/a/%2e%2E/b", "", "//h.com/b"},
		{"double slash kept", "http", "h.com", 0, "/a//b/", "", "//h.com/a//b/"},
		{"dots in names kept", "http", "h.com", 0, "/a/.../b..c", "", "//h.com/a/.../b..c"},

		// Query: order kept, nothing dropped; fragment dropped.
		{"query kept", "http", "h.com", 0, "/", "b=2&a=1&a=&c", "//h.com/?b=2&a=1&a=&c"},
		{"query plus kept", "http", "h.com", 0, "/", "q=a+b%20c", "//h.com/?q=a+b%20c"},
		{"query escapes", "http", "h.com", 0, "/", "x=%7e%2f", "//h.com/?x=~%2F"},
		{"query encodes", "http", "h.com", 0, "/", "x=a b\"", "//h.com/?x=a%20b%22"},
		{"query question mark", "http", "h.com", 0, "/", "a=?/", "//h.com/?a=?/"},
		{"fragment in path", "http", "h.com", 0, "/a#frag", "", "//h.com/a"},
		{"fragment in query", "http", "h.com", 0, "/a", "x=1#frag", "//h.com/a?x=1"},
		{"encoded hash is data", "http", "h.com", 0, "/a%23b", "", "//h.com/a%23b"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := NormalizeURL(tc.scheme, tc.host, tc.port, tc.path, tc.query)
			if got != tc.want {
				t.Fatalf("NormalizeURL(%q, %q, %d, %q, %q) = %q, want %q", tc.scheme, tc.host, tc.port, tc.path, tc.query, got, tc.want)
			}
			sum := sha1.Sum([]byte(got))
			if key := CacheKey(tc.scheme, tc.host, tc.port, tc.path, tc.query); key != hex.EncodeToString(sum[:]) {
				t.Fatalf("CacheKey = %s, not SHA-1 of %q", key, got)
			}
		})
	}
}

func TestCacheKeyEquivalence(t *testing.T) {
	same := [][5]any{
		{"http", "www.example.com", 0, "/a.jpg", ""},
		{"HTTP", "WWW.EXAMPLE.COM.", 80, "/a.jpg", ""},
		{"https", "www.example.com", 443, "/x/../a.jpg", ""},
		{"https", "www.example.com", 0, "/%61.jpg", ""},
		{"http", "www.example.com", 0, "/./a.jpg#top", ""},
	}
	key := func(v [5]any) string {
		return CacheKey(v[0].(string), v[1].(string), v[2].(int), v[3].(string), v[4].(string))
	}
	want := key(same[0])
	if len(want) != 40 {
		t.Fatalf("key %q is not 40 hex digits", want)
	}
	for _, v := range same[1:] {
		if got := key(v); got != want {
			t.Errorf("key%v = %s, want %s", v, got, want)
		}
	}
	different := [][5]any{
		{"http", "www.example.com", 8080, "/a.jpg", ""},
		{"http", "example.com", 0, "/a.jpg", ""},
		{"http", "www.example.com", 0, "/A.jpg", ""},
		{"http", "www.example.com", 0, "/a.jpg", "v=1"},
		{"http", "www.example.com", 0, "/a.jpg/", ""},
		{"http", "www.example.com", 0, "/a%2Ejpg%2F", ""},
	}
	for _, v := range different {
		if got := key(v); got == want {
			t.Errorf("key%v collides with the base key", v)
		}
	}
}

// checkNormalizeIdempotent checks NormalizeURL's invariants for one input.
func checkNormalizeIdempotent(t *testing.T, scheme, host string, port int, path, query string) {
	n := NormalizeURL(scheme, host, port, path, query)
	h, p, q := normalizeHost(host), normalizePath(path), normalizeQuery(query)
	if normalizeHost(h) != h || normalizePath(p) != p || normalizeQuery(q) != q {
		t.Fatalf("not idempotent: host %q→%q→%q, path %q→%q→%q, query %q→%q→%q",
			host, h, normalizeHost(h), path, p, normalizePath(p), query, q, normalizeQuery(q))
	}
	if n2 := NormalizeURL(scheme, h, port, p, q); n2 != n {
		t.Fatalf("NormalizeURL not idempotent: %q then %q", n, n2)
	}
	if !strings.HasPrefix(n, "//") || !strings.HasPrefix(p, "/") {
		t.Fatalf("NormalizeURL = %q, path %q", n, p)
	}
	for _, seg := range strings.Split(p, "/") {
		if seg == "." || seg == ".." {
			t.Fatalf("dot segment left in %q", p)
		}
	}
	for i := 0; i < len(n); i++ {
		if c := n[i]; c <= ' ' || c >= 0x7f || c == '#' {
			t.Fatalf("NormalizeURL = %q has byte %#x", n, c)
		}
	}
	sum := sha1.Sum([]byte(n))
	if k := CacheKey(scheme, host, port, path, query); k != hex.EncodeToString(sum[:]) {
		t.Fatalf("CacheKey is not SHA-1 of NormalizeURL")
	}
}

func FuzzCacheKey(f *testing.F) {
	f.Add("http", "www.example.com", 0, "/a.jpg", "")
	f.Add("https", "WWW.Example.COM.", 443, "/a/./b/../c%7e%2f", "b=2&a=1#frag")
	f.Add("http", "[::1]", 8080, "/../..", "x=%zz")
	f.Add("", "a%2E", -5, "%2e%2E/x", "?#")
	f.Add("HTTP", "h.com", 80, "/a b/ü\x00", "q=a+b")
	f.Fuzz(func(t *testing.T, scheme, host string, port int, path, query string) {
		checkNormalizeIdempotent(t, scheme, host, port, path, query)
	})
}

// FuzzNormalizeShortcuts: the shortcuts of normalizePercent and
// removeDotSegments (a part that is normal already is returned as it is)
// give what the general algorithms build.
func FuzzNormalizeShortcuts(f *testing.F) {
	for _, s := range []string{"", "/", "/1k", "/a/b.c/d", "/a/./b", "/a/../b", "/.well-known/x", "/a/..", "/A%2e%2E/b", "Example.COM", "/x?y=%zz", "a b", "/%41"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		for _, c := range []struct {
			name    string
			allowed func(byte) bool
			lower   bool
		}{{"host", isHostChar, true}, {"path", isPathChar, false}, {"query", isQueryChar, false}} {
			if got, want := normalizePercent(s, c.allowed, c.lower), percentNormalized(s, c.allowed, c.lower); got != want {
				t.Fatalf("normalizePercent(%q) as %s = %q, want %q", s, c.name, got, want)
			}
		}
		p := "/" + s
		if got, want := removeDotSegments(p), dotSegmentsRemoved(p); got != want {
			t.Fatalf("removeDotSegments(%q) = %q, want %q", p, got, want)
		}
	})
}

// TestParseCacheKey: a key CacheKey made reads back as its SHA-1; anything
// else (other lengths, upper case, other bytes) is refused.
func TestParseCacheKey(t *testing.T) {
	key := CacheKey("http", "www.example.com", 0, "/a.jpg", "")
	b, ok := ParseCacheKey(key)
	if want := sha1.Sum([]byte(NormalizeURL("http", "www.example.com", 0, "/a.jpg", ""))); !ok || b != want {
		t.Errorf("ParseCacheKey(%s) = %x, %v; want %x", key, b, ok, want)
	}
	for _, bad := range []string{"", key[:39], key + "0", strings.ToUpper(key), "g" + key[1:], " " + key[1:]} {
		if _, ok := ParseCacheKey(bad); ok {
			t.Errorf("ParseCacheKey(%q) accepted", bad)
		}
	}
}

// FuzzParseCacheKey: ParseCacheKey accepts exactly 40 lowercase hex
// digits, and what it returns encodes back to them.
func FuzzParseCacheKey(f *testing.F) {
	f.Add("0123456789abcdef0123456789abcdef01234567")
	f.Add("0123456789ABCDEF0123456789abcdef01234567")
	f.Add("")
	f.Add("x0123456789abcdef0123456789abcdef0123456")
	f.Fuzz(func(t *testing.T, s string) {
		b, ok := ParseCacheKey(s)
		_, err := hex.DecodeString(s)
		want := len(s) == 40 && err == nil && s == strings.ToLower(s)
		if ok != want {
			t.Fatalf("ParseCacheKey(%q) ok = %v, want %v", s, ok, want)
		}
		if ok && hex.EncodeToString(b[:]) != s {
			t.Fatalf("ParseCacheKey(%q) = %x", s, b)
		}
	})
}
