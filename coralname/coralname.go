package coralname

import (
	"errors"
	"net/netip"
	"strconv"
	"strings"
)

// The errors of this package, wrapped in an *Error; test them with
// errors.Is.
var (
	// ErrNotCoralized: the host is not under the zone (or is an IP literal
	// addressing the proxy itself). The proxy is not an open proxy.
	ErrNotCoralized = errors.New("host is not under the Coral zone")
	// ErrLoop: the origin host itself carries a zone, so fetching it would
	// come back to Coral.
	ErrLoop = errors.New("origin host carries the Coral zone")
	// ErrBadHost: the host is under the zone but does not name a valid
	// origin (or the Host header is malformed).
	ErrBadHost = errors.New("malformed origin host")
	// ErrBadZone: the configured zone is not a valid domain name.
	ErrBadZone = errors.New("malformed Coral zone")
)

// Error is the error of every parser here: the input, the sentinel error
// (ErrNotCoralized, ErrLoop, ErrBadHost or ErrBadZone) and a detail.
type Error struct {
	Host   string // the Host value, origin part or zone, as given
	Err    error  // one of the sentinel errors
	Detail string // what exactly is wrong, for logs
}

func (e *Error) Error() string {
	msg := "host " + strconv.Quote(e.Host) + ": " + e.Err.Error()
	if e.Detail != "" {
		msg += ": " + e.Detail
	}
	return msg
}

// Unwrap returns the sentinel error.
func (e *Error) Unwrap() error { return e.Err }

// Length limits.
const (
	MaxHostHeader = 1024 // longer Host values are refused before parsing
	MaxNameLen    = 253  // RFC 1035 §2.3.4, in presentation form without the root dot
	MaxLabelLen   = 63
)

// Origin is the origin a Coralized name names.
type Origin struct {
	Host string // lower case, no trailing dot; a name or a canonical IPv4 literal
	Port int    // 0 unless the name has a port label
	// OneLabel: the name was in the one-label form
	// ("www-example-com.nyud.net"), which a wildcard certificate covers.
	OneLabel bool
}

// Zones are the zones an origin must not carry, normalized: ASCII lower
// case, no dot at either end.
type Zones []string

// NewZones normalizes zones for Zones.ParseOrigin, leaving out empty ones.
// Unlike NormalizeZone it does not validate them: a zone only needs to be
// recognised inside an origin.
func NewZones(zones ...string) Zones {
	var zs Zones
	for _, z := range zones {
		if z = trimDots(lowerASCII(z)); z != "" {
			zs = append(zs, z)
		}
	}
	return zs
}

// Carried reports whether one of the zones occurs in host (any case, one
// trailing dot allowed) on label boundaries.
func (zs Zones) Carried(host string) bool {
	host = strings.TrimSuffix(lowerASCII(host), ".")
	for _, z := range zs {
		if carries(host, z) {
			return true
		}
	}
	return false
}

// ParseOrigin parses an origin part, the labels before the zone without
// the dot between ("www.example.com.8080"), as the DNS plugin finds it in
// a query name. Errors are *Error wrapping ErrLoop or ErrBadHost.
func (zs Zones) ParseOrigin(rel string) (Origin, error) {
	o, detail, err := zs.parseOrigin(lowerASCII(rel))
	if err != nil {
		return Origin{}, &Error{Host: rel, Err: err, Detail: detail}
	}
	return o, nil
}

// Above reports whether rel, an origin part ParseOrigin refuses, may
// still lie above Coralized names: its labels are all labels a longer
// origin part could end in, and it carries none of the zones. Such a name
// is an empty non-terminal (RFC 8020): resolvers that minimise query names
// (RFC 9156) ask for "com.nyud.net" on their way to
// "www.example.com.nyud.net", and an NXDOMAIN there would deny every name
// below it. The DNS plugin answers NODATA for these and NXDOMAIN for the
// rest.
func (zs Zones) Above(rel string) bool {
	rel = lowerASCII(rel)
	if rel == "" || len(rel) > MaxNameLen {
		return false
	}
	for _, z := range zs {
		if carries(rel, z) {
			return false
		}
	}
	for label := range strings.SplitSeq(rel, ".") {
		if checkLabel(label, false) != "" {
			return false
		}
	}
	return true
}

// parseOrigin is ParseOrigin for a lower-case rel, without allocating an
// error: err is a sentinel, detail says what is wrong.
func (zs Zones) parseOrigin(rel string) (o Origin, detail string, err error) {
	bad := func(d string) (Origin, string, error) { return Origin{}, d, ErrBadHost }
	if rel == "" {
		return bad("empty label")
	}
	if strings.IndexByte(rel, '.') < 0 && strings.IndexByte(rel, '-') >= 0 {
		// The one-label form: its decoding is the dotted form's origin
		// part, which the rest checks as any other.
		if len(rel) > MaxLabelLen {
			return bad("label longer than 63 characters")
		}
		if rel[0] == '_' {
			// Reserved: "_acme-challenge" is where the zone's ACME
			// challenge values are, and no web host starts with '_'.
			return bad("a one-label name starting with '_' is reserved")
		}
		rel, o.OneLabel = decodeOneLabel(rel), true
	}
	for _, z := range zs {
		if carries(rel, z) {
			return Origin{}, "", ErrLoop
		}
	}
	if i := strings.LastIndexByte(rel, '.'); isDigits(rel[i+1:]) && !isDottedQuad(rel) {
		last := rel[i+1:]
		p, ok := parsePort(last)
		if !ok {
			return bad("bad port label " + strconv.Quote(last))
		}
		if i < 0 {
			return bad("no origin before the port")
		}
		o.Port, rel = p, rel[:i]
	}
	if isDottedQuad(rel) {
		o.Host = rel
		return o, "", nil
	}
	if d := checkName(rel, true); d != "" {
		return bad(d)
	}
	o.Host = rel
	return o, "", nil
}

// checkName returns what is wrong with a lower-case name without trailing
// dot, or "": its length, its labels (checkLabel), a numeric last label,
// and with origin a single label.
func checkName(name string, origin bool) string {
	if len(name) > MaxNameLen {
		if origin {
			return "origin longer than 253 characters"
		}
		return "too long"
	}
	if origin && strings.IndexByte(name, '.') < 0 {
		return "single-label origin"
	}
	for rest := name; ; {
		label, after, more := strings.Cut(rest, ".")
		if d := checkLabel(label, !more); d != "" {
			return d
		}
		if !more {
			if isDigits(label) {
				return "numeric top-level label"
			}
			return ""
		}
		rest = after
	}
}

// CanonicalHost is a host name as names are compared: ASCII lower case
// (never Unicode case folding, see lowerASCII) without trailing dots. It
// allocates only if host has upper-case letters.
func CanonicalHost(host string) string {
	return strings.TrimRight(lowerASCII(host), ".")
}

// CheckDomain validates a domain name as an operator lists one (a
// blacklist entry): LDH labels with '_' allowed except in the last, at
// most 253 characters, and a last label of digits only as part of a
// canonical IPv4 literal, which ipv4 then reports. One trailing dot is
// allowed. It returns the name lower case without that dot; errors are
// *Error wrapping ErrBadHost, whose Detail says what is wrong.
func CheckDomain(name string) (canonical string, ipv4 bool, err error) {
	n := strings.TrimSuffix(lowerASCII(name), ".")
	fail := func(detail string) (string, bool, error) {
		return "", false, &Error{Host: name, Err: ErrBadHost, Detail: detail}
	}
	switch {
	case n == "":
		return fail("no name")
	case len(n) > MaxNameLen:
		return fail("name longer than 253 characters")
	}
	last := ""
	for rest := n; ; {
		label, after, more := strings.Cut(rest, ".")
		if d := checkLabel(label, !more); d != "" {
			return fail(d)
		}
		if !more {
			last = label
			break
		}
		rest = after
	}
	if isDigits(last) {
		if !isDottedQuad(n) {
			return fail("numeric top-level label (not a name, nor an IPv4 address in dotted-quad form)")
		}
		return n, true, nil
	}
	return n, false, nil
}

// NormalizeZone validates a zone ("nyud.net", "NYUD.net.", ".nyud.net")
// and returns it lower case without leading or trailing dot. A zone needs
// labels as an origin's and a last label that is not all digits; errors
// are *Error wrapping ErrBadZone.
func NormalizeZone(zone string) (string, error) {
	z := trimDots(lowerASCII(zone))
	detail := ""
	if z == "" {
		detail = "empty"
	} else {
		detail = checkName(z, false)
	}
	if detail != "" {
		return "", &Error{Host: zone, Err: ErrBadZone, Detail: detail}
	}
	return z, nil
}

// ParseHost splits a Coralized Host header value into the origin it
// names, as the proxy does. Errors are *Error wrapping ErrNotCoralized,
// ErrLoop, ErrBadHost or ErrBadZone (Host is then the zone); the rules are
// in the package documentation.
func ParseHost(host, zone string) (Origin, error) {
	z, err := NormalizeZone(zone)
	if err != nil {
		return Origin{}, err
	}
	fail := func(e error, detail string) (Origin, error) {
		return Origin{}, &Error{Host: host, Err: e, Detail: detail}
	}
	if len(host) > MaxHostHeader {
		return fail(ErrBadHost, "host header too long")
	}
	name, detail, e := stripProxyPort(host)
	if e != nil {
		return fail(e, detail)
	}
	name = strings.TrimSuffix(lowerASCII(name), ".")
	if name == z {
		return fail(ErrBadHost, "no origin before the zone")
	}
	rest, ok := strings.CutSuffix(name, "."+z)
	if !ok {
		return fail(ErrNotCoralized, "")
	}
	o, detail, e := Zones{z}.parseOrigin(rest)
	if e != nil {
		return fail(e, detail)
	}
	return o, nil
}

// Coralize builds the Coralized host name for an origin: its host, then
// the port as a label unless it is 0, then the zone (normalized as by
// NormalizeZone, or used as given if invalid). It is the inverse of
// ParseHost.
func Coralize(o Origin, zone string) string {
	if z, err := NormalizeZone(zone); err == nil {
		zone = z
	}
	h := o.Host
	if o.Port != 0 {
		h += "." + strconv.Itoa(o.Port)
	}
	return h + "." + zone
}

// CoralizeOneLabel builds the one-label Coralized host name for an
// origin: its host and port label as in the dotted form, with every '-'
// doubled and then every '.' turned into '-', then the zone. An origin
// that needs more than 63 characters so cannot be written in one label
// (ErrBadHost); the dotted form (Coralize) still can.
func CoralizeOneLabel(o Origin, zone string) (string, error) {
	if z, err := NormalizeZone(zone); err == nil {
		zone = z
	}
	part := o.Host
	if o.Port != 0 {
		part += "." + strconv.Itoa(o.Port)
	}
	label := strings.ReplaceAll(strings.ReplaceAll(part, "-", "--"), ".", "-")
	if len(label) > MaxLabelLen {
		return "", &Error{Host: part, Err: ErrBadHost, Detail: "longer than 63 characters in one label; use the dotted form"}
	}
	return label + "." + zone, nil
}

// decodeOneLabel turns a one-label origin part back into the dotted form:
// "--" is a '-', any other '-' a '.'. A valid origin has only one
// encoding, since no label of it starts or ends with '-'; a label that
// would (from "---", say) decodes to a name the checks refuse.
func decodeOneLabel(label string) string {
	var b strings.Builder
	b.Grow(len(label))
	for i := 0; i < len(label); i++ {
		switch {
		case label[i] != '-':
			b.WriteByte(label[i])
		case i+1 < len(label) && label[i+1] == '-':
			b.WriteByte('-')
			i++
		default:
			b.WriteByte('.')
		}
	}
	return b.String()
}

// CarriesZone reports whether zone (normalized as by NormalizeZone; false
// if it is invalid) occurs in host on label boundaries.
func CarriesZone(host, zone string) bool {
	z, err := NormalizeZone(zone)
	if err != nil {
		return false
	}
	return Zones{z}.Carried(host)
}

// stripProxyPort removes the proxy's own ":port" from a Host header value
// and refuses IPv6 literals; err is a sentinel, detail says why.
func stripProxyPort(host string) (name, detail string, err error) {
	if host == "" {
		return "", "empty host", ErrNotCoralized
	}
	if host[0] == '[' {
		end := strings.IndexByte(host, ']')
		if end < 0 {
			return "", "unterminated IPv6 literal", ErrBadHost
		}
		if _, err := netip.ParseAddr(host[1:end]); err != nil || !strings.Contains(host[1:end], ":") {
			return "", "bad IPv6 literal", ErrBadHost
		}
		if after := host[end+1:]; after != "" && (after[0] != ':' || !validPortDigits(after[1:])) {
			return "", "bad port", ErrBadHost
		}
		return "", "IP literal", ErrNotCoralized
	}
	name, port, found := strings.Cut(host, ":")
	if !found {
		return host, "", nil
	}
	if strings.IndexByte(port, ':') >= 0 {
		return "", "unbracketed IPv6 literal", ErrBadHost
	}
	if !validPortDigits(port) {
		return "", "bad port", ErrBadHost
	}
	return name, "", nil
}
