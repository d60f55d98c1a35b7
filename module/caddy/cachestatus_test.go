package coralcaddy

import (
	"slices"
	"testing"
)

// TestCacheStatusVocabulary: every CacheStatus has its Cache-Status field,
// metric label and status page kind, the three agree, and a peer reads a
// field as served from cache exactly for the statuses that are.
func TestCacheStatusVocabulary(t *testing.T) {
	for _, tc := range []struct {
		s      CacheStatus
		source string
		header string
		label  string
		kind   string
		cached bool // a peer may use the answer
	}{
		{cacheHit, "local", `coral; hit; detail="local"`, "hit", "local_hit", true},
		{cacheRevalidated, "local", `coral; hit; fwd=stale; fwd-status=304; detail="revalidated"`, "hit", "local_hit", true},
		{cacheStale, "local", `coral; hit; fwd=stale; detail="stale"`, "stale", "stale", true},
		{cacheStaleWhileRevalidate, "local", `coral; hit; fwd=stale; detail="stale-while-revalidate"`, "stale", "stale", true},
		{cacheMiss, "origin", `coral; fwd=uri-miss; detail="origin"`, "miss", "origin", false},
		{cacheMiss, "peer-l1", `coral; fwd=uri-miss; detail="peer-l1"`, "miss", "peer", false},
		{cacheMiss, "none", `coral; fwd=uri-miss; detail="none"`, "miss", "failed", false},
		{cacheCollapsed, "peer-l0", `coral; fwd=uri-miss; collapsed; detail="peer-l0"`, "collapsed", "collapsed", true},
		{cacheRefused, "none", `coral; fwd=uri-miss; detail="none"`, "refused", "refused", false},
		{cacheRedirect, "none", `coral; fwd=uri-miss; detail="none"`, "redirect", "refused", false},
	} {
		if got := tc.s.headerValue(tc.source); got != tc.header {
			t.Errorf("%d.headerValue(%q) = %q, want %q", tc.s, tc.source, got, tc.header)
		}
		if got := tc.s.metricLabel(); got != tc.label {
			t.Errorf("%d.metricLabel() = %q, want %q", tc.s, got, tc.label)
		}
		if got := tc.s.pageKind(tc.source); got != tc.kind {
			t.Errorf("%d.pageKind(%q) = %q, want %q", tc.s, tc.source, got, tc.kind)
		}
		if got := statusKindOf(tc.label, tc.source); got != tc.kind {
			t.Errorf("statusKindOf(%q, %q) = %q, want %q", tc.label, tc.source, got, tc.kind)
		}
		if tc.s != cacheRefused && tc.s != cacheRedirect {
			if got := servedFromCache(tc.s.headerValue(tc.source)); got != tc.cached {
				t.Errorf("servedFromCache(%q) = %v, want %v", tc.s.headerValue(tc.source), got, tc.cached)
			}
		}
	}
	// Every status has a known label, in the page's order list.
	for s := range numCacheStatuses {
		if !slices.Contains(cacheStatusLabels, s.metricLabel()) {
			t.Errorf("%d has label %q, not in cacheStatusLabels", s, s.metricLabel())
		}
		if back, ok := cacheStatusOfLabel(s.metricLabel()); !ok || back.metricLabel() != s.metricLabel() {
			t.Errorf("label %q does not map back", s.metricLabel())
		}
	}
	if _, ok := cacheStatusOfLabel("other"); ok {
		t.Error(`"other" maps to a status`)
	}
	if statusKindOf("other", "local") != "other" || CacheStatus(200).pageKind("local") != "other" {
		t.Error("an unknown status is not kind other")
	}
	for _, v := range []string{uncachedHeaderValue("origin"), notCachedHeaderValue("only-if-cached")} {
		if servedFromCache(v) {
			t.Errorf("servedFromCache(%q) = true", v)
		}
	}
	if n := testing.AllocsPerRun(100, func() { _ = cacheHit.headerValue("local") }); n != 0 {
		t.Errorf("a local hit's Cache-Status allocates %v times", n)
	}
}
