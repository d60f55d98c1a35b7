package proxy

// The Coralized request: the origin resource a request names. The host
// grammar, the cache key and the origin URL are package coralname's, the
// contract both servers share; this file holds what only the proxy needs:
// the parsed target, the HTTP status for a refused host, and IP-literal
// origins for the address policy.

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"

	"github.com/coralcdn/coral/coralname"
)

// statusForHostError suggests the HTTP status for an error from
// parseTarget (coralname's sentinels): 421 Misdirected Request for
// ErrNotCoralized, 403 Forbidden for ErrLoop, 500 for ErrBadZone (a
// configuration error), and 400 Bad Request for ErrBadHost and anything
// else.
func statusForHostError(err error) int {
	switch {
	case errors.Is(err, coralname.ErrNotCoralized):
		return http.StatusMisdirectedRequest
	case errors.Is(err, coralname.ErrLoop):
		return http.StatusForbidden
	case errors.Is(err, coralname.ErrBadZone):
		return http.StatusInternalServerError
	default:
		return http.StatusBadRequest
	}
}

// target is a parsed Coralized request: the origin resource it names.
type target struct {
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

// parseTarget parses a Coralized request: host is the Host header, zone the
// alias zone, path the escaped request path and rawQuery its query. The
// scheme is "http", as Coralized URLs are. Errors wrap a
// *coralname.Error.
func parseTarget(host, zone, path, rawQuery string) (target, error) {
	o, err := coralname.ParseHost(host, zone)
	if err != nil {
		return target{}, fmt.Errorf("coral_proxy: %w", err)
	}
	return target{Host: o.Host, Port: o.Port, Scheme: "http", Path: path, RawQuery: rawQuery, OneLabel: o.OneLabel}, nil
}

// Key is coralname.CacheKey of t: the object's key in the cache and the
// DSHT.
func (t target) Key() string {
	return coralname.CacheKey(t.Scheme, t.Host, t.Port, t.Path, t.RawQuery)
}

// OriginURL is coralname.OriginURL of t: the absolute URL to fetch from
// the origin, the one Key is computed from.
func (t target) OriginURL() *url.URL {
	return coralname.OriginURL(t.Scheme, t.Host, t.Port, t.Path, t.RawQuery)
}

// CoralHost is the Coralized host name for t under zone
// (coralname.Coralize): what keeps an absolute redirect to the same origin
// Coralized.
func (t target) CoralHost(zone string) string {
	return coralname.Coralize(coralname.Origin{Host: t.Host, Port: t.Port}, zone)
}

// ipLiteral reports whether origin is an IP literal, and which. Origins
// coralname parses can only be IPv4; the proxy must apply its policy on
// private, loopback and other special addresses to them.
func ipLiteral(origin string) (netip.Addr, bool) {
	a, err := netip.ParseAddr(origin)
	if err != nil {
		return netip.Addr{}, false
	}
	return a, true
}
