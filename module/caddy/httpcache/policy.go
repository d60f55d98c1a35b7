package httpcache

import (
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Policy is the proxy's freshness policy on top of RFC 9111. The zero
// Policy is strict RFC 9111 with no heuristic freshness.
type Policy struct {
	// DefaultTTL is the lifetime of a 2xx or permanent-redirect response
	// without freshness information (no s-maxage, max-age or Expires).
	// Coral: 12h. 0: no heuristic freshness.
	DefaultTTL time.Duration
	// MinTTL is the least lifetime of any stored response that is not an
	// error (status below 400), overriding no-cache and short
	// max-age/Expires, but not no-store, private, must-revalidate,
	// proxy-revalidate or s-maxage. With MinTTL > 0, 302 and 307 without
	// freshness information are stored for MinTTL. Coral: 5m. 0: none.
	MinTTL time.Duration
	// NegativeTTL is the lifetime of an error that is cacheable by
	// default (404, 405, 410, 414, 501) or marked "public", without
	// freshness information. Coral: DefaultNegativeTTL, for such errors
	// the origin gives a request without any of the client's fields too
	// (a bare 404 or 410 can be provoked with fields outside the cache key
	// as easily as a 403: the proxy checks; see confirmNegative in the
	// proxy package). 0: the same as DefaultTTL (so a Policy with only DefaultTTL and
	// MinTTL set treats those statuses alike); negative: no heuristic
	// freshness for errors. Other errors (403, 400, 406, …) get no
	// heuristic freshness and MinTTL never raises an error's lifetime:
	// an error a request provoked with fields that are not part of the
	// cache key (a User-Agent a firewall refuses) must not be served to
	// everyone ("Your Cache Has Fallen", Nguyen et al., CCS 2019).
	NegativeTTL time.Duration
}

// DefaultPolicy returns Coral's policy: DefaultTTL 12h, MinTTL 5m, and
// NegativeTTL 5m (DefaultNegativeTTL).
func DefaultPolicy() Policy {
	return Policy{DefaultTTL: 12 * time.Hour, MinTTL: 5 * time.Minute, NegativeTTL: DefaultNegativeTTL}
}

// DefaultNegativeTTL is Coral's lifetime of an error that is cacheable by
// default and carries no freshness information: 5 minutes, a third of
// the 15 minutes the deployed CoralCDN kept such errors. A flash crowd on
// a page that is gone costs its origin one fetch per 5 minutes per fleet
// (plus the proxy's check, see the proxy package), while a page that
// appears after a 404 (published a moment after it was linked) is seen
// within the least lifetime a success gets (MinTTL): the proxy never
// holds an error longer than it holds a success.
const DefaultNegativeTTL = 5 * time.Minute

// NegativeHeuristic reports whether a response that Storable admitted for
// reason (its second result) is an error kept only by the Policy's
// negative lifetime: cacheable by default or public, with no freshness of
// its own.
func NegativeHeuristic(status int, reason string) bool {
	return status >= 400 && reason != reasonExplicit
}

// reasonExplicit is Storable's reason for a response with freshness
// information of its own.
const reasonExplicit = "explicit freshness"

// ForRequest returns the policy for a response to a request with headers
// reqHeader: without MinTTL when the request carries Authorization, so that
// a response the origin let a shared cache store only under conditions
// (RFC 9111 §3.5) is never served to another user without revalidation.
func (p Policy) ForRequest(reqHeader http.Header) Policy {
	if len(reqHeader.Values("Authorization")) > 0 {
		p.MinTTL = 0
	}
	return p
}

// heuristicStatus: heuristically cacheable by default (RFC 9110 §15.1).
func heuristicStatus(status int) bool {
	switch status {
	case 200, 203, 204, 206, 300, 301, 308, 404, 405, 410, 414, 501:
		return true
	}
	return false
}

// TransientStatus: errors that say something about the moment, not about
// the resource (408, 429, and 5xx but 501, which RFC 9110 §15.1 makes
// cacheable by default). They are stored only with explicit freshness
// (max-age, s-maxage, Expires; RFC 9111 §3), for exactly as long as that
// says, whatever the Policy: a heuristic or a minimum would pin an outage
// in the cache. "public" alone is not enough: RFC 9111 lets a cache store
// such a response with heuristic freshness, and never requires it to.
func TransientStatus(status int) bool {
	return status >= 500 && status != http.StatusNotImplemented ||
		status == http.StatusRequestTimeout || status == http.StatusTooManyRequests
}

// explicitFreshness reports whether a response carries an explicit
// expiration time: s-maxage or max-age in cc, or (unless cc comes from a
// targeted field) Expires.
func explicitFreshness(cc CacheControl, respHeader http.Header) bool {
	return cc.HasMaxAge || cc.HasSMaxAge || !cc.Targeted && len(respHeader.Values("Expires")) > 0
}

// coralStatus: stored without freshness information only under a Policy
// with MinTTL. (403 was, until a 403 that a scanner's User-Agent provoked
// was served to every browser for MinTTL.)
func coralStatus(status int) bool {
	return status == 302 || status == 307
}

// understoodStatus: statuses whose caching requirements this cache
// implements (for must-understand, RFC 9111 §5.2.2.3).
func understoodStatus(status int) bool {
	return status != 206 && (heuristicStatus(status) || coralStatus(status))
}

// Storable is Policy{}.Storable: strict RFC 9111.
func Storable(reqHeader http.Header, status int, respHeader http.Header) (ok bool, reason string) {
	return Policy{}.Storable(reqHeader, status, respHeader)
}

// Storable reports whether a shared cache may store the response (RFC 9111
// §3) to a GET or HEAD request, and why (why not, or on what basis). It
// refuses: non-final and unknown statuses, 206 and 304, request or
// response no-store (response no-store is ignored with must-understand and
// an understood status), unqualified private, requests with Authorization
// unless the response has public, s-maxage or must-revalidate (§3.5), and
// Vary: *. It then needs explicit freshness, "public", a heuristically
// cacheable status, or (with p.MinTTL > 0) 302 or 307. A qualified
// private or no-cache does not prevent storing: remove those fields with
// StripQualifiedFields.
func (p Policy) Storable(reqHeader http.Header, status int, respHeader http.Header) (ok bool, reason string) {
	switch {
	case status < 200 || status > 599:
		return false, "status " + strconv.Itoa(status) + " is not a final status"
	case status == http.StatusPartialContent:
		return false, "partial content is not stored"
	case status == http.StatusNotModified:
		return false, "304 only freshens a stored response"
	}
	if ParseCacheControl(reqHeader).NoStore {
		return false, "request no-store"
	}
	cc := ParseResponseCacheControl(respHeader)
	if cc.MustUnderstand {
		if !understoodStatus(status) {
			return false, "must-understand with status " + strconv.Itoa(status)
		}
	} else if cc.NoStore {
		return false, "response no-store"
	}
	if cc.Private {
		return false, "private"
	}
	if len(reqHeader.Values("Authorization")) > 0 && !cc.Public && !cc.HasSMaxAge && !cc.MustRevalidate {
		return false, "request has Authorization"
	}
	if varyStar(respHeader) {
		return false, "Vary: *"
	}
	switch {
	case explicitFreshness(cc, respHeader):
		return true, reasonExplicit
	case TransientStatus(status):
		return false, "status " + strconv.Itoa(status) + " is stored only with explicit freshness"
	case status >= 400 && p.NegativeTTL < 0:
		// Stored, it would be stale at once, and an origin's error on
		// revalidation serves the stale copy: a provoked error would
		// reach others after all.
		return false, "an error without explicit freshness (no negative TTL)"
	case cc.Public:
		return true, "public"
	case heuristicStatus(status):
		return true, "cacheable by default"
	case p.MinTTL > 0 && coralStatus(status):
		return true, "policy minimum"
	}
	return false, "status " + strconv.Itoa(status) + " without explicit freshness"
}

func varyStar(h http.Header) bool {
	for _, v := range h.Values("Vary") {
		for _, f := range strings.Split(v, ",") {
			if strings.TrimSpace(f) == "*" {
				return true
			}
		}
	}
	return false
}

// Lifetime is the freshness lifetime of a response (RFC 9111 §4.2.1), now
// being when it was received (it stands in for a missing or invalid Date).
// In order: s-maxage (this is a shared cache), max-age, Expires minus
// Date; unqualified no-cache makes it 0. fromHeaders reports that one of
// those decided. Otherwise the Policy's heuristic applies (see Policy) when
// the status is heuristically cacheable or the response is public. Finally
// p.MinTTL raises the result, except for errors (status 400 and above),
// no-store, private, must-revalidate, proxy-revalidate and s-maxage, and
// except for statuses that are neither explicitly fresh, public,
// cacheable by default nor 302/307. Lifetime assumes Storable said yes;
// it is 0 for no-store and private.
func Lifetime(p Policy, now time.Time, status int, respHeader http.Header) (freshFor time.Duration, fromHeaders bool) {
	cc := ParseResponseCacheControl(respHeader)
	if cc.Private || (cc.NoStore && !(cc.MustUnderstand && understoodStatus(status))) {
		return 0, true
	}
	explicit := true
	switch {
	case cc.HasSMaxAge:
		freshFor = cc.SMaxAge
	case cc.HasMaxAge:
		freshFor = cc.MaxAge
	case !cc.Targeted && len(respHeader.Values("Expires")) > 0:
		freshFor = expiresLifetime(respHeader, now)
	default:
		explicit = false
	}
	if TransientStatus(status) {
		// Only what the origin said: no heuristic, no minimum, so that
		// an outage is never pinned in the cache for longer.
		switch {
		case cc.NoCache:
			return 0, true
		case !explicit:
			return 0, false
		}
		return freshFor, true
	}
	eligible := explicit || cc.Public || heuristicStatus(status)
	fromHeaders = explicit || cc.NoCache
	switch {
	case cc.NoCache:
		freshFor = 0
	case !explicit && eligible:
		freshFor = p.heuristic(status)
	}
	if p.MinTTL > freshFor && status < 400 && (eligible || coralStatus(status)) &&
		!cc.MustRevalidate && !cc.ProxyRevalidate && !cc.HasSMaxAge {
		freshFor = p.MinTTL
	}
	return freshFor, fromHeaders
}

// heuristic is the Policy lifetime for a response without freshness
// information.
func (p Policy) heuristic(status int) time.Duration {
	switch {
	case status == 302 || status == 303 || status == 307:
		return 0
	case status >= 400 && p.NegativeTTL != 0:
		return max(0, p.NegativeTTL)
	default:
		return p.DefaultTTL
	}
}

// expiresLifetime is Expires minus Date (or now without a valid Date). An
// invalid Expires ("0", "-1", anything not exactly an HTTP-date: see
// ParseHTTPDate) or several that disagree mean already expired (RFC 9111
// §5.3, §4.2.1).
func expiresLifetime(h http.Header, now time.Time) time.Duration {
	vals := h.Values("Expires")
	exp, ok := ParseHTTPDate(strings.TrimSpace(vals[0]))
	if !ok {
		return 0
	}
	for _, v := range vals[1:] {
		if t, ok := ParseHTTPDate(strings.TrimSpace(v)); !ok || !t.Equal(exp) {
			return 0
		}
	}
	date, ok := headerDate(h, "Date")
	if !ok {
		date = now
	}
	return clampLifetime(exp.Sub(date))
}

func clampLifetime(d time.Duration) time.Duration {
	return max(0, min(d, MaxDelta))
}

// headerDate parses the first field line of an HTTP-date header, strictly
// (ParseHTTPDate): an invalid one counts as absent.
func headerDate(h http.Header, name string) (time.Time, bool) {
	v := h.Get(name)
	if v == "" {
		return time.Time{}, false
	}
	return ParseHTTPDate(strings.TrimSpace(v))
}
