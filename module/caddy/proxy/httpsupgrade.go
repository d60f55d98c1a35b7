package proxy

import (
	"net/http"
	"net/url"
	"strings"
	"time"
)

// Origins that moved to https answer the proxy's plain-http GET with a
// redirect to the https form of the URL. The proxy follows such a redirect
// itself (verifying the certificate) rather than hand it to the client,
// which would loop through the Coralized name, and remembers it so that
// later fetches go to https at once.
//
// What one path of a host answers must not decide for the others: on a
// shared host (/~alice/, /~mallory/) one user's redirect says nothing
// about another's pages, and a host switched to https wrongly answers
// every URL with 502. So:
//
//   - only a redirect to the very same URL with scheme https on port 443
//     counts (a redirect elsewhere, another port included, is relayed to
//     the client like any redirect);
//   - the upgrade is remembered for that URL, and for the whole host only
//     once URLs under at least httpsHostEvidence different first path
//     segments have redirected so (one user's directory is one segment);
//   - all of it is forgotten after httpsUpgradeMemory, and at once when a
//     fetch over the remembered https fails.

const (
	// httpsUpgradeMemory is how long an upgrade is remembered: long enough
	// that a site that moved costs one redirect per hour, not one per
	// request; short enough that a wrong or withdrawn one heals itself.
	httpsUpgradeMemory = time.Hour
	// httpsHostEvidence is how many different first path segments must
	// have redirected before a whole host is fetched over https.
	httpsHostEvidence = 2
)

// httpsUpgrades remembers origins and URLs that redirected to https.
type httpsUpgrades struct {
	urls  *boundedMap[time.Time]   // endpoint and request URI → until when
	hosts *boundedMap[hostUpgrade] // endpoint (host and http port) → evidence
}

// hostUpgrade is the evidence that a whole host moved to https: the first
// path segments of the URLs that redirected, and when it expires.
type hostUpgrade struct {
	segments []string
	until    time.Time
}

func newHTTPSUpgrades(maxEntries int) *httpsUpgrades {
	return &httpsUpgrades{urls: newBoundedMap[time.Time](maxEntries), hosts: newBoundedMap[hostUpgrade](maxEntries)}
}

// upgradeKey names one URL of an endpoint.
func upgradeKey(u *url.URL) string { return endpoint(u) + " " + u.RequestURI() }

// firstSegment is the first segment of u's path: "~alice" for
// "/~alice/x", "" for "/".
func firstSegment(u *url.URL) string {
	p := strings.TrimPrefix(u.EscapedPath(), "/")
	seg, _, _ := strings.Cut(p, "/")
	return seg
}

// upgraded reports whether the plain-http URL u is to be fetched over
// https: u itself, or its whole host, redirected there.
func (h *httpsUpgrades) upgraded(u *url.URL) bool {
	now := time.Now()
	if until, ok := h.urls.get(upgradeKey(u)); ok && now.Before(until) {
		return true
	}
	hu, ok := h.hosts.get(endpoint(u))
	return ok && now.Before(hu.until) && len(hu.segments) >= httpsHostEvidence
}

// record notes that the plain-http URL u redirected to its https form.
func (h *httpsUpgrades) record(u *url.URL) {
	until := time.Now().Add(httpsUpgradeMemory)
	h.urls.put(upgradeKey(u), until)
	seg := firstSegment(u)
	h.hosts.update(endpoint(u), func(hu hostUpgrade, ok bool) hostUpgrade {
		if !ok || !time.Now().Before(hu.until) {
			hu = hostUpgrade{}
		}
		for _, s := range hu.segments {
			if s == seg {
				return hu
			}
		}
		if len(hu.segments) < httpsHostEvidence {
			hu.segments = append(append([]string(nil), hu.segments...), seg)
		}
		hu.until = until
		return hu
	})
}

// forget drops what is remembered about u and its host: a fetch over the
// https they were upgraded to failed.
func (h *httpsUpgrades) forget(u *url.URL) {
	h.urls.delete(upgradeKey(u))
	h.hosts.delete(endpoint(u))
}

// redirectsToHTTPS reports whether resp, the answer to a GET of the
// plain-http URL u, redirects to the same URL (host and request target)
// with scheme https on port 443.
func redirectsToHTTPS(u *url.URL, resp *http.Response) bool {
	loc, err := resp.Location()
	if err != nil || !strings.EqualFold(loc.Scheme, "https") || loc.User != nil ||
		!strings.EqualFold(loc.Hostname(), u.Hostname()) || loc.RequestURI() != u.RequestURI() {
		return false
	}
	return loc.Port() == "" || loc.Port() == "443"
}
