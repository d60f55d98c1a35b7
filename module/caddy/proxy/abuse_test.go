package proxy

import (
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/module/caddy/abuse"
	"github.com/coralcdn/coral/module/caddy/httpcache"
)

var t0 = time.Date(2025, 6, 1, 12, 0, 0, 0, time.UTC)

// ---------------------------------------------------------------------
// The per-request entry point.

func newAbuseRequest(origin, clientIP string, peer bool) *http.Request {
	r := httptest.NewRequest(http.MethodGet, "http://"+origin+".nyud.test/a?x=1", nil)
	r.RemoteAddr = "203.0.113.9:4444"
	if clientIP != "" {
		r.RemoteAddr = net.JoinHostPort(clientIP, "4444")
	}
	if peer {
		r.Header.Set("Cache-Control", "only-if-cached")
	}
	return r
}

func handlerStatus(t *testing.T, err error) int {
	t.Helper()
	status := errorStatus(err)
	if status == 0 {
		t.Fatalf("err = %v, want an *Error", err)
	}
	return status
}

func TestAdmitBlacklistRateBandwidth(t *testing.T) {
	path := filepath.Join(t.TempDir(), "blacklist")
	if err := os.WriteFile(path, []byte("blocked.example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	bl, err := abuse.NewBlacklist(path, time.Hour, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(bl.Close)
	now := t0
	a := &abuse.Controls{
		Blacklist: bl,
		Rate:      abuse.NewRateLimiter(1, 1, 10),
		PeerRate:  abuse.NewRateLimiter(1, 2, 10),
		Budget:    abuse.NewBudget(100, time.Hour),
		Now:       func() time.Time { return now },
	}
	const originURL = "http://www.example.com/a?x=1"

	// Blacklisted: 403, before the rate limit is touched.
	w := httptest.NewRecorder()
	done, err := admitRequest(a, w, newAbuseRequest("www.blocked.example", "", false), "www.blocked.example", func() string { return "http://www.blocked.example/a?x=1" })
	if !done || handlerStatus(t, err) != http.StatusForbidden || !errors.Is(err, abuse.ErrBlacklisted) {
		t.Fatalf("blacklisted: done=%v err=%v", done, err)
	}
	if !strings.Contains(err.Error(), "www.blocked.example") {
		t.Errorf("message %q does not name the site", err)
	}
	// ... and 504 for a peer.
	w = httptest.NewRecorder()
	done, err = admitRequest(a, w, newAbuseRequest("www.blocked.example", "", true), "www.blocked.example", func() string { return "http://www.blocked.example/" })
	if !done || handlerStatus(t, err) != http.StatusGatewayTimeout || !strings.Contains(w.Header().Get("Cache-Status"), "blacklisted") {
		t.Fatalf("blacklisted, peer: done=%v err=%v", done, err)
	}

	// Admitted.
	w = httptest.NewRecorder()
	if done, err := admitRequest(a, w, newAbuseRequest("www.example.com", "", false), "www.example.com", func() string { return originURL }); done || err != nil {
		t.Fatalf("first request: done=%v err=%v", done, err)
	}
	// Same client again: 429 with Retry-After.
	w = httptest.NewRecorder()
	done, err = admitRequest(a, w, newAbuseRequest("www.example.com", "", false), "www.example.com", func() string { return originURL })
	if !done || handlerStatus(t, err) != http.StatusTooManyRequests || w.Header().Get("Retry-After") != "1" {
		t.Fatalf("second request: done=%v err=%v Retry-After=%q", done, err, w.Header().Get("Retry-After"))
	}
	// Peer requests (only-if-cached) from the same address have a bucket
	// of their own (burst 2 here): admitted twice, then 504 without
	// Retry-After.
	for i := range 2 {
		if done, err := admitRequest(a, httptest.NewRecorder(), newAbuseRequest("www.example.com", "", true), "www.example.com", func() string { return originURL }); done || err != nil {
			t.Fatalf("peer request %d within the peer rate: done=%v err=%v", i+1, done, err)
		}
	}
	w = httptest.NewRecorder()
	done, err = admitRequest(a, w, newAbuseRequest("www.example.com", "", true), "www.example.com", func() string { return originURL })
	if !done || handlerStatus(t, err) != http.StatusGatewayTimeout || w.Header().Get("Retry-After") != "" {
		t.Fatalf("peer over rate: done=%v err=%v", done, err)
	}
	// A client is its address (Config.ClientAddr), an IPv6 one its /64:
	// another client is admitted, and two addresses of one /64 share a
	// bucket.
	if done, _ := admitRequest(a, httptest.NewRecorder(), newAbuseRequest("www.example.com", "2001:db8::1", false), "www.example.com", func() string { return originURL }); done {
		t.Fatal("another client refused")
	}
	r := newAbuseRequest("www.example.com", "2001:db8::2", false) // same /64
	if done, _ := admitRequest(a, httptest.NewRecorder(), r, "www.example.com", func() string { return originURL }); !done {
		t.Fatal("another address of the same /64 has a bucket of its own")
	}

	// Over budget: redirected to the origin.
	now = now.Add(time.Second) // a token again for 203.0.113.9
	a.Budget.Add(100, now)
	w = httptest.NewRecorder()
	done, err = admitRequest(a, w, newAbuseRequest("www.example.com", "", false), "www.example.com", func() string { return originURL })
	if !done || err != nil || w.Code != http.StatusFound {
		t.Fatalf("over budget: done=%v err=%v code=%d", done, err, w.Code)
	}
	if loc := w.Header().Get("Location"); loc != "http://www.example.com/a?x=1&coral-no-serve" {
		t.Errorf("Location = %q", loc)
	}
	if cc := w.Header().Get("Cache-Control"); cc != "no-store" {
		t.Errorf("Cache-Control = %q", cc)
	}
	// A peer over budget: 504.
	now = now.Add(time.Second)
	w = httptest.NewRecorder()
	done, err = admitRequest(a, w, newAbuseRequest("www.example.com", "", true), "www.example.com", func() string { return originURL })
	if !done || handlerStatus(t, err) != http.StatusGatewayTimeout || !errors.Is(err, abuse.ErrOverBudget) {
		t.Fatalf("peer over budget: done=%v err=%v", done, err)
	}
	// The next window serves again.
	now = now.Add(time.Hour)
	if done, err := admitRequest(a, httptest.NewRecorder(), newAbuseRequest("www.example.com", "", false), "www.example.com", func() string { return originURL }); done || err != nil {
		t.Fatalf("next window: done=%v err=%v", done, err)
	}

	// Nothing configured: everything admitted.
	var none *abuse.Controls
	if done, err := admitRequest(none, httptest.NewRecorder(), newAbuseRequest("www.blocked.example", "", false), "www.blocked.example", func() string { return originURL }); done || err != nil {
		t.Fatal("nil controls refuse")
	}
	empty := &abuse.Controls{}
	for range 100 {
		if done, _ := admitRequest(empty, httptest.NewRecorder(), newAbuseRequest("www.example.com", "", false), "www.example.com", func() string { return originURL }); done {
			t.Fatal("empty controls refuse")
		}
	}
}

func TestBodyCounter(t *testing.T) {
	now := t0
	a := &abuse.Controls{Budget: abuse.NewBudget(1<<20, time.Hour), Now: func() time.Time { return now }}
	rec := httptest.NewRecorder()
	w := &bodyCounter{ResponseWriter: rec}
	if _, err := w.Write([]byte("before admission ")); err != nil {
		t.Fatal(err)
	}
	chargeAbuse(a, w, "www.example.com")
	if _, err := w.Write([]byte("0123456789")); err != nil {
		t.Fatal(err)
	}
	if n, err := io.Copy(w, io.LimitReader(strings.NewReader(strings.Repeat("x", 100)), 90)); err != nil || n != 90 {
		t.Fatal(n, err)
	}
	if got := a.Budget.Used(now); got != 100 {
		t.Errorf("charged %d bytes, want 100 (what was written after charge)", got)
	}
	if w.n != 117 {
		t.Errorf("counted %d bytes for the metrics, want 117", w.n)
	}
	if err := http.NewResponseController(w).Flush(); err != nil || !rec.Flushed {
		t.Errorf("Flush through the wrapper: %v", err)
	}
	// http.ServeContent (how cached objects are served) goes through it.
	body := strings.Repeat("y", 1000)
	http.ServeContent(w, httptest.NewRequest(http.MethodGet, "/", nil), "", time.Time{}, strings.NewReader(body))
	if got := a.Budget.Used(now); got != 1100 {
		t.Errorf("charged %d bytes, want 1100", got)
	}
	if rec.Body.Len() != 1117 || w.n != 1117 {
		t.Errorf("wrote %d bytes, counted %d", rec.Body.Len(), w.n)
	}
	// No budget, or no controls: counted, never charged.
	for _, c := range []Abuse{&abuse.Controls{}, (*abuse.Controls)(nil), nil} {
		w := &bodyCounter{ResponseWriter: httptest.NewRecorder()}
		chargeAbuse(c, w, "www.example.com")
		if w.charge != nil {
			t.Error("charged without a budget")
		}
		w.Write([]byte("x"))
		if w.n != 1 {
			t.Errorf("counted %d", w.n)
		}
	}
}

func TestRetryAfterSeconds(t *testing.T) {
	if got := retryAfterSeconds(500 * time.Millisecond); got != "1" {
		t.Errorf("Retry-After for 500ms = %q, want 1", got)
	}
	if got := retryAfterSeconds(2*time.Second + time.Nanosecond); got != "3" {
		t.Errorf("Retry-After for 2s+1ns = %q, want 3", got)
	}
}

// admitRequest is admitAbuse with the client address and only-if-cached
// taken from r, as admit takes them.
func admitRequest(a Abuse, w http.ResponseWriter, r *http.Request, origin string, originURL func() string) (done bool, err error) {
	fromPeer := httpcache.ParseRequestCacheControl(r.Header).OnlyIfCached
	return admitAbuse(a, w, r, origin, RemoteAddr(r), fromPeer, originURL)
}
