package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"slices"
	"testing"
)

// TestCacheStatusVocabulary: every CacheStatus has its Cache-Status field
// and metric label, and a peer reads a field as served from cache exactly
// for the statuses that are.
func TestCacheStatusVocabulary(t *testing.T) {
	for _, tc := range []struct {
		s      CacheStatus
		source string
		header string
		label  string
		cached bool // a peer may use the answer
	}{
		{CacheHit, "local", `coral; hit; detail="local"`, "hit", true},
		{CacheRevalidated, "local", `coral; hit; fwd=stale; fwd-status=304; detail="revalidated"`, "hit", true},
		{CacheStale, "local", `coral; hit; fwd=stale; detail="stale"`, "stale", true},
		{CacheStaleWhileRevalidate, "local", `coral; hit; fwd=stale; detail="stale-while-revalidate"`, "stale", true},
		{CacheMiss, "origin", `coral; fwd=uri-miss; detail="origin"`, "miss", false},
		{CacheMiss, "peer-l1", `coral; fwd=uri-miss; detail="peer-l1"`, "miss", false},
		{CacheMiss, "none", `coral; fwd=uri-miss; detail="none"`, "miss", false},
		{CacheCollapsed, "peer-l0", `coral; fwd=uri-miss; collapsed; detail="peer-l0"`, "collapsed", true},
		{CacheRefused, "none", `coral; fwd=uri-miss; detail="none"`, "refused", false},
		{CacheRedirect, "none", `coral; fwd=uri-miss; detail="none"`, "redirect", false},
	} {
		if got := tc.s.headerValue(tc.source); got != tc.header {
			t.Errorf("%d.headerValue(%q) = %q, want %q", tc.s, tc.source, got, tc.header)
		}
		if got := tc.s.Label(); got != tc.label {
			t.Errorf("%d.Label() = %q, want %q", tc.s, got, tc.label)
		}
		if tc.s != CacheRefused && tc.s != CacheRedirect {
			if got := servedFromCache(tc.s.headerValue(tc.source)); got != tc.cached {
				t.Errorf("servedFromCache(%q) = %v, want %v", tc.s.headerValue(tc.source), got, tc.cached)
			}
		}
	}
	// Every status has a label of StatusLabels; one out of range, other.
	for s := range numCacheStatuses {
		if !slices.Contains(StatusLabels(), s.Label()) {
			t.Errorf("%d has label %q, not in StatusLabels", s, s.Label())
		}
	}
	if got := CacheStatus(200).Label(); got != "other" {
		t.Errorf("an unknown status has label %q", got)
	}
	if got := PeerSource(3); got != "peer-l3" {
		t.Errorf("PeerSource(3) = %q", got)
	}
	for _, v := range []string{uncachedHeaderValue("origin"), notCachedHeaderValue("only-if-cached")} {
		if servedFromCache(v) {
			t.Errorf("servedFromCache(%q) = true", v)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = CacheHit.headerValue("local") }); n != 0 {
		t.Errorf("a local hit's Cache-Status allocates %v times", n)
	}
}

func TestFetchOutcome(t *testing.T) {
	timeoutErr := &net.OpError{Op: "dial", Err: os.ErrDeadlineExceeded}
	for _, c := range []struct {
		status int
		err    error
		want   Outcome
	}{
		{200, nil, OutcomeOK},
		{304, nil, OutcomeOK},
		{404, nil, OutcomeHTTPError},
		{503, nil, OutcomeHTTPError},
		{0, fmt.Errorf("dial: %w", errOriginForbidden), OutcomeForbidden},
		{0, context.DeadlineExceeded, OutcomeTimeout},
		{0, timeoutErr, OutcomeTimeout},
		{0, errors.New("connection refused"), OutcomeError},
	} {
		if got := fetchOutcome(c.status, c.err); got != c.want {
			t.Errorf("fetchOutcome(%d, %v) = %q, want %q", c.status, c.err, got, c.want)
		}
	}
}
