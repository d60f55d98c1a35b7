package coralcaddy

// HTTP caching rules for the Coral proxy: RFC 9111 (HTTP Caching) for a
// shared cache, RFC 9110 §13 (conditional requests) and RFC 5861
// (stale-while-revalidate, stale-if-error), with Coral's defaults layered
// on top through Policy.
//
// Decisions (each also in the doc comment where it applies):
//
//   - Policy{} (all zero) is strict RFC 9111 with no heuristic freshness:
//     a response without s-maxage, max-age or Expires has lifetime 0.
//     DefaultPolicy() is Coral's: 12 h for success and redirects without
//     freshness information, 15 min for cacheable errors (404, 410, …), and
//     a 5 min minimum that overrides no-cache and short max-age/Expires.
//     NegativeTTL 0 falls back to DefaultTTL, so setting DefaultTTL and
//     MinTTL to 0 is enough for strict behaviour.
//   - The minimum (MinTTL) never applies to no-store or private responses,
//     nor where the origin insists on revalidation by a shared cache:
//     must-revalidate, proxy-revalidate, or s-maxage (which carries
//     proxy-revalidate's meaning, RFC 9111 §5.2.2.10). It is measured as
//     age, not from when this proxy received the copy, so a copy passed
//     from peer to peer never stays fresh longer than MinTTL after the
//     origin produced it. Policy.ForRequest drops it for requests that
//     carry Authorization.
//   - Storable status codes: those heuristically cacheable by RFC 9110
//     §15.1 (200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501) always;
//     any other final status only with explicit freshness (max-age,
//     s-maxage, Expires) or "public"; with a Policy whose MinTTL > 0 also
//     302, 307 and 403 (temporary redirects and Forbidden, which Coral
//     caches for MinTTL). 206 is never stored (the proxy fetches whole
//     objects) and 304 only freshens a stored response.
//   - Heuristic lifetimes are flat (Policy), not the Last-Modified fraction
//     of RFC 9111 §4.2.2: 2xx and permanent 3xx get DefaultTTL, 4xx and 5xx
//     NegativeTTL, temporary redirects (302, 303, 307) nothing but MinTTL.
//     Last-Modified is not consulted.
//   - Duplicate or conflicting directive values: the most conservative
//     wins (RFC 9111 §4.2.1 allows treating such responses as stale): the
//     smallest max-age, s-maxage, max-stale and stale windows, the largest
//     min-fresh. An invalid max-age or s-maxage counts as 0 (stale); other
//     invalid values are ignored.
//   - Request directives are preferences (RFC 9111 §5.2.1): RequestAllows
//     reports what they ask for and the handler may decline (for example,
//     ignore no-cache from reloading browsers during a flash crowd).

import (
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"
)

// maxDeltaLifetime is the largest delta-seconds value kept: 2^31 seconds
// (RFC 9111 §1.2.2); larger values are clamped to it.
const maxDeltaLifetime = time.Duration(1<<31) * time.Second

// CacheControl holds the Cache-Control directives of a request or response
// (RFC 9111 §5.2). Field names of qualified no-cache and private are in
// canonical form. Unknown extensions are ignored.
type CacheControl struct {
	NoStore         bool     // no-store
	NoCache         bool     // unqualified no-cache (or Pragma: no-cache on a request without Cache-Control)
	NoCacheFields   []string // no-cache="field, …" (response): those fields need revalidation
	Private         bool     // unqualified private
	PrivateFields   []string // private="field, …": a shared cache must not store those fields
	Public          bool     // public
	MustRevalidate  bool     // must-revalidate
	ProxyRevalidate bool     // proxy-revalidate
	MustUnderstand  bool     // must-understand
	NoTransform     bool     // no-transform
	Immutable       bool     // immutable (RFC 8246)
	OnlyIfCached    bool     // only-if-cached (request)
	// Targeted: the directives come from a targeted field
	// (Coral-Cache-Control or CDN-Cache-Control, RFC 9213), so Expires
	// does not count either (ParseResponseCacheControl).
	Targeted bool

	// Delta directives; the Has fields say whether the directive was there.
	// max-stale without a value sets MaxStale to 2^31 s (any staleness).
	MaxAge, SMaxAge, MinFresh, MaxStale             time.Duration
	StaleWhileRevalidate, StaleIfError              time.Duration
	HasMaxAge, HasSMaxAge, HasMinFresh, HasMaxStale bool
	HasStaleWhileRevalidate, HasStaleIfError        bool
}

// ParseCacheControl parses every Cache-Control field line of h. It accepts
// any case and whitespace, quoted values (with commas and escapes inside),
// and repeated directives (see the file comment on conflicts).
func ParseCacheControl(h http.Header) CacheControl {
	return parseCacheControlValue(strings.Join(h.Values("Cache-Control"), ","))
}

// ParseRequestCacheControl is ParseCacheControl for a request, which also
// honours "Pragma: no-cache" when the request has no Cache-Control field
// (RFC 9111 §5.4, for HTTP/1.0 clients).
func ParseRequestCacheControl(h http.Header) CacheControl {
	cc := ParseCacheControl(h)
	if len(h.Values("Cache-Control")) == 0 {
		for _, v := range h.Values("Pragma") {
			for _, d := range strings.Split(v, ",") {
				if strings.EqualFold(strings.TrimSpace(d), "no-cache") {
					cc.NoCache = true
				}
			}
		}
	}
	return cc
}

func parseCacheControlValue(s string) CacheControl {
	var cc CacheControl
	for i := 0; i < len(s); {
		// Skip separators and whitespace.
		if c := s[i]; c == ',' || c == ' ' || c == '\t' {
			i++
			continue
		}
		j := i
		for j < len(s) && s[j] != ',' && s[j] != '=' {
			j++
		}
		name := strings.ToLower(strings.TrimRight(s[i:j], " \t"))
		i = j
		var val string
		hasVal := false
		if i < len(s) && s[i] == '=' {
			hasVal = true
			i++
			for i < len(s) && (s[i] == ' ' || s[i] == '\t') {
				i++
			}
			if i < len(s) && s[i] == '"' {
				var b strings.Builder
				i++
				for i < len(s) && s[i] != '"' {
					if s[i] == '\\' && i+1 < len(s) {
						i++
					}
					b.WriteByte(s[i])
					i++
				}
				val = b.String()
				// Skip the closing quote and anything up to the next comma.
				for i < len(s) && s[i] != ',' {
					i++
				}
			} else {
				j := i
				for j < len(s) && s[j] != ',' {
					j++
				}
				val = strings.TrimRight(s[i:j], " \t")
				i = j
			}
		}
		cc.apply(name, val, hasVal)
	}
	return cc
}

// apply records one directive.
func (cc *CacheControl) apply(name, val string, hasVal bool) {
	switch name {
	case "no-store":
		cc.NoStore = true
	case "no-cache":
		if f := parseFieldNameList(val); hasVal && len(f) > 0 {
			cc.NoCacheFields = appendMissing(cc.NoCacheFields, f)
		} else {
			cc.NoCache = true
		}
	case "private":
		if f := parseFieldNameList(val); hasVal && len(f) > 0 {
			cc.PrivateFields = appendMissing(cc.PrivateFields, f)
		} else {
			cc.Private = true
		}
	case "public":
		cc.Public = true
	case "must-revalidate":
		cc.MustRevalidate = true
	case "proxy-revalidate":
		cc.ProxyRevalidate = true
	case "must-understand":
		cc.MustUnderstand = true
	case "no-transform":
		cc.NoTransform = true
	case "immutable":
		cc.Immutable = true
	case "only-if-cached":
		cc.OnlyIfCached = true
	case "max-age":
		// Invalid counts as 0: RFC 9111 §4.2.1 encourages treating
		// invalid freshness information as stale.
		d, _ := parseDeltaSeconds(val)
		setMinDelta(&cc.MaxAge, &cc.HasMaxAge, d)
	case "s-maxage":
		d, _ := parseDeltaSeconds(val)
		setMinDelta(&cc.SMaxAge, &cc.HasSMaxAge, d)
	case "stale-while-revalidate":
		if d, ok := parseDeltaSeconds(val); ok {
			setMinDelta(&cc.StaleWhileRevalidate, &cc.HasStaleWhileRevalidate, d)
		}
	case "stale-if-error":
		if d, ok := parseDeltaSeconds(val); ok {
			setMinDelta(&cc.StaleIfError, &cc.HasStaleIfError, d)
		}
	case "max-stale":
		d, ok := maxDeltaLifetime, true
		if hasVal {
			d, ok = parseDeltaSeconds(val)
		}
		if ok {
			setMinDelta(&cc.MaxStale, &cc.HasMaxStale, d)
		}
	case "min-fresh":
		if d, ok := parseDeltaSeconds(val); ok && (!cc.HasMinFresh || d > cc.MinFresh) {
			cc.MinFresh, cc.HasMinFresh = d, true
		}
	}
}

func setMinDelta(v *time.Duration, has *bool, d time.Duration) {
	if !*has || d < *v {
		*v, *has = d, true
	}
}

// parseDeltaSeconds parses delta-seconds (RFC 9111 §1.2.2), clamping to 2^31 s.
func parseDeltaSeconds(s string) (time.Duration, bool) {
	if !isDigits(s) {
		return 0, false
	}
	s = strings.TrimLeft(s, "0")
	if len(s) > 10 {
		return maxDeltaLifetime, true
	}
	n, _ := strconv.ParseInt("0"+s, 10, 64)
	if n >= 1<<31 {
		return maxDeltaLifetime, true
	}
	return time.Duration(n) * time.Second, true
}

// parseFieldNameList splits a comma-separated list of field names into canonical
// form, dropping empty and invalid entries.
func parseFieldNameList(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if isHTTPToken(f) {
			out = append(out, textproto.CanonicalMIMEHeaderKey(f))
		}
	}
	return out
}

func appendMissing(list, add []string) []string {
	for _, a := range add {
		if !slices.Contains(list, a) {
			list = append(list, a)
		}
	}
	return list
}

// isHTTPToken: RFC 9110 §5.6.2.
func isHTTPToken(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !('a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
			strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// Policy is the proxy's freshness policy on top of RFC 9111. The zero
// Policy is strict RFC 9111 with no heuristic freshness.
type Policy struct {
	// DefaultTTL is the lifetime of a 2xx or permanent-redirect response
	// without freshness information (no s-maxage, max-age or Expires).
	// Coral: 12h. 0: no heuristic freshness.
	DefaultTTL time.Duration
	// MinTTL is the least lifetime of any stored response, overriding
	// no-cache and short max-age/Expires, but not no-store, private,
	// must-revalidate, proxy-revalidate or s-maxage. With MinTTL > 0, 302,
	// 307 and 403 without freshness information are stored for MinTTL.
	// Coral: 5m. 0: none.
	MinTTL time.Duration
	// NegativeTTL is the lifetime of a cacheable 4xx or 5xx response
	// (404, 405, 410, 414, 501, or any with "public") without freshness
	// information. Coral: 15m, the DSHT's negative-reference TTL. 0: the
	// same as DefaultTTL (so a Policy with only DefaultTTL and MinTTL set
	// treats all statuses alike); negative: no heuristic freshness for
	// errors.
	NegativeTTL time.Duration
}

// DefaultPolicy returns Coral's policy: DefaultTTL 12h, MinTTL 5m,
// NegativeTTL 15m.
func DefaultPolicy() Policy {
	return Policy{DefaultTTL: 12 * time.Hour, MinTTL: 5 * time.Minute, NegativeTTL: 15 * time.Minute}
}

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

// transientStatus: errors that say something about the moment, not about
// the resource (408, 429, and 5xx but 501, which RFC 9110 §15.1 makes
// cacheable by default). They are stored only with explicit freshness
// (max-age, s-maxage, Expires; RFC 9111 §3), for exactly as long as that
// says, whatever the Policy: a heuristic or a minimum would pin an outage
// in the cache. "public" alone is not enough: RFC 9111 lets a cache store
// such a response with heuristic freshness, and never requires it to.
func transientStatus(status int) bool {
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
// with MinTTL.
func coralStatus(status int) bool {
	return status == 302 || status == 307 || status == 403
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
// cacheable status, or (with p.MinTTL > 0) 302, 307 or 403. A qualified
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
		return true, "explicit freshness"
	case transientStatus(status):
		return false, "status " + strconv.Itoa(status) + " is stored only with explicit freshness"
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
// p.MinTTL raises the result, except for no-store, private,
// must-revalidate, proxy-revalidate and s-maxage, and except for statuses
// that are neither explicitly fresh, public, cacheable by default nor
// 302/307/403. Lifetime assumes Storable said yes; it is 0 for no-store
// and private.
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
	if transientStatus(status) {
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
	if p.MinTTL > freshFor && (eligible || coralStatus(status)) &&
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
// parseHTTPDate) or several that disagree mean already expired (RFC 9111
// §5.3, §4.2.1).
func expiresLifetime(h http.Header, now time.Time) time.Duration {
	vals := h.Values("Expires")
	exp, ok := parseHTTPDate(strings.TrimSpace(vals[0]))
	if !ok {
		return 0
	}
	for _, v := range vals[1:] {
		if t, ok := parseHTTPDate(strings.TrimSpace(v)); !ok || !t.Equal(exp) {
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
	return max(0, min(d, maxDeltaLifetime))
}

// headerDate parses the first field line of an HTTP-date header, strictly
// (parseHTTPDate): an invalid one counts as absent.
func headerDate(h http.Header, name string) (time.Time, bool) {
	v := h.Get(name)
	if v == "" {
		return time.Time{}, false
	}
	return parseHTTPDate(strings.TrimSpace(v))
}

// CurrentAge is the age of a stored response (RFC 9111 §4.2.3): requestTime
// is when the request that fetched it was sent, responseTime when the
// response arrived. The Age received counts as AgeValue says, an absent
// or invalid Date as responseTime; the result is never negative. It is
// CorrectedInitialAge plus the time since responseTime.
func CurrentAge(respHeader http.Header, requestTime, responseTime, now time.Time) time.Duration {
	return addSaturating(CorrectedInitialAge(respHeader, requestTime, responseTime), max(0, now.Sub(responseTime)))
}

// AgeValue is the Age a response arrived with (RFC 9111 §5.1): the first
// member of the first field line, when it is delta-seconds (at most 2^31
// s: larger values are clamped there). Anything else (non-numeric,
// negative, a decimal, a parameter) is invalid and counts as 0, as an
// absent Age does.
func AgeValue(respHeader http.Header) time.Duration {
	v := respHeader.Get("Age")
	if i := strings.IndexByte(v, ','); i >= 0 {
		v = v[:i]
	}
	d, _ := parseDeltaSeconds(strings.TrimSpace(v))
	return d
}

// CorrectedInitialAge is a response's age when it arrived (RFC 9111
// §4.2.3): the larger of the apparent age (arrival minus its Date, if the
// origin's clock is behind) and its Age plus the time the request took.
func CorrectedInitialAge(respHeader http.Header, requestTime, responseTime time.Time) time.Duration {
	ageValue := AgeValue(respHeader)
	date, ok := headerDate(respHeader, "Date")
	if !ok {
		date = responseTime
	}
	apparentAge := max(0, responseTime.Sub(date))
	responseDelay := max(0, responseTime.Sub(requestTime))
	correctedAgeValue := addSaturating(ageValue, responseDelay)
	return max(apparentAge, correctedAgeValue)
}

// addSaturating adds non-negative durations without overflowing.
func addSaturating(a, b time.Duration) time.Duration {
	if s := a + b; s >= a {
		return s
	}
	return time.Duration(1<<63 - 1)
}

// RequestAllows decides whether a stored response of the given age and
// freshness lifetime may be served for a request with directives reqCC
// (RFC 9111 §4.2, §5.2.1); respCC are the stored response's directives.
//
//	serve                 the stored response may be served as is
//	mustRevalidate        validate it with the origin first (conditional request)
//	neither               only-if-cached and no usable response: answer 504
//
// Revalidation is asked for by request no-cache, by max-age below the age,
// by min-fresh beyond the remaining freshness, and by staleness unless
// max-stale covers it and the response allows stale use (no
// must-revalidate, proxy-revalidate, s-maxage or no-cache).
func RequestAllows(reqCC, respCC CacheControl, age, freshFor time.Duration) (serve bool, mustRevalidate bool) {
	revalidate := reqCC.NoCache
	if reqCC.HasMaxAge && age > reqCC.MaxAge {
		revalidate = true
	}
	if reqCC.HasMinFresh && freshFor-age < reqCC.MinFresh {
		revalidate = true
	}
	if age >= freshFor {
		staleOK := reqCC.HasMaxStale && age-freshFor <= reqCC.MaxStale &&
			!respCC.MustRevalidate && !respCC.ProxyRevalidate && !respCC.HasSMaxAge && !respCC.NoCache
		if !staleOK {
			revalidate = true
		}
	}
	if !revalidate {
		return true, false
	}
	if reqCC.OnlyIfCached {
		return false, false
	}
	return false, true
}

// StaleWindows returns the response's stale-while-revalidate and
// stale-if-error windows (RFC 5861), 0 when absent. Both are 0 when the
// response forbids serving it stale: no-store, private, unqualified
// no-cache, must-revalidate or proxy-revalidate. (s-maxage does not: the
// explicit window is the origin's permission.)
func StaleWindows(respHeader http.Header) (swr, sie time.Duration) {
	cc := ParseResponseCacheControl(respHeader)
	if cc.NoStore || cc.Private || cc.NoCache || cc.MustRevalidate || cc.ProxyRevalidate {
		return 0, 0
	}
	return cc.StaleWhileRevalidate, cc.StaleIfError
}

// StaleOnError reports whether a stale stored response may be served when
// its revalidation failed, staleFor being how long it has been stale
// (RFC 9111 §4.2.4, RFC 5861 §4):
//
//   - never for no-store, private, must-revalidate or proxy-revalidate,
//     nor with s-maxage unless the response also has stale-if-error;
//   - strict (MinTTL 0): when the origin could not be reached (status 0:
//     the cache is disconnected), or within the response's stale-if-error
//     window when it answered 500, 502, 503 or 504; never with unqualified
//     no-cache, which forbids any reuse without validation;
//   - Coral's policy (MinTTL > 0): as the published system did, whenever
//     the origin was unreachable or answered 403, 404, 408, 500, 502, 503
//     or 504, however long the copy has been stale, and unqualified
//     no-cache does not prevent it (MinTTL overrides no-cache anyway): a
//     dead or failing origin does not take its content with it.
//
// The directives are the targeted ones when the response has them
// (ParseResponseCacheControl).
func (p Policy) StaleOnError(status int, respHeader http.Header, staleFor time.Duration) bool {
	cc := ParseResponseCacheControl(respHeader)
	if cc.NoStore || cc.Private || cc.MustRevalidate || cc.ProxyRevalidate || cc.HasSMaxAge && !cc.HasStaleIfError {
		return false
	}
	if p.MinTTL > 0 {
		switch status {
		case 0, 403, 404, 408, 500, 502, 503, 504:
			return true
		}
		return false
	}
	if cc.NoCache {
		return false
	}
	switch status {
	case 0:
		return true
	case 500, 502, 503, 504:
		return cc.HasStaleIfError && staleFor <= cc.StaleIfError
	}
	return false
}

// VaryKey is the secondary cache key of a response with the given Vary
// value (all its field lines joined with commas) for a request: each
// nominated request field, by lower-case name in sorted order without
// duplicates, with its field lines combined and whitespace normalized
// (RFC 9111 §4.1). A field absent from the request is distinct from one
// present but empty. ok is false for "*" or an invalid field name (not
// cacheable); no nominated fields give "", true.
func VaryKey(vary string, reqHeader http.Header) (string, bool) {
	var names []string
	for _, f := range strings.Split(vary, ",") {
		f = strings.TrimSpace(f)
		switch {
		case f == "":
			continue
		case f == "*" || !isHTTPToken(f):
			return "", false
		}
		names = append(names, strings.ToLower(f))
	}
	slices.Sort(names)
	names = slices.Compact(names)
	var b strings.Builder
	for i, n := range names {
		if i > 0 {
			b.WriteByte('\n')
		}
		b.WriteString(n)
		vals := reqHeader.Values(n)
		if len(vals) == 0 {
			b.WriteByte('!')
			continue
		}
		b.WriteByte('=')
		b.WriteString(strconv.Quote(normalizeFieldValue(vals)))
	}
	return b.String(), true
}

// normalizeFieldValue combines field lines with "," and trims each list
// element, collapsing inner runs of whitespace to one space.
func normalizeFieldValue(vals []string) string {
	var parts []string
	for _, v := range vals {
		for _, e := range strings.Split(v, ",") {
			parts = append(parts, strings.Join(strings.Fields(e), " "))
		}
	}
	return strings.Join(parts, ",")
}

// AddValidators prepares dst, the headers of a request to the origin, to
// revalidate a stored response with headers stored (RFC 9111 §4.3.1): it
// removes any conditional fields the client sent and sets If-None-Match
// from the stored ETag and If-Modified-Since from the stored
// Last-Modified (when a valid date). It reports whether it set either.
func AddValidators(dst, stored http.Header) bool {
	for _, k := range []string{"If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "If-Range"} {
		dst.Del(k)
	}
	added := false
	if tag := strings.TrimSpace(stored.Get("ETag")); tag != "" {
		dst.Set("If-None-Match", tag)
		added = true
	}
	if lm, ok := headerDate(stored, "Last-Modified"); ok {
		dst.Set("If-Modified-Since", lm.UTC().Format(http.TimeFormat))
		added = true
	}
	return added
}

// NotModified evaluates a client's conditional GET or HEAD against a
// stored response (RFC 9110 §13.2.2, RFC 9111 §4.3.2) and reports whether
// to answer 304. Only 2xx stored responses are compared (§13.2.1).
// If-None-Match takes precedence: "*" or any entity-tag matching the
// stored ETag by weak comparison. Otherwise If-Modified-Since, if it is
// one valid HTTP-date, is compared with the stored Last-Modified, or the
// stored Date without one. If-Match, If-Unmodified-Since and If-Range are
// left to the origin and to range handling.
func NotModified(method string, reqHeader http.Header, storedStatus int, stored http.Header) bool {
	if method != http.MethodGet && method != http.MethodHead {
		return false
	}
	if storedStatus < 200 || storedStatus > 299 {
		return false
	}
	if inm := reqHeader.Values("If-None-Match"); len(inm) > 0 {
		return etagListMatches(strings.Join(inm, ","), stored.Get("ETag"))
	}
	ims := reqHeader.Values("If-Modified-Since")
	if len(ims) != 1 {
		return false
	}
	since, err := http.ParseTime(strings.TrimSpace(ims[0]))
	if err != nil {
		return false
	}
	lm, ok := headerDate(stored, "Last-Modified")
	if !ok {
		if lm, ok = headerDate(stored, "Date"); !ok {
			return false
		}
	}
	return !lm.Truncate(time.Second).After(since)
}

// NotModifiedHeader returns the fields of a stored response that a 304
// carries (RFC 9110 §15.4.5): Cache-Control, Content-Location, Date, ETag,
// Expires, Vary, and Last-Modified when there is no ETag.
func NotModifiedHeader(stored http.Header) http.Header {
	h := http.Header{}
	copyField := func(k string) {
		if v := stored.Values(k); len(v) > 0 {
			h[textproto.CanonicalMIMEHeaderKey(k)] = slices.Clone(v)
		}
	}
	for _, k := range []string{"Cache-Control", "Content-Location", "Date", "ETag", "Expires", "Vary"} {
		copyField(k)
	}
	if len(h.Values("ETag")) == 0 {
		copyField("Last-Modified")
	}
	return h
}

// Freshen updates a stored response's header with those of a 304 received
// on revalidation (RFC 9111 §4.3.4, §3.2) and reports whether it did. The
// 304 must be about the stored response: if it has an ETag, that must
// match the stored one (strong comparison when the 304's is strong, weak
// otherwise); if it has no ETag but a Last-Modified and the stored
// response has one, they must be equal; a 304 with no validator is
// accepted (it answers the proxy's own conditional request). Fields are
// replaced, except framing, hop-by-hop and connection-listed fields,
// Content-Length, Content-Encoding, Content-Range and Set-Cookie; fields
// named by qualified private or no-cache are then removed.
func Freshen(stored, update http.Header) bool {
	if tag := strings.TrimSpace(update.Get("ETag")); tag != "" {
		newTag, ok1 := parseEntityTag(tag)
		oldTag, ok2 := parseEntityTag(strings.TrimSpace(stored.Get("ETag")))
		if !ok1 || !ok2 || newTag.opaque != oldTag.opaque || (!newTag.weak && oldTag.weak) {
			return false
		}
	} else if newLM, ok := headerDate(update, "Last-Modified"); ok {
		if oldLM, ok := headerDate(stored, "Last-Modified"); ok && !oldLM.Equal(newLM) {
			return false
		}
	}
	skip := map[string]bool{}
	for _, v := range update.Values("Connection") {
		for _, f := range strings.Split(v, ",") {
			skip[textproto.CanonicalMIMEHeaderKey(strings.TrimSpace(f))] = true
		}
	}
	for k, v := range update {
		k = textproto.CanonicalMIMEHeaderKey(k)
		if freshenSkip[k] || skip[k] || len(v) == 0 {
			continue
		}
		stored[k] = slices.Clone(v)
	}
	StripQualifiedFields(stored)
	return true
}

// freshenSkip lists fields Freshen never copies from a 304.
var freshenSkip = map[string]bool{
	"Connection": true, "Keep-Alive": true, "Proxy-Connection": true, "Te": true,
	"Trailer": true, "Transfer-Encoding": true, "Upgrade": true,
	"Proxy-Authenticate": true, "Proxy-Authentication-Info": true, "Proxy-Authorization": true,
	"Content-Length": true, "Content-Encoding": true, "Content-Range": true, "Set-Cookie": true,
}

// StripQualifiedFields removes from a response header to be stored the
// fields named by its qualified private (a shared cache must not store
// them, RFC 9111 §5.2.2.7) and qualified no-cache (they must not be reused
// without revalidation, §5.2.2.4).
func StripQualifiedFields(h http.Header) {
	cc := ParseCacheControl(h)
	for _, f := range cc.PrivateFields {
		h.Del(f)
	}
	for _, f := range cc.NoCacheFields {
		h.Del(f)
	}
}

// entityTag is a parsed entity-tag (RFC 9110 §8.8.3).
type entityTag struct {
	weak   bool
	opaque string // between the quotes
}

// parseEntityTag parses one entity-tag; the whole string must be one.
func parseEntityTag(s string) (entityTag, bool) {
	t, rest, ok := scanEntityTag(s)
	return t, ok && rest == ""
}

// scanEntityTag reads an entity-tag at the start of s and returns the rest.
func scanEntityTag(s string) (entityTag, string, bool) {
	var t entityTag
	if strings.HasPrefix(s, "W/") {
		t.weak = true
		s = s[2:]
	}
	if len(s) < 2 || s[0] != '"' {
		return entityTag{}, s, false
	}
	end := strings.IndexByte(s[1:], '"')
	if end < 0 {
		return entityTag{}, s, false
	}
	t.opaque = s[1 : 1+end]
	for i := 0; i < len(t.opaque); i++ {
		if c := t.opaque[i]; c < 0x21 || c == 0x7f {
			return entityTag{}, s, false
		}
	}
	return t, s[2+end:], true
}

// etagListMatches evaluates an If-None-Match value against the stored ETag
// with weak comparison. "*" matches any stored response.
func etagListMatches(list, stored string) bool {
	st, stOK := parseEntityTag(strings.TrimSpace(stored))
	s := list
	for {
		s = strings.TrimLeft(s, " \t,")
		if s == "" {
			return false
		}
		if s[0] == '*' {
			return true
		}
		t, rest, ok := scanEntityTag(s)
		if !ok {
			return false
		}
		if stOK && t.opaque == st.opaque {
			return true
		}
		s = rest
	}
}
