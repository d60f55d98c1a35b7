package proxy

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/httpcache"
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
	// The neutral request first (neutral.go), whose Vary names
	// User-Agent; then the client's own.
	reqs := origin.requests()
	got := reqs[len(reqs)-1].Header.Values("User-Agent")
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

// firewallOrigin answers 403 to a scanner's User-Agent (as a web
// application firewall does) and the page otherwise, varying on
// Accept-Language. forbidden is the 403's Cache-Control ("" for none).
func firewallOrigin(t *testing.T, forbidden string) *recordingOrigin {
	return newRecordingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("User-Agent"), "sqlmap") {
			if forbidden != "" {
				w.Header().Set("Cache-Control", forbidden)
			}
			w.WriteHeader(http.StatusForbidden)
			io.WriteString(w, "forbidden")
			return
		}
		w.Header().Set("Cache-Control", "max-age=3600")
		if r.URL.Path == "/i18n" {
			w.Header().Set("Vary", "Accept-Language")
			io.WriteString(w, "page "+r.Header.Get("Accept-Language"))
			return
		}
		io.WriteString(w, "page")
	})
}

// TestScannerCannotPoisonWith403: one request with a scanner's User-Agent
// to a site behind a firewall used to have the firewall's 403 kept for
// min_ttl (5 min) and served to every browser. An error without freshness
// information is kept no time at all now. The scanner's fields reach the
// origin only once it is known to look at clients' fields (it varies
// /i18n on Accept-Language); before that, the scanner would get the
// neutral request's page like everyone (TestNeutralFirstRequest).
func TestScannerCannotPoisonWith403(t *testing.T) {
	origin := firewallOrigin(t, "")
	p := startLocalProxy(t, 0, nil) // Coral's defaults: min_ttl 5m
	host := origin.coralHost()
	p.get(t, host, "/i18n", "Accept-Language", "fr")
	p.idle(t)
	if resp, _ := p.get(t, host, "/", "User-Agent", "sqlmap/1.8"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("the scanner got %d, want the origin's 403", resp.StatusCode)
	}
	p.idle(t)
	resp, body := p.get(t, host, "/", "User-Agent", chromeUA)
	if resp.StatusCode != http.StatusOK || body != "page" {
		t.Errorf("a browser after the scanner got %d %q (Cache-Status %q), want the page", resp.StatusCode, body, resp.Header.Get("Cache-Status"))
	}
}

// TestErrorDoesNotWipeVaryIndex: a 403 without Vary (the firewall's),
// even one the origin marks fresh, used to replace the URL's Vary index,
// so the fresh English page became 403 too. An error never replaces or
// hides a fresh copy: the 403 answers the scanner only.
func TestErrorDoesNotWipeVaryIndex(t *testing.T) {
	origin := firewallOrigin(t, "max-age=600")
	p := startLocalProxy(t, 0, nil)
	host := origin.coralHost()
	if _, body := p.get(t, host, "/i18n", "Accept-Language", "en"); body != "page en" {
		t.Fatalf("en: %q", body)
	}
	p.idle(t)
	if resp, _ := p.get(t, host, "/i18n", "Accept-Language", "fr", "User-Agent", "sqlmap/1.8"); resp.StatusCode != http.StatusForbidden {
		t.Fatalf("the scanner got %d, want the origin's 403", resp.StatusCode)
	}
	p.idle(t)
	n := len(origin.requests())
	resp, body := p.get(t, host, "/i18n", "Accept-Language", "en")
	if resp.StatusCode != http.StatusOK || body != "page en" {
		t.Errorf("en after the scanner: %d %q (Cache-Status %q), want the fresh English page", resp.StatusCode, body, resp.Header.Get("Cache-Status"))
	}
	if len(origin.requests()) != n {
		t.Errorf("en after the scanner went to the origin; want the stored copy")
	}
	// The French variant the scanner asked for is fetched for the next
	// visitor, not served as the scanner's 403.
	if resp, body := p.get(t, host, "/i18n", "Accept-Language", "fr"); resp.StatusCode != http.StatusOK || body != "page fr" {
		t.Errorf("fr after the scanner: %d %q", resp.StatusCode, body)
	}
}

// TestNoVaryResponseKeepsFreshVariants: a response without Vary does not
// wipe an index whose variants are still fresh, whatever its status: an
// origin that answers one request without Vary (a firewall's challenge
// page, a misconfigured route) hid every stored variant.
func TestNoVaryResponseKeepsFreshVariants(t *testing.T) {
	origin := newRecordingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=3600")
		if r.Header.Get("Accept-Language") == "xx" {
			io.WriteString(w, "challenge") // no Vary
			return
		}
		w.Header().Set("Vary", "Accept-Language")
		io.WriteString(w, "page "+r.Header.Get("Accept-Language"))
	})
	p := startLocalProxy(t, 0, nil)
	host := origin.coralHost()
	p.get(t, host, "/", "Accept-Language", "en")
	p.idle(t)
	if _, body := p.get(t, host, "/", "Accept-Language", "xx"); body != "challenge" {
		t.Fatalf("xx: %q", body)
	}
	p.idle(t)
	if _, body := p.get(t, host, "/", "Accept-Language", "en"); body != "page en" {
		t.Errorf("en after a response without Vary: %q, want the fresh English page", body)
	}
}

// forgingMember is a member of the network that serves a forged copy of
// every object: as fresh from its cache (Cache-Status hit), Coral-Fresh
// fresh, cacheable for a year, with a Last-Modified in the future and no
// ETag.
func forgingMember(t *testing.T, fresh string) *httptest.Server {
	ln, err := net.Listen("tcp", "127.0.4.200:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Status", `coral; hit; detail="local"`)
		w.Header().Set(peerFreshnessField, fresh)
		w.Header().Set("Cache-Control", "max-age=31536000")
		w.Header().Set("Last-Modified", time.Now().AddDate(1, 0, 0).UTC().Format(http.TimeFormat))
		io.WriteString(w, "forged")
	}))
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// putForgedReference puts a reference to the member at addr for host's
// path into p's DSHT, living ttl.
func putForgedReference(t *testing.T, p *testProxy, o *countingOrigin, path string, addr string, ttl time.Duration) string {
	t.Helper()
	key := coralname.CacheKey("http", "127.0.0.1", atoi(t, o.port()), path, "")
	ref := reference{Addr: netip.MustParseAddrPort(addr), Complete: true}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := p.node.Put(ctx, coraldht.KeyFor(key), ref.encode(), ttl); err != nil {
		t.Fatal(err)
	}
	return key
}

// fileOrigin answers as Python's http.server and Express do: 304 to any
// If-Modified-Since not earlier than its file's time (even one in the
// future), with no validator in the 304; else the file.
func fileOrigin(t *testing.T, body string, mtime time.Time) *countingOrigin {
	return newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		if ims, err := http.ParseTime(r.Header.Get("If-Modified-Since")); err == nil && !mtime.After(ims) {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		w.Header().Set("Last-Modified", mtime.UTC().Format(http.TimeFormat))
		w.Header().Set("Cache-Control", "max-age=600")
		io.WriteString(w, body)
	})
}

// TestForgedPeerCopyDoesNotOutliveMember: a member served a forged copy
// (Coral-Fresh 1, a year of max-age, a future Last-Modified, no ETag);
// revalidating it sent the forged date as If-Modified-Since, the origin
// said 304, and the forged copy stayed fresh for a year. A peer's copy is
// now fetched again unconditionally, and what the origin sends replaces
// it.
func TestForgedPeerCopyDoesNotOutliveMember(t *testing.T) {
	proxies := startTestProxies(t, 2) // a DSHT of one node cannot start
	p := proxies[1]
	member := forgingMember(t, "1")
	o := fileOrigin(t, "real", time.Now().Add(-time.Hour))
	key := putForgedReference(t, p, o, "/page", member.Listener.Addr().String(), time.Hour)
	if body, cs := askProxy(t, p, o.coralHost(), "/page"); body != "forged" || !strings.Contains(cs, "peer") {
		t.Fatalf("first request: %q %q; want the forged copy from the member", body, cs)
	}
	waitStored(t, p)
	member.Close() // the member is gone
	// The forged copy's second of freshness is over.
	m, ok := p.px.store.Peek(key)
	if !ok {
		t.Fatal("the forged copy was not stored")
	}
	m.Expires = time.Now().Add(-time.Second)
	if err := p.px.store.UpdateMeta(key, m); err != nil {
		t.Fatal(err)
	}
	body, cs := askProxy(t, p, o.coralHost(), "/page")
	if body != "real" {
		t.Errorf("after revalidation: %q (Cache-Status %q), want the origin's page", body, cs)
	}
	waitStored(t, p)
	if m, ok := p.px.store.Peek(key); !ok || time.Until(m.Expires) > 601*time.Second {
		t.Errorf("the copy is fresh until %v; want at most the origin's 600 s", m.Expires)
	}
	if n := o.count("/page"); n != 1 {
		t.Errorf("origin asked %d times, want once", n)
	}
}

// TestPeerCopyBoundedByReference: a peer's copy is fresh no longer than
// the reference that led to it had left, whatever Coral-Fresh claims
// (before, up to 2 h for every reference).
func TestPeerCopyBoundedByReference(t *testing.T) {
	proxies := startTestProxies(t, 2) // a DSHT of one node cannot start
	p := proxies[1]
	member := forgingMember(t, "31536000")
	o := fileOrigin(t, "real", time.Now().Add(-time.Hour))
	key := putForgedReference(t, p, o, "/page", member.Listener.Addr().String(), 10*time.Minute)
	if body, _ := askProxy(t, p, o.coralHost(), "/page"); body != "forged" {
		t.Fatalf("first request: %q; want the forged copy from the member", body)
	}
	waitStored(t, p)
	m, ok := p.px.store.Peek(key)
	if !ok {
		t.Fatal("the forged copy was not stored")
	}
	if left := time.Until(m.Expires); left > 10*time.Minute {
		t.Errorf("the member's copy is fresh for %s; its reference had 10 min left", left.Round(time.Second))
	}
}

// TestFutureLastModifiedIsNoValidator: a Last-Modified later than the
// response's Date or its arrival is never sent as If-Modified-Since.
func TestFutureLastModifiedIsNoValidator(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name   string
		lm     time.Time
		date   time.Time
		wantIM bool
	}{
		{"past", now.Add(-time.Hour), now, true},
		{"equal to Date", now, now, true},
		{"after arrival", now.Add(time.Hour), time.Time{}, false},
		{"after Date", now.Add(-time.Minute), now.Add(-time.Hour), false},
	} {
		stored := http.Header{"Last-Modified": {tc.lm.UTC().Format(http.TimeFormat)}}
		if !tc.date.IsZero() {
			stored.Set("Date", tc.date.UTC().Format(http.TimeFormat))
		}
		dst := http.Header{}
		httpcache.AddValidators(dst, stored, now)
		if got := dst.Get("If-Modified-Since") != ""; got != tc.wantIM {
			t.Errorf("%s: If-Modified-Since sent %v, want %v", tc.name, got, tc.wantIM)
		}
	}
}

// TestErrorDoesNotReplaceStaleSuccess: an origin that answers one
// request's unkeyed fields with an error it marks fresh for an hour, while
// its page is fresh for moments only (s-maxage, which min_ttl does not
// stretch), used to have that error replace the page as soon as the page
// went stale and a scanner was the one to revalidate it: every browser
// then got the scanner's 500 as a hit. An error never replaces a stored
// success, stale or not.
func TestErrorDoesNotReplaceStaleSuccess(t *testing.T) {
	origin := newRecordingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("User-Agent"), "sqlmap") {
			w.Header().Set("Cache-Control", "max-age=3600")
			w.WriteHeader(http.StatusInternalServerError)
			io.WriteString(w, "poisoned")
			return
		}
		w.Header().Set("Cache-Control", "s-maxage=0")
		if r.URL.Path == "/i18n" {
			// Makes the proxy ask this origin with clients' fields
			// first (neutral.go), so the scanner's reach it.
			w.Header().Set("Vary", "Accept-Language")
		}
		io.WriteString(w, "page")
	})
	p := startLocalProxy(t, 0, nil)
	host := origin.coralHost()
	p.get(t, host, "/i18n", "Accept-Language", "fr")
	p.idle(t)
	if _, body := p.get(t, host, "/", "User-Agent", chromeUA); body != "page" {
		t.Fatalf("first browser: %q", body)
	}
	p.idle(t)
	if resp, _ := p.get(t, host, "/", "User-Agent", "sqlmap/1.8"); resp.StatusCode != http.StatusInternalServerError {
		t.Fatalf("the scanner got %d, want the origin's 500", resp.StatusCode)
	}
	p.idle(t)
	resp, body := p.get(t, host, "/", "User-Agent", chromeUA)
	if resp.StatusCode != http.StatusOK || body != "page" {
		t.Errorf("a browser after the scanner got %d %q (Cache-Status %q), want the page", resp.StatusCode, body, resp.Header.Get("Cache-Status"))
	}
}
