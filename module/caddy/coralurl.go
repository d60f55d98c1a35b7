package coralcaddy

// Coralized request parsing and cache keys.
//
// A Coralized URL names its origin in the host: http://www.example.com/a.jpg
// becomes http://www.example.com.nyud.net/a.jpg, and a numeric label just
// before the zone names a non-default origin port:
// http://www.example.com.8080.nyud.net/ is http://www.example.com:8080/.
//
// Host rules (ParseCoralized): the grammar of Coralized names is package
// coralname's (coralname/doc.go), shared with the DNS plugin so that DNS
// answers exactly the names this proxy serves. This file adapts it to the
// proxy: errors as *HostError, ports as ints.
//
// Cache keys (NormalizeURL, CacheKey): the key is SHA-1 of the normalized
// URL, written as a scheme-relative reference "//host[:port]/path[?query]".
// The scheme is left out on purpose: the Coralized URL is always
// http://host.nyud.net/…, so whether the proxy fetched the origin over http
// or https is a fetch detail, and every proxy must compute the same key for
// the same Coralized URL. The scheme argument only says which port is the
// default and is dropped (80 for http or "", 443 for https; port 0 always
// means the default). See NormalizeURL for the path and query rules.

import (
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"

	"github.com/coralcdn/coral/coralname"
)

// Errors from ParseCoralized, wrapped in a *HostError; test them with
// errors.Is. StatusForHostError maps them to HTTP status codes. They are
// package coralname's.
var (
	// ErrNotCoralized: the host is not under the zone (or is an IP literal
	// addressing the proxy itself). The proxy is not an open proxy.
	ErrNotCoralized = coralname.ErrNotCoralized
	// ErrLoop: the origin host itself carries the zone, so fetching it would
	// come back to Coral.
	ErrLoop = coralname.ErrLoop
	// ErrBadHost: the host is under the zone but does not name a valid
	// origin (or the Host header is malformed).
	ErrBadHost = coralname.ErrBadHost
	// ErrBadZone: the configured zone is not a valid domain name.
	ErrBadZone = coralname.ErrBadZone
)

// HostError is the error ParseCoralized returns: the host, the sentinel
// error (ErrNotCoralized, ErrLoop, ErrBadHost or ErrBadZone) and a detail,
// as coralname.Error has them.
type HostError coralname.Error

func (e *HostError) Error() string { return "coral_proxy: " + (*coralname.Error)(e).Error() }

// Unwrap returns the sentinel error.
func (e *HostError) Unwrap() error { return e.Err }

// StatusForHostError suggests the HTTP status for an error from
// ParseCoralized: 421 Misdirected Request for ErrNotCoralized, 403
// Forbidden for ErrLoop, 500 for ErrBadZone (a configuration error), and
// 400 Bad Request for ErrBadHost and anything else.
func StatusForHostError(err error) int {
	switch {
	case errors.Is(err, ErrNotCoralized):
		return http.StatusMisdirectedRequest
	case errors.Is(err, ErrLoop):
		return http.StatusForbidden
	case errors.Is(err, ErrBadZone):
		return http.StatusInternalServerError
	default:
		return http.StatusBadRequest
	}
}

// maxNameLen is the longest host name, in presentation form without the
// root dot.
const maxNameLen = coralname.MaxNameLen

// Target is a parsed Coralized request: the origin resource it names.
type Target struct {
	Host     string // origin host, lower case, no trailing dot; a name or an IPv4 literal
	Port     int    // origin port; 0 means the scheme's default
	Scheme   string // how the proxy fetches the origin: "http" (default) or "https"
	Path     string // escaped path as received (r.URL.EscapedPath())
	RawQuery string // query as received, without '?'
	// OneLabel says the request named the origin in the one-label form
	// (www-example-com.nyud.net), which a wildcard certificate covers.
	// It changes nothing about the object (same key, same origin URL).
	OneLabel bool
}

// ParseTarget parses a Coralized request: host is the Host header, zone the
// alias zone, path the escaped request path and rawQuery its query. The
// scheme is "http", as Coralized URLs are.
func ParseTarget(host, zone, path, rawQuery string) (Target, error) {
	o, err := coralname.ParseHost(host, zone)
	if err != nil {
		return Target{}, hostError(err)
	}
	return Target{Host: o.Host, Port: o.Port, Scheme: "http", Path: path, RawQuery: rawQuery, OneLabel: o.OneLabel}, nil
}

// NormalizedURL is NormalizeURL of t.
func (t Target) NormalizedURL() string {
	return NormalizeURL(t.Scheme, t.Host, t.Port, t.Path, t.RawQuery)
}

// Key is CacheKey of t: the object's key in the cache and the DSHT.
func (t Target) Key() string {
	return CacheKey(t.Scheme, t.Host, t.Port, t.Path, t.RawQuery)
}

// OriginURL is the absolute URL to fetch from the origin: t's scheme
// ("http" when empty), host, port unless default, and the normalized path
// and query, so that dot segments never reach the origin and the origin is
// asked for exactly the URL the cache key is computed from (Key). It is
// built field by field with net/url, never by gluing strings: the request
// line the origin sees is the result's RequestURI.
func (t Target) OriginURL() *url.URL {
	scheme := lowerASCII(t.Scheme)
	if scheme == "" {
		scheme = "http"
	}
	host := normalizeHost(t.Host)
	if t.Port > 0 && t.Port != schemeDefaultPort(scheme) {
		host = net.JoinHostPort(strings.TrimSuffix(strings.TrimPrefix(host, "["), "]"), strconv.Itoa(t.Port))
	}
	escaped := normalizePath(t.Path)
	// A normalized path has only valid escapes, so unescaping cannot fail,
	// and RawPath is a valid encoding of Path: EscapedPath returns it as is.
	path, _ := url.PathUnescape(escaped)
	return &url.URL{Scheme: scheme, Host: host, Path: path, RawPath: escaped, RawQuery: normalizeQuery(t.RawQuery)}
}

// CoralHost is the Coralized host name for t under zone (see CoralizeHost).
func (t Target) CoralHost(zone string) string { return CoralizeHost(t.Host, t.Port, zone) }

// CoralizeHost builds the Coralized host name for an origin: origin, then
// the port as a label unless it is 0, then the zone (normalized as by
// NormalizeZone, or used as given if invalid). It is the inverse of
// ParseCoralized, and what a handler needs to keep absolute redirects to the
// same origin Coralized.
func CoralizeHost(origin string, port int, zone string) string {
	return coralname.Coralize(coralname.Origin{Host: origin, Port: port}, zone)
}

// NormalizeZone validates a zone ("nyud.net", "NYUD.net.", ".nyud.net")
// and returns it lower case without leading or trailing dot. A zone needs
// LDH labels and a last label that is not all digits; ErrBadZone otherwise.
func NormalizeZone(zone string) (string, error) {
	z, err := coralname.NormalizeZone(zone)
	return z, hostError(err)
}

// ParseCoralized splits a Coralized Host header value into the origin host
// and port. The origin is lower case without trailing dot; port is 0 unless
// the host names one. Errors are *HostError wrapping ErrNotCoralized,
// ErrLoop, ErrBadHost or ErrBadZone; the rules are coralname's (see
// coralname.ParseHost).
func ParseCoralized(host, zone string) (origin string, port int, err error) {
	o, err := coralname.ParseHost(host, zone)
	if err != nil {
		return "", 0, hostError(err)
	}
	return o.Host, o.Port, nil
}

// hostError turns a *coralname.Error into a *HostError.
func hostError(err error) error {
	var e *coralname.Error
	if errors.As(err, &e) {
		return (*HostError)(e)
	}
	return err
}

// OriginAddr reports whether origin is an IP literal, and which. Origins
// from ParseCoralized can only be IPv4; the handler must apply its policy on
// private, loopback and other special addresses to them.
func OriginAddr(origin string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(origin)
	if err != nil {
		return netip.Addr{}, false
	}
	return a, true
}

// CarriesZone reports whether zone (normalized as by NormalizeZone) occurs
// in host on label boundaries. ParseCoralized already refuses origins that
// carry its own zone; a handler that serves several zones, or that knows
// the Coral zone the alias zone points to ("nyucd.net"), checks the others
// with it, and can check the host of a redirect's Location the same way.
func CarriesZone(host, zone string) bool { return coralname.CarriesZone(host, zone) }

// The grammar's helpers, for the rest of the package.

// parsePortLabel parses an origin port label: 1–65535, no leading zeros.
func parsePortLabel(s string) (int, bool) { return coralname.ParsePort(s) }

// isDottedQuad reports whether s is an IPv4 address in canonical
// dotted-quad form (four decimal octets, no leading zeros).
func isDottedQuad(s string) bool { return coralname.IsDottedQuad(s) }

// checkHostLabel returns what is wrong with a lower-case host label, or "".
// The last label (top-level) may not contain '_'.
func checkHostLabel(l string, last bool) string { return coralname.CheckLabel(l, last) }

func isDigits(s string) bool { return coralname.IsDigits(s) }

// lowerASCII lower-cases ASCII letters only (see coralname.LowerASCII).
func lowerASCII(s string) string { return coralname.LowerASCII(s) }

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

// NormalizeURL returns the string CacheKey hashes, the scheme-relative
// reference "//host[:port]/path[?query]" (RFC 3986 §4.2):
//
//   - The scheme is not part of it (see the file comment); it only decides
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

// appendNormalizedURL appends NormalizeURL's string to dst. The parts are
// usually normal already (normalizePercent and removeDotSegments then
// return them as they are), so nothing else is allocated.
func appendNormalizedURL(dst []byte, scheme, host string, port int, path, rawQuery string) []byte {
	dst = append(dst, "//"...)
	dst = append(dst, normalizeHost(host)...)
	if port > 0 && port != schemeDefaultPort(lowerASCII(scheme)) {
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

func schemeDefaultPort(scheme string) int {
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
