package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"strconv"
	"strings"
)

// CacheStatus is how a request was answered, the one vocabulary of the
// Cache-Status response field (RFC 9211), the cache_status label of
// caddy_coral_requests_total and the request kinds of the coral_status
// page (Metrics.Request). The zero value is CacheRefused: a request counts
// as refused until it is answered otherwise.
type CacheStatus uint8

const (
	CacheRefused              CacheStatus = iota // refused: not Coralized, forbidden origin, method, only-if-cached miss, no slot
	CacheHit                                     // served fresh from the local cache
	CacheRevalidated                             // served from the local cache after the origin said 304
	CacheStale                                   // served stale: the origin could not be reached (stale-if-error, ...)
	CacheStaleWhileRevalidate                    // served stale while a refresh runs in the background
	CacheMiss                                    // fetched (from a peer or the origin) for this request
	CacheCollapsed                               // joined a download already under way
	CacheRedirect                                // a one-label name over http sent to https (https_redirect)
	numCacheStatuses
)

// StatusLabels are the labels Label gives, in the order the status page
// lists them.
func StatusLabels() []string {
	return []string{"hit", "miss", "collapsed", "stale", "refused", "redirect"}
}

// Label is the cache_status label of caddy_coral_requests_total and the
// status page: a revalidated hit is a hit, a stale-while-revalidate answer
// is stale; a value out of range is "other", so that a mistake cannot grow
// the label set.
func (s CacheStatus) Label() string {
	switch s {
	case CacheHit, CacheRevalidated:
		return "hit"
	case CacheStale, CacheStaleWhileRevalidate:
		return "stale"
	case CacheMiss:
		return "miss"
	case CacheCollapsed:
		return "collapsed"
	case CacheRefused:
		return "refused"
	case CacheRedirect:
		return "redirect"
	}
	return "other"
}

// headerValue is the Cache-Status field of a response served with this
// status: detail names where the body came from (a download's source) for
// misses and collapsed requests, and what happened for the others.
func (s CacheStatus) headerValue(source string) string {
	switch s {
	case CacheHit:
		if source == SourceLocal {
			return `coral; hit; detail="local"` // every hit: no formatting
		}
		return fmt.Sprintf(`coral; hit; detail=%q`, source)
	case CacheRevalidated:
		return `coral; hit; fwd=stale; fwd-status=304; detail="revalidated"`
	case CacheStale:
		return `coral; hit; fwd=stale; detail="stale"`
	case CacheStaleWhileRevalidate:
		return `coral; hit; fwd=stale; detail="stale-while-revalidate"`
	case CacheCollapsed:
		return fmt.Sprintf(`coral; fwd=uri-miss; collapsed; detail=%q`, source)
	}
	return fmt.Sprintf(`coral; fwd=uri-miss; detail=%q`, source)
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

// Where a response's body came from, for Metrics.Request and the
// Cache-Status field: this proxy's cache, the origin, nowhere (refusals,
// failures), or a peer found at some DSHT level (PeerSource).
const (
	SourceLocal  = "local"
	SourceOrigin = "origin"
	SourceNone   = "none"
)

// PeerSource is the source of a body copied from a peer that the DSHT get
// found at level: "peer-l<level>".
func PeerSource(level int) string { return "peer-l" + strconv.Itoa(level) }

// Outcome is how a fetch from an origin or a peer ended, for Metrics.
type Outcome string

// The outcomes.
const (
	OutcomeOK        Outcome = "ok"         // a response to use (origin: status < 400)
	OutcomeHTTPError Outcome = "http_error" // origin: a response with status >= 400
	OutcomeNotCached Outcome = "not_cached" // peer: 504 to only-if-cached
	OutcomeTimeout   Outcome = "timeout"    // connect or response-header timeout
	OutcomeForbidden Outcome = "forbidden"  // origin: the address guard refused it
	OutcomeBackoff   Outcome = "backoff"    // origin: recently unreachable; not tried
	// peer: a reference to an address allow_peers does not permit; skipped
	OutcomeRefusedAddress Outcome = "refused_address"
	// peer: a put+get done again after a peer failed (refetch.go)
	OutcomeRetry Outcome = "retry"
	OutcomeError Outcome = "error" // any other failure
)

// fetchOutcome classifies the result of an origin or peer fetch: the
// response status when err is nil, otherwise the kind of error. Origin
// backoff is not recognizable from the error; it is OutcomeBackoff
// directly.
func fetchOutcome(status int, err error) Outcome {
	switch {
	case err == nil && status >= 400:
		return OutcomeHTTPError
	case err == nil:
		return OutcomeOK
	case errors.Is(err, errOriginForbidden):
		return OutcomeForbidden
	case errors.Is(err, context.DeadlineExceeded):
		return OutcomeTimeout
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return OutcomeTimeout
	}
	return OutcomeError
}
