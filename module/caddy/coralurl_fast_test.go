package coralcaddy

import "testing"

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
