package httpcache

import (
	"net/http"
	"net/textproto"
	"slices"
	"strconv"
	"strings"
	"time"
)

// MaxDelta is the largest delta-seconds value kept: 2^31 seconds
// (RFC 9111 §1.2.2); larger values are clamped to it, and an Age is never
// sent larger (§5.1).
const MaxDelta = time.Duration(1<<31) * time.Second

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
	// h["Cache-Control"], not h.Values: the key is canonical already, and
	// most requests have none (nothing to canonicalize, join or parse).
	return parseCacheControlValue(joinFieldLines(h["Cache-Control"]))
}

// joinFieldLines joins a field's lines into one list, without allocating
// for the usual zero or one line.
func joinFieldLines(vs []string) string {
	switch len(vs) {
	case 0:
		return ""
	case 1:
		return vs[0]
	}
	return strings.Join(vs, ",")
}

// ParseRequestCacheControl is ParseCacheControl for a request, which also
// honours "Pragma: no-cache" when the request has no Cache-Control field
// (RFC 9111 §5.4, for HTTP/1.0 clients).
func ParseRequestCacheControl(h http.Header) CacheControl {
	cc := ParseCacheControl(h)
	if len(h["Cache-Control"]) == 0 {
		for _, v := range h["Pragma"] {
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
	if s == "" {
		return CacheControl{} // most requests: no allocation (cc below escapes)
	}
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
	if flag, ok := flagDirectives[name]; ok {
		*flag(cc) = true
		return
	}
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
	case "max-age":
		// Invalid counts as 0: RFC 9111 §4.2.1 encourages treating
		// invalid freshness information as stale.
		d, _ := ParseDeltaSeconds(val)
		setMinDelta(&cc.MaxAge, &cc.HasMaxAge, d)
	case "s-maxage":
		d, _ := ParseDeltaSeconds(val)
		setMinDelta(&cc.SMaxAge, &cc.HasSMaxAge, d)
	case "stale-while-revalidate":
		if d, ok := ParseDeltaSeconds(val); ok {
			setMinDelta(&cc.StaleWhileRevalidate, &cc.HasStaleWhileRevalidate, d)
		}
	case "stale-if-error":
		if d, ok := ParseDeltaSeconds(val); ok {
			setMinDelta(&cc.StaleIfError, &cc.HasStaleIfError, d)
		}
	case "max-stale":
		d, ok := MaxDelta, true
		if hasVal {
			d, ok = ParseDeltaSeconds(val)
		}
		if ok {
			setMinDelta(&cc.MaxStale, &cc.HasMaxStale, d)
		}
	case "min-fresh":
		if d, ok := ParseDeltaSeconds(val); ok && (!cc.HasMinFresh || d > cc.MinFresh) {
			cc.MinFresh, cc.HasMinFresh = d, true
		}
	}
}

// flagDirectives are the directives without a value, by name, and the
// field each sets.
var flagDirectives = map[string]func(*CacheControl) *bool{
	"public":           func(cc *CacheControl) *bool { return &cc.Public },
	"must-revalidate":  func(cc *CacheControl) *bool { return &cc.MustRevalidate },
	"proxy-revalidate": func(cc *CacheControl) *bool { return &cc.ProxyRevalidate },
	"must-understand":  func(cc *CacheControl) *bool { return &cc.MustUnderstand },
	"no-transform":     func(cc *CacheControl) *bool { return &cc.NoTransform },
	"immutable":        func(cc *CacheControl) *bool { return &cc.Immutable },
	"only-if-cached":   func(cc *CacheControl) *bool { return &cc.OnlyIfCached },
}

func setMinDelta(v *time.Duration, has *bool, d time.Duration) {
	if !*has || d < *v {
		*v, *has = d, true
	}
}

// ParseDeltaSeconds parses delta-seconds (RFC 9111 §1.2.2): one or more
// digits, clamped to MaxDelta.
func ParseDeltaSeconds(s string) (time.Duration, bool) {
	if s == "" || strings.TrimLeft(s, "0123456789") != "" {
		return 0, false
	}
	s = strings.TrimLeft(s, "0")
	if len(s) > 10 {
		return MaxDelta, true
	}
	n, _ := strconv.ParseInt("0"+s, 10, 64)
	if n >= 1<<31 {
		return MaxDelta, true
	}
	return time.Duration(n) * time.Second, true
}

// parseFieldNameList splits a comma-separated list of field names into canonical
// form, dropping empty and invalid entries.
func parseFieldNameList(v string) []string {
	var out []string
	for _, f := range strings.Split(v, ",") {
		f = strings.TrimSpace(f)
		if IsToken(f) {
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

// IsToken: RFC 9110 §5.6.2.
func IsToken(s string) bool {
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
