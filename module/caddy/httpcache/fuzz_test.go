package httpcache

import (
	"net/http"
	"testing"
	"time"
)

// FuzzTargetedCacheControl: any CDN-Cache-Control and Cache-Control give
// directives without panicking; the targeted field is used exactly when
// it parses; delta values stay within 0..2^31 s.
func FuzzTargetedCacheControl(f *testing.F) {
	for _, seed := range [][2]string{
		{"max-age=3600", "no-store"},
		{"max-age=10000, &&&&&", "no-store"},
		{`max-age="10000"`, "max-age=5"},
		{"private, no-cache=\"a, b\"", ""},
		{"foobar, max-age=3600;x=1", ""},
		{"max-age=99999999999", ""},
		{"max-age=-1", ""},
		{"no-store=?0, s-maxage=5", ""},
		{"", "max-age=1"},
		{"MaX-aGe=3600", ""},
		{"max-age=(1 2)", ""},
	} {
		f.Add(seed[0], seed[1])
	}
	f.Fuzz(func(t *testing.T, cdn, cc string) {
		h := http.Header{}
		if cdn != "" {
			h.Set("CDN-Cache-Control", cdn)
		}
		if cc != "" {
			h.Set("Cache-Control", cc)
		}
		got := ParseResponseCacheControl(h)
		_, ok := parseTargeted(h.Values("CDN-Cache-Control"))
		if got.Targeted != (cdn != "" && ok) {
			t.Fatalf("CDN-Cache-Control %q: Targeted %v, parsed %v", cdn, got.Targeted, ok)
		}
		for _, d := range []time.Duration{got.MaxAge, got.SMaxAge, got.StaleWhileRevalidate, got.StaleIfError} {
			if d < 0 || d > MaxDelta {
				t.Fatalf("%q / %q: delta %v out of range", cdn, cc, d)
			}
		}
		Lifetime(Policy{}, time.Unix(0, 0), 200, h)
	})
}

// FuzzParseHTTPDate: whatever ParseHTTPDate accepts is an HTTP-date whose
// IMF-fixdate form parses back to the same instant.
func FuzzParseHTTPDate(f *testing.F) {
	for _, s := range []string{
		"Sun, 06 Nov 1994 08:49:37 GMT", "Sunday, 06-Nov-94 08:49:37 GMT", "Sun Nov  6 08:49:37 1994",
		"Thu, 18 Aug 2050 2:01:18 GMT", "Thu, 18  Aug  2050 02:01:18 GMT", "Thu, 18-Aug-2050 02:01:18 GMT",
		"Sun, 06 Nov 1994 08:49:37 gmt", "0", "-1", "",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		tm, ok := ParseHTTPDate(s)
		if !ok {
			return
		}
		back, ok := ParseHTTPDate(tm.Format(http.TimeFormat))
		if !ok || !back.Equal(tm) {
			t.Fatalf("%q → %v → %q → %v %v", s, tm, tm.Format(http.TimeFormat), back, ok)
		}
	})
}
