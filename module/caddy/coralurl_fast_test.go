package coralcaddy

import (
	"strings"
	"testing"
)

// The shortcuts of normalizePercent and removeDotSegments (a part that is
// normal already is returned as it is) against the general algorithms,
// written out here without them.

func referencePercent(s string, allowed func(byte) bool, lower bool) string {
	const hexUpper = "0123456789ABCDEF"
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' && i+2 < len(s) && isHexDigit(s[i+1]) && isHexDigit(s[i+2]) {
			d := hexValue(s[i+1])<<4 | hexValue(s[i+2])
			i += 2
			if isUnreserved(d) {
				if lower && 'A' <= d && d <= 'Z' {
					d += 'a' - 'A'
				}
				b.WriteByte(d)
			} else {
				b.WriteString("%" + string(hexUpper[d>>4]) + string(hexUpper[d&15]))
			}
			continue
		}
		if c != '%' && allowed(c) {
			if lower && 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			b.WriteByte(c)
			continue
		}
		b.WriteString("%" + string(hexUpper[c>>4]) + string(hexUpper[c&15]))
	}
	return b.String()
}

func referenceDotSegments(p string) string {
	var out []string
	segs := strings.Split(p[1:], "/")
	trailing := false
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case ".":
			trailing = last
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			trailing = last
		default:
			out = append(out, s)
		}
	}
	r := "/" + strings.Join(out, "/")
	if trailing && len(out) > 0 {
		r += "/"
	}
	return r
}

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
			if got, want := normalizePercent(s, c.allowed, c.lower), referencePercent(s, c.allowed, c.lower); got != want {
				t.Fatalf("normalizePercent(%q) as %s = %q, want %q", s, c.name, got, want)
			}
		}
		p := "/" + s
		if got, want := removeDotSegments(p), referenceDotSegments(p); got != want {
			t.Fatalf("removeDotSegments(%q) = %q, want %q", p, got, want)
		}
	})
}
