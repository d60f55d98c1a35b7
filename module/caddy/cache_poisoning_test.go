package coralcaddy

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// Regression tests for cache poisoning through what a request carries
// (issue 19: classes 3, 6 and 8 of the threat model).

const chromeUA = "Mozilla/5.0 (X11; Linux x86_64) AppleWebKit/537.36 (KHTML, like Gecko) Chrome/131.0.0.0 Safari/537.36"

// TestVariantKeyIsWhatTheOriginGot: a response that varies on User-Agent
// is stored under the key of the User-Agent the origin was sent. Two
// User-Agent lines split at Chrome's comma used to be keyed as the real
// Chrome User-Agent (lines joined) while the origin got only the first
// line, so a page made for "…(KHTML" was served to every Chrome.
func TestVariantKeyIsWhatTheOriginGot(t *testing.T) {
	origin := newRecordingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Vary", "User-Agent")
		io.WriteString(w, "for "+strings.Join(r.Header.Values("User-Agent"), " | "))
	})
	p := startLocalProxy(t, 0, nil)
	host := origin.coralHost()
	// Two lines, raw: net/http's client sends only the first.
	first, second, _ := strings.Cut(chromeUA, ", ")
	resp, body := p.raw(t, "GET / HTTP/1.1\r\nHost: "+host+"\r\nUser-Agent: "+first+"\r\nUser-Agent: "+second+"\r\nConnection: close\r\n\r\n")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("split User-Agent: %d %q", resp.StatusCode, body)
	}
	got := origin.requests()[0].Header.Values("User-Agent")
	if len(got) != 1 || got[0] != chromeUA+" "+proxyVersion {
		t.Errorf("the origin got User-Agent %q, want the one line %q", got, chromeUA+" "+proxyVersion)
	}
	p.idle(t)
	// Whatever the split request was stored as, a real Chrome gets the
	// page the origin made for the real Chrome User-Agent.
	_, body = p.get(t, host, "/", "User-Agent", chromeUA)
	if want := "for " + chromeUA + " " + proxyVersion; body != want {
		t.Errorf("Chrome got %q, want %q", body, want)
	}
	// Whitespace is normalized before the origin sees it, too: a
	// User-Agent that differs from Chrome's only there is Chrome's.
	p.idle(t)
	n := len(origin.requests())
	_, body = p.get(t, host, "/", "User-Agent", strings.ReplaceAll(chromeUA, " ", "  "))
	if want := "for " + chromeUA + " " + proxyVersion; body != want {
		t.Errorf("Chrome with doubled spaces got %q, want %q", body, want)
	}
	if len(origin.requests()) != n {
		t.Errorf("Chrome with doubled spaces was fetched again; want the Chrome variant")
	}
}
