package proxy

import (
	"net"
	"net/http"
	"net/url"
	"strconv"

	"github.com/coralcdn/coral/coralname"
)

// HTTPS for clients. A wildcard certificate for the zone covers one label
// below it, so only one-label names (www-example-com.nyud.net) can be
// served over TLS; dotted names (www.example.com.nyud.net) stay on http.
// Both name one object: the form is the client's, not the cache's.

// redirectToHTTPS answers a plain-HTTP request for a one-label name with
// 308 to the same URL over https (https_redirect). The Location is built
// from the parsed request with net/url: the canonical one-label name, the
// configured port, the path and query as received.
func (p *Proxy) redirectToHTTPS(w http.ResponseWriter, r *http.Request, t target) error {
	host, err := coralname.CoralizeOneLabel(coralname.Origin{Host: t.Host, Port: t.Port}, p.zone)
	if err != nil {
		// It arrived in one label, so it fits in one: unreachable.
		return err
	}
	if port := p.httpsPort; port != 443 {
		host = net.JoinHostPort(host, strconv.Itoa(port))
	}
	u := url.URL{Scheme: "https", Host: host, Path: r.URL.Path, RawPath: r.URL.RawPath, RawQuery: r.URL.RawQuery}
	w.Header().Set("Location", u.String())
	w.WriteHeader(http.StatusPermanentRedirect)
	return nil
}

// localizeLocation rewrites a redirect's Location that names a Coralized
// URL in the dotted form into the request's form: a cached redirect is
// shared by every client of the object, and one that came in over https
// in one label must not be sent to a dotted http name (a downgrade, and a
// name its certificate does not cover). Only Locations on this zone
// change; a name that does not fit in one label stays dotted.
func (p *Proxy) localizeLocation(hdr http.Header, r *http.Request) {
	locs := hdr["Location"]
	if len(locs) != 1 {
		return
	}
	req, err := coralname.ParseHost(r.Host, p.zone)
	if err != nil || !req.OneLabel {
		return
	}
	loc, err := url.Parse(locs[0])
	if err != nil || !loc.IsAbs() || loc.Opaque != "" || loc.User != nil || loc.Port() != "" {
		return
	}
	o, err := coralname.ParseHost(loc.Host, p.zone)
	if err != nil || o.OneLabel {
		return
	}
	one, err := coralname.CoralizeOneLabel(o, p.zone)
	if err != nil {
		return
	}
	if _, port, err := net.SplitHostPort(r.Host); err == nil {
		one = net.JoinHostPort(one, port)
	}
	loc.Host = one
	loc.Scheme = "http"
	if r.TLS != nil {
		loc.Scheme = "https"
	}
	hdr["Location"] = []string{loc.String()}
}
