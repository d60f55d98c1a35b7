package httpcache

import (
	"net/http"
	"net/textproto"
	"slices"
	"strings"
	"time"
)

// AddValidators prepares dst, the headers of a request to the origin, to
// revalidate a stored response with headers stored, received at received
// (RFC 9111 §4.3.1): it removes any conditional fields the client sent and
// sets If-None-Match from the stored ETag and If-Modified-Since from the
// stored Last-Modified (ValidLastModified). It reports whether it set
// either.
func AddValidators(dst, stored http.Header, received time.Time) bool {
	for _, k := range []string{"If-None-Match", "If-Modified-Since", "If-Match", "If-Unmodified-Since", "If-Range"} {
		dst.Del(k)
	}
	added := false
	if tag := strings.TrimSpace(stored.Get("ETag")); tag != "" {
		dst.Set("If-None-Match", tag)
		added = true
	}
	if lm, ok := ValidLastModified(stored, received); ok {
		dst.Set("If-Modified-Since", lm.UTC().Format(http.TimeFormat))
		added = true
	}
	return added
}

// ValidLastModified returns a stored response's Last-Modified if it can
// serve as a validator: a valid HTTP-date no later than the response's
// Date nor than when it was received. A date in the future is no
// validator (RFC 9110 §8.8.2.1: an origin never sends one): many servers
// (Python's http.server, Express) answer 304 to any If-Modified-Since
// later than their file, so a forged future date would make the origin
// confirm a copy it never sent.
func ValidLastModified(stored http.Header, received time.Time) (time.Time, bool) {
	lm, ok := headerDate(stored, "Last-Modified")
	if !ok || lm.After(received) {
		return time.Time{}, false
	}
	if date, ok := headerDate(stored, "Date"); ok && lm.After(date) {
		return time.Time{}, false
	}
	return lm, true
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
