package coralcaddy

import (
	"fmt"
	"strings"
)

// CacheStatus is how a request was answered, the one vocabulary of the
// Cache-Status response field (RFC 9211), the cache_status label of
// caddy_coral_requests_total and the request kinds of the coral_status
// page. The zero value is cacheRefused: a request counts as refused until
// it is answered otherwise.
type CacheStatus uint8

const (
	cacheRefused              CacheStatus = iota // refused: not Coralized, forbidden origin, method, only-if-cached miss, no slot
	cacheHit                                     // served fresh from the local cache
	cacheRevalidated                             // served from the local cache after the origin said 304
	cacheStale                                   // served stale: the origin could not be reached (stale-if-error, ...)
	cacheStaleWhileRevalidate                    // served stale while a refresh runs in the background
	cacheMiss                                    // fetched (from a peer or the origin) for this request
	cacheCollapsed                               // joined a download already under way
	cacheRedirect                                // a one-label name over http sent to https (https_redirect)
	numCacheStatuses
)

// cacheStatusLabels are the metric labels, in the order the status page
// lists them; what a CacheStatus counts as is its metricLabel.
var cacheStatusLabels = []string{"hit", "miss", "collapsed", "stale", "refused", "redirect"}

// metricLabel is the cache_status label of requests_total: a revalidated
// hit is a hit, a stale-while-revalidate answer is stale; a value out of
// range is "other", so that a mistake cannot grow the label set.
func (s CacheStatus) metricLabel() string {
	switch s {
	case cacheHit, cacheRevalidated:
		return "hit"
	case cacheStale, cacheStaleWhileRevalidate:
		return "stale"
	case cacheMiss:
		return "miss"
	case cacheCollapsed:
		return "collapsed"
	case cacheRefused:
		return "refused"
	case cacheRedirect:
		return "redirect"
	}
	return metricOther
}

// headerValue is the Cache-Status field of a response served with this
// status: detail names where the body came from (a download's source) for
// misses and collapsed requests, and what happened for the others.
func (s CacheStatus) headerValue(source string) string {
	switch s {
	case cacheHit:
		if source == metricLocal {
			return `coral; hit; detail="local"` // every hit: no formatting
		}
		return fmt.Sprintf(`coral; hit; detail=%q`, source)
	case cacheRevalidated:
		return `coral; hit; fwd=stale; fwd-status=304; detail="revalidated"`
	case cacheStale:
		return `coral; hit; fwd=stale; detail="stale"`
	case cacheStaleWhileRevalidate:
		return `coral; hit; fwd=stale; detail="stale-while-revalidate"`
	case cacheCollapsed:
		return fmt.Sprintf(`coral; fwd=uri-miss; collapsed; detail=%q`, source)
	}
	return fmt.Sprintf(`coral; fwd=uri-miss; detail=%q`, source)
}

// cacheStatusOfLabel is the CacheStatus a requests_total label counts
// (the first, for labels two statuses share); ok is false for "other".
func cacheStatusOfLabel(label string) (s CacheStatus, ok bool) {
	for s := range numCacheStatuses {
		if s.metricLabel() == label {
			return s, true
		}
	}
	return 0, false
}

// The request kinds of the coral_status page and how it names them.
var statusKinds = []struct{ kind, label string }{
	{"local_hit", "local hit"},
	{"peer", "from a peer"},
	{"origin", "from the origin"},
	{"stale", "stale"},
	{"collapsed", "collapsed (joined a download)"},
	{"failed", "failed"},
	{"refused", "refused"},
	{"other", "other"},
}

// pageKind is the status page's kind for requests answered with this
// status from source: a miss is told apart by where the body came from.
func (s CacheStatus) pageKind(source string) string {
	switch s {
	case cacheHit, cacheRevalidated:
		return "local_hit"
	case cacheStale, cacheStaleWhileRevalidate:
		return "stale"
	case cacheCollapsed:
		return "collapsed"
	case cacheRefused, cacheRedirect:
		// A redirect to https serves nothing either.
		return "refused"
	case cacheMiss:
		switch {
		case source == metricOrigin:
			return "origin"
		case source == metricNone:
			return "failed"
		case strings.HasPrefix(source, "peer-l"):
			return "peer"
		}
	}
	return "other"
}

// uncachedHeaderValue is the Cache-Status field of a response relayed
// without being stored (no-store, too large, a request's own fetch).
func uncachedHeaderValue(source string) string {
	return fmt.Sprintf(`coral; fwd=uri-miss; stored=false; detail=%q`, source)
}

// notCachedHeaderValue is the Cache-Status field of a refusal to serve an
// only-if-cached request (a peer's, usually): why says what kept it.
func notCachedHeaderValue(why string) string {
	return fmt.Sprintf("coral; fwd=miss; detail=%q", why)
}

// servedFromCache reports whether a Cache-Status field written by another
// Coral proxy (headerValue) says the response came from its cache: a hit,
// or a download it was running.
func servedFromCache(field string) bool {
	cs, ok := strings.CutPrefix(field, "coral;")
	if !ok {
		return false
	}
	for p := range strings.SplitSeq(cs, ";") {
		switch strings.TrimSpace(p) {
		case "hit", "collapsed":
			return true
		}
	}
	return false
}
