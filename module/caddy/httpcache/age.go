package httpcache

import (
	"net/http"
	"strings"
	"time"
)

// CurrentAge is the age of a stored response (RFC 9111 §4.2.3): requestTime
// is when the request that fetched it was sent, responseTime when the
// response arrived. The Age received counts as AgeValue says, an absent
// or invalid Date as responseTime; the result is never negative. It is
// CorrectedInitialAge plus the time since responseTime.
func CurrentAge(respHeader http.Header, requestTime, responseTime, now time.Time) time.Duration {
	return AddSaturating(CorrectedInitialAge(respHeader, requestTime, responseTime), max(0, now.Sub(responseTime)))
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
	d, _ := ParseDeltaSeconds(strings.TrimSpace(v))
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
	correctedAgeValue := AddSaturating(ageValue, responseDelay)
	return max(apparentAge, correctedAgeValue)
}

// AddSaturating adds non-negative durations without overflowing.
func AddSaturating(a, b time.Duration) time.Duration {
	if s := a + b; s >= a {
		return s
	}
	return time.Duration(1<<63 - 1)
}
