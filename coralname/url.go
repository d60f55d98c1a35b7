package coralname

// Coralized URLs: the cache key, the normalized URL it hashes, and the
// origin URL fetched for it. Both servers and every proxy must compute the
// same key for the same Coralized URL, so the rules live here, beside the
// host grammar.
//
// The key is SHA-1 of the normalized URL, written as a scheme-relative
// reference "//host[:port]/path[?query]". The scheme is left out on
// purpose: the Coralized URL is always http://host.nyud.net/…, so whether
// the proxy fetched the origin over http or https is a fetch detail. The
// scheme argument only says which port is the default and is dropped (80
// for http or "", 443 for https; port 0 always means the default). See
// NormalizeURL for the path and query rules.

import (
	"crypto/sha1"
	"encoding/hex"
	"net"
	"net/url"
	"strconv"
	"strings"
)

// CacheKey is the object's key: SHA-1 (hex) of NormalizeURL of the same
// arguments. The DSHT key is the same 160 bits (hex-decode it).
func CacheKey(scheme, host string, port int, path, rawQuery string) string {
	// Every hit computes a key: the URL is built on the stack when it fits,
	// so the key string is the one allocation.
	var buf [256]byte
	sum := sha1.Sum(appendNormalizedURL(buf[:0], scheme, host, port, path, rawQuery))
	var key [2 * sha1.Size]byte
	hex.Encode(key[:], sum[:])
	return string(key[:])
}

// ParseCacheKey returns the 20 bytes a cache key (CacheKey's 40 lowercase
// hex digits) spells, or false for any other string. It allocates
// nothing: stores and tables keyed by objects call it on every hit.
func ParseCacheKey(key string) (b [sha1.Size]byte, ok bool) {
	if len(key) != 2*sha1.Size {
		return b, false
	}
	for i := range b {
		hi, lo := lowerHexValue[key[2*i]], lowerHexValue[key[2*i+1]]
		if hi|lo > 0xf {
			return b, false
		}
		b[i] = hi<<4 | lo
	}
	return b, true
}

// lowerHexValue maps a lowercase hex digit to its value, any other byte
// to 0xff.
var lowerHexValue = func() (t [256]byte) {
	for i := range t {
		t[i] = 0xff
	}
	for i, c := range "0123456789abcdef" {
		t[c] = byte(i)
	}
	return t
}()

// NormalizeURL returns the string CacheKey hashes, the scheme-relative
// reference "//host[:port]/path[?query]" (RFC 3986 §4.2):
//
//   - The scheme is not part of it (see the file comment of url.go); it only decides
//     the default port, which is dropped: 0 or less always, 80 for "http"
//     and "", 443 for "https" (any case).
//   - Host: ASCII lower case, trailing dots dropped, an IPv6 literal
//     bracketed; characters that cannot appear in a host are
//     percent-encoded so the host cannot run into the path.
//   - Path: percent-encoding normalized (RFC 3986 §6.2.2.2: hex digits
//     upper case, unreserved characters decoded, a '%' that starts no
//     escape encoded as %25, characters not allowed in a path encoded);
//     dot segments removed (§5.2.4), so "/../.." cannot climb above "/";
//     empty → "/"; a path without a leading '/' gets one. Repeated slashes
//     and a trailing slash are kept: origins may treat them differently.
//   - Query: the same percent-encoding normalization, otherwise kept as is:
//     parameter order, empty and duplicate parameters, '+' and ';' all
//     stay, because origins may give them meaning. An empty query is no
//     query.
//   - Fragment: dropped (everything from a raw '#' in path or query).
//
// NormalizeURL is idempotent in its components: feeding its host, path and
// query back in gives the same string.
func NormalizeURL(scheme, host string, port int, path, rawQuery string) string {
	return string(appendNormalizedURL(nil, scheme, host, port, path, rawQuery))
}

// OriginURL is the absolute URL to fetch from the origin for a Coralized
// URL's parts: scheme ("http" when empty), host, port unless the scheme's
// default, and the normalized path and query, so that dot segments never
// reach the origin and the origin is asked for exactly the URL the cache
// key is computed from (CacheKey). It is built field by field with
// net/url, never by gluing strings: the request line the origin sees is
// the result's RequestURI.
func OriginURL(scheme, host string, port int, path, rawQuery string) *url.URL {
	scheme = lowerASCII(scheme)
	if scheme == "" {
		scheme = "http"
	}
	h := normalizeHost(host)
	if port > 0 && port != DefaultPort(scheme) {
		h = net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(h, "["), "]"), strconv.Itoa(port))
	}
	escaped := normalizePath(path)
	// A normalized path has only valid escapes, so unescaping cannot fail,
	// and RawPath is a valid encoding of Path: EscapedPath returns it as is.
	p, _ := url.PathUnescape(escaped)
	return &url.URL{Scheme: scheme, Host: h, Path: p, RawPath: escaped, RawQuery: normalizeQuery(rawQuery)}
}

// URLPort is the origin port of an absolute http or https URL as the
// parts above take it: 0 when the URL has none or the scheme's default,
// else 1–65535 written without leading zeros; ok is false for any other
// port.
func URLPort(u *url.URL) (port int, ok bool) {
	p := u.Port()
	if p == "" {
		return 0, true
	}
	n, ok := parsePort(p)
	if !ok {
		return 0, false
	}
	if n == DefaultPort(lowerASCII(u.Scheme)) {
		return 0, true
	}
	return n, true
}

// IsNormalizedPrefix reports whether p can be a prefix of a normalized
// URL as NormalizeURL makes them: "//", a host of allowed characters, an
// optional port, then "/" and the rest as normalization leaves it (no
// spaces, controls or non-ASCII). Purges by prefix travel in this form.
func IsNormalizedPrefix(p string) bool {
	rest, ok := strings.CutPrefix(p, "//")
	if !ok {
		return false
	}
	slash := strings.IndexByte(rest, '/')
	if slash <= 0 {
		return false
	}
	host := rest[:slash]
	if h, port, ok := strings.Cut(host, ":"); ok {
		if _, ok := parsePort(port); !ok {
			return false
		}
		host = h
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; !(isHostChar(c) || c == '%') {
			return false
		}
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return host != ""
}

// EscapeQuery percent-encodes the bytes of q that may not appear in a
// URL's query (RFC 3986 §3.4), a '%' not starting an escape included, and
// leaves the rest (valid escapes too) as they are. Unlike NormalizeURL it
// changes nothing that is valid already.
func EscapeQuery(q string) string {
	const hex = "0123456789ABCDEF"
	var b strings.Builder
	escaped := false
	for i := 0; i < len(q); i++ {
		c := q[i]
		if isQueryChar(c) || c == '%' && i+2 < len(q) && isHexDigit(q[i+1]) && isHexDigit(q[i+2]) {
			if escaped {
				b.WriteByte(c)
			}
			continue
		}
		if !escaped {
			escaped = true
			b.Grow(len(q) + 16)
			b.WriteString(q[:i])
		}
		b.WriteByte('%')
		b.WriteByte(hex[c>>4])
		b.WriteByte(hex[c&15])
	}
	if !escaped {
		return q
	}
	return b.String()
}

// appendNormalizedURL appends NormalizeURL's string to dst. The parts are
// usually normal already (normalizePercent and removeDotSegments then
// return them as they are), so nothing else is allocated.
func appendNormalizedURL(dst []byte, scheme, host string, port int, path, rawQuery string) []byte {
	dst = append(dst, "//"...)
	dst = append(dst, normalizeHost(host)...)
	if port > 0 && port != DefaultPort(lowerASCII(scheme)) {
		dst = append(dst, ':')
		dst = strconv.AppendInt(dst, int64(port), 10)
	}
	dst = append(dst, normalizePath(path)...)
	if q := normalizeQuery(rawQuery); q != "" {
		dst = append(dst, '?')
		dst = append(dst, q...)
	}
	return dst
}

// DefaultPort is the default port of a lower-case scheme: 80 for "http"
// and "" (Coralized URLs are http), 443 for "https", 0 for any other.
func DefaultPort(scheme string) int {
	switch scheme {
	case "http", "":
		return 80
	case "https":
		return 443
	}
	return 0
}

// normalizeHost: see NormalizeURL.
func normalizeHost(host string) string {
	inner := host
	bracketed := len(host) >= 2 && host[0] == '[' && host[len(host)-1] == ']'
	if bracketed {
		inner = host[1 : len(host)-1]
	}
	ipv6 := strings.Contains(inner, ":")
	allowed := isHostChar
	if ipv6 {
		allowed = isIPv6Char
	}
	inner = strings.TrimRight(normalizePercent(inner, allowed, true), ".")
	if ipv6 {
		return "[" + inner + "]"
	}
	return inner
}

// normalizePath: see NormalizeURL.
func normalizePath(p string) string {
	if i := strings.IndexByte(p, '#'); i >= 0 {
		p = p[:i]
	}
	p = normalizePercent(p, isPathChar, false)
	if !strings.HasPrefix(p, "/") {
		p = "/" + p
	}
	return removeDotSegments(p)
}

// normalizeQuery: see NormalizeURL.
func normalizeQuery(q string) string {
	if i := strings.IndexByte(q, '#'); i >= 0 {
		q = q[:i]
	}
	return normalizePercent(q, isQueryChar, false)
}

// normalizePercent normalizes percent-encoding (RFC 3986 §6.2.2.2): escapes
// of unreserved characters are decoded, other escapes get upper-case hex, a
// '%' that does not start an escape becomes "%25", and bytes for which
// allowed is false are encoded. With lower, ASCII letters that are not part
// of an escape are lower-cased. The result is a fixed point.
func normalizePercent(s string, allowed func(byte) bool, lower bool) string {
	if isNormalPercent(s, allowed, lower) {
		return s // what percentNormalized would build, without building it
	}
	return percentNormalized(s, allowed, lower)
}

// percentNormalized is normalizePercent without its shortcut: the general
// algorithm, which FuzzNormalizeShortcuts holds the shortcut to.
func percentNormalized(s string, allowed func(byte) bool, lower bool) string {
	const hexUpper = "0123456789ABCDEF"
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' && i+2 < len(s) && isHexDigit(s[i+1]) && isHexDigit(s[i+2]) {
			d := hexValue(s[i+1])<<4 | hexValue(s[i+2])
			i += 2
			if isUnreserved(d) {
				if lower && 'A' <= d && d <= 'Z' {
					d += 'a' - 'A'
				}
				b.WriteByte(d)
			} else {
				b.WriteByte('%')
				b.WriteByte(hexUpper[d>>4])
				b.WriteByte(hexUpper[d&15])
			}
			continue
		}
		if c != '%' && allowed(c) {
			if lower && 'A' <= c && c <= 'Z' {
				c += 'a' - 'A'
			}
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(hexUpper[c>>4])
		b.WriteByte(hexUpper[c&15])
	}
	return b.String()
}

// isNormalPercent reports whether normalizePercent(s, allowed, lower)
// is s itself: no '%', every byte allowed and, with lower, no upper-case
// letter.
func isNormalPercent(s string, allowed func(byte) bool, lower bool) bool {
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' || !allowed(c) || lower && 'A' <= c && c <= 'Z' {
			return false
		}
	}
	return true
}

// removeDotSegments implements RFC 3986 §5.2.4 for a path starting with
// '/'. The result starts with '/' and has no "." or ".." segments.
func removeDotSegments(p string) string {
	if !strings.Contains(p, "/.") {
		return p // no segment can be "." or "..": nothing to remove
	}
	return dotSegmentsRemoved(p)
}

// dotSegmentsRemoved is removeDotSegments without its shortcut: the
// general algorithm, which FuzzNormalizeShortcuts holds the shortcut to.
func dotSegmentsRemoved(p string) string {
	segs := strings.Split(p[1:], "/")
	out := make([]string, 0, len(segs))
	trailing := false
	for i, s := range segs {
		last := i == len(segs)-1
		switch s {
		case ".":
			trailing = last
		case "..":
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
			trailing = last
		default:
			out = append(out, s)
		}
	}
	r := "/" + strings.Join(out, "/")
	if trailing && len(out) > 0 {
		r += "/"
	}
	return r
}

func isHexDigit(c byte) bool {
	return '0' <= c && c <= '9' || 'a' <= c && c <= 'f' || 'A' <= c && c <= 'F'
}

func hexValue(c byte) byte {
	switch {
	case '0' <= c && c <= '9':
		return c - '0'
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10
	default:
		return c - 'A' + 10
	}
}

// isUnreserved: RFC 3986 §2.3.
func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

// isSubDelim: RFC 3986 §2.2.
func isSubDelim(c byte) bool {
	return strings.IndexByte("!$&'()*+,;=", c) >= 0
}

// isHostChar: reg-name characters (RFC 3986 §3.2.2).
func isHostChar(c byte) bool { return isUnreserved(c) || isSubDelim(c) }

// isIPv6Char: characters inside an IP-literal's brackets.
func isIPv6Char(c byte) bool { return isHostChar(c) || c == ':' }

// isPathChar: pchar and '/' (RFC 3986 §3.3).
func isPathChar(c byte) bool {
	return isUnreserved(c) || isSubDelim(c) || c == ':' || c == '@' || c == '/'
}

// isQueryChar: pchar, '/' and '?' (RFC 3986 §3.4).
func isQueryChar(c byte) bool { return isPathChar(c) || c == '?' }
