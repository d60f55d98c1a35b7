package httpcache

import (
	"net/http"
	"time"
)

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
