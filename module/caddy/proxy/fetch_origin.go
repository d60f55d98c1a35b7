package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/coralcdn/coral/coralname"
)

// fetchFromOriginWith gets the object from the origin server, adjust (if
// not nil) changing the request header (validators for a revalidation,
// the neutral fields). When the origin redirects to the https form of the
// same URL, the proxy follows that itself (verifying the certificate)
// instead of handing the redirect to the client, which would loop through
// the Coralized name (httpsupgrade.go).
func (p *Proxy) fetchFromOriginWith(ctx context.Context, fr fetchRequest, adjust func(http.Header)) (*http.Response, error) {
	ctx, addrBusy := p.countOriginAddr(ctx, fr.target.Host)
	plain := fr.originURL()
	u := plain
	if u.Scheme == "http" && p.httpsUpgrades.upgraded(plain) {
		u = fr.httpsURL()
	}
	for range 2 {
		ep := endpoint(u)
		if down, until := p.failures.down(ep); down {
			p.metrics.OriginFetch(OutcomeBackoff)
			return nil, fmt.Errorf("origin %s unreachable; not retrying before %s", ep, until.Format(time.RFC3339))
		}
		h := originRequestHeader(fr.forwarded(), fr.clientIP, p.userAgent)
		if adjust != nil {
			adjust(h)
		}
		resp, err := p.origin.Do(newGet(ctx, u, h))
		if tr, ok := p.origin.Transport.(*http.Transport); ok && refusedTransferCoding(err) {
			// Valid HTTP/1.1 that net/http does not take: see
			// transfercoding.go.
			resp, err = fetchTransferCoded(ctx, tr, newGet(ctx, u, h), p.originTimeout, p.maxObject)
		}
		if err == nil {
			if err = checkHeadFields(resp.Header); err != nil {
				resp.Body.Close()
				resp = nil
			}
		}
		status := 0
		if err == nil {
			status = resp.StatusCode
		}
		if busy := addrBusy(); err != nil && busy != nil {
			err = busy
		}
		p.metrics.OriginFetch(fetchOutcome(status, err))
		if err != nil {
			if isConnectFailure(err) && !errors.Is(err, errOriginForbidden) {
				p.failures.failed(ep)
			}
			if u != plain && ctx.Err() == nil {
				// The https the URL was upgraded to does not work: ask
				// over plain http again next time.
				p.httpsUpgrades.forget(plain)
			}
			return nil, err
		}
		p.failures.succeeded(ep)
		if u.Scheme == "http" && isRedirect(resp.StatusCode) && redirectsToHTTPS(u, resp) {
			resp.Body.Close()
			p.httpsUpgrades.record(u)
			u = fr.httpsURL()
			continue
		}
		return resp, nil
	}
	return nil, errors.New("origin redirected in a loop")
}

// httpsURL is the origin URL over https on port 443.
func (fr *fetchRequest) httpsURL() *url.URL {
	t := fr.target
	t.Scheme, t.Port = "https", 0
	return t.OriginURL()
}

// newGet is a GET request for u with header h, built from the URL as is
// (no string round trip).
func newGet(ctx context.Context, u *url.URL, h http.Header) *http.Request {
	req := &http.Request{Method: http.MethodGet, URL: u, Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1, Header: h, Host: u.Host}
	return req.WithContext(ctx)
}

func isRedirect(code int) bool {
	switch code {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

// coralizeRedirect rewrites an absolute redirect to the origin's own host
// into its Coralized form, so the client stays on Coral. A redirect that
// would come back to the very URL being fetched (a loop through the
// Coralized name) keeps the origin's Location, which takes the client to
// the origin directly, and is not cached: loop reports it.
func (p *Proxy) coralizeRedirect(fr fetchRequest, resp *http.Response) (loop bool) {
	if !isRedirect(resp.StatusCode) || p.zone == "" {
		return false
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || !loc.IsAbs() || loc.Opaque != "" || loc.User != nil ||
		(loc.Scheme != "http" && loc.Scheme != "https") || !strings.EqualFold(loc.Hostname(), fr.target.Host) {
		return false
	}
	port, ok := coralname.URLPort(loc)
	if !ok {
		return false
	}
	to := target{Host: fr.target.Host, Port: port, Scheme: "http", Path: loc.EscapedPath(), RawQuery: loc.RawQuery}
	if to.Key() == fr.target.Key() {
		return true
	}
	coral := to.OriginURL()
	coral.Host = to.CoralHost(p.zone)
	coral.Fragment, coral.RawFragment = loc.Fragment, loc.RawFragment
	resp.Header.Set("Location", coral.String())
	return false
}
