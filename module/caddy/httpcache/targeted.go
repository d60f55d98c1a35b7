package httpcache

// Targeted cache control (RFC 9213): response fields that carry
// Cache-Control directives for one class of cache only, so that an origin
// behind a CDN can tell the CDN something other than what it tells
// browsers ("CDN-Cache-Control: max-age=86400" with "Cache-Control:
// no-cache", say).
//
// Coral's target list, most specific first:
//
//	Coral-Cache-Control   directives for Coral proxies only
//	CDN-Cache-Control     directives for any CDN (RFC 9213 §3)
//
// The first of them present with a valid, non-empty value decides how the
// proxy caches the response, and then Cache-Control and Expires are
// ignored for that purpose (RFC 9213 §2.1); with neither, Cache-Control
// and Expires apply as usual. The fields are Structured Field
// Dictionaries (RFC 8941); a field that does not parse, or whose
// directive values have the wrong type (max-age="10"), is ignored as a
// whole, as if it were absent (§2.2). Parameters are ignored. Both are
// stored with the response, so peers (Coral proxies too) get them.
// Coral-Cache-Control is never sent to clients: it is for Coral proxies
// only, and there are none downstream. CDN-Cache-Control is passed on, as
// RFC 9213 §3 says CDN caches typically do, so that a cache of that class
// in front of the proxy can use it too (the RFC allows removing it when it
// is known not to be used downstream; browsers ignore it). Cache-Control
// itself goes to clients unchanged.

import (
	"net/http"
	"strconv"

	"github.com/dunglas/httpsfv"
)

// targetedFields is Coral's target list, in order of precedence.
var targetedFields = []string{"Coral-Cache-Control", "CDN-Cache-Control"}

// ParseResponseCacheControl returns the directives that decide how a
// shared Coral proxy caches a response with header h: those of the first
// targeted field with a valid, non-empty value (CacheControl.Targeted set),
// else Cache-Control's.
func ParseResponseCacheControl(h http.Header) CacheControl {
	for _, name := range targetedFields {
		vals := h.Values(name)
		if len(vals) == 0 {
			continue
		}
		if cc, ok := parseTargeted(vals); ok {
			return cc
		}
	}
	return ParseCacheControl(h)
}

// parseTargeted parses the field lines of one targeted field; ok is false
// when the field is empty or invalid and must be ignored.
func parseTargeted(vals []string) (cc CacheControl, ok bool) {
	dict, err := httpsfv.UnmarshalDictionary(vals)
	if err != nil || len(dict.Names()) == 0 {
		return CacheControl{}, false
	}
	for _, name := range dict.Names() {
		m, _ := dict.Get(name)
		item, isItem := m.(httpsfv.Item)
		if !isItem {
			if isKnownDirective(name) {
				return CacheControl{}, false // an inner list where a directive wants a value
			}
			continue
		}
		switch v := item.Value.(type) {
		case bool:
			if isDeltaDirective(name) {
				return CacheControl{}, false
			}
			if v {
				cc.apply(name, "", false)
			}
		case int64:
			if !isDeltaDirective(name) {
				if isKnownDirective(name) {
					return CacheControl{}, false
				}
				continue
			}
			if v < 0 {
				return CacheControl{}, false
			}
			cc.apply(name, strconv.FormatInt(v, 10), true)
		case string:
			switch name {
			case "no-cache", "private":
				cc.apply(name, v, true)
			default:
				if isKnownDirective(name) {
					return CacheControl{}, false
				}
			}
		default:
			if isKnownDirective(name) {
				return CacheControl{}, false
			}
		}
	}
	cc.Targeted = true
	return cc, true
}

// isDeltaDirective: response directives whose value is delta-seconds, an
// Integer in a targeted field.
func isDeltaDirective(name string) bool {
	switch name {
	case "max-age", "s-maxage", "stale-while-revalidate", "stale-if-error":
		return true
	}
	return false
}

// isKnownDirective: the response directives this cache acts on, whose
// value type a targeted field must respect; unknown extensions are
// ignored whatever their value.
func isKnownDirective(name string) bool {
	switch name {
	case "no-store", "no-cache", "private", "public", "must-revalidate", "proxy-revalidate",
		"must-understand", "no-transform", "immutable":
		return true
	}
	return isDeltaDirective(name)
}

// CoralOnlyField is the targeted field that never leaves Coral: removed
// from every response to a client.
const CoralOnlyField = "Coral-Cache-Control"
