package proxy

// Admission, the request path's first phase: whether a request is one to
// serve, and what it asks for. A 403 says why in its body
// (refuseWithBody), and the abuse controls' refusals say it to peers in
// Cache-Status.

import (
	"errors"
	"fmt"
	"math"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/abuse"
	"github.com/coralcdn/coral/module/caddy/httpcache"
	"go.uber.org/zap"
)

// admit decides whether the request is one to serve, in this order: a
// Coralized target (else 421, 400 or 403), a one-label name over http
// (308 to https with https_redirect), the method (405), the ACME
// challenge path (403), the origin's address (403), the abuse controls
// (403, 429 or a redirect to the origin), credentials (403). done says
// the request has been answered (err is then what to return); otherwise
// admit has filled in fr, the fetch the request asks for.
func (p *Proxy) admit(w *bodyCounter, r *http.Request, acct *requestAccount, fr *fetchRequest) (done bool, err error) {
	var pt *parsedTarget
	path, err := requestPath(r)
	if err == nil {
		pt, err = p.targets.parse(r.Host, p.zone, path, r.URL.RawQuery)
	}
	if err != nil {
		return true, p.targetRefused(r, err)
	}
	if done, err := p.refuseTarget(w, r, acct, pt); done {
		return true, err
	}
	target := pt.target
	p.learnPeerAddr(r)
	// Field by field: a composite literal is built in a temporary of the
	// frame first.
	fr.key, fr.baseKey, fr.target, fr.scheme = pt.key, pt.key, target, p.scheme
	fr.header, fr.allow, fr.clientIP = r.Header, p.forward, clientIP(r)
	fr.clientAddr = p.clientAddr(r)
	fr.onlyIfCached = httpcache.ParseRequestCacheControl(r.Header).OnlyIfCached
	if refused, err := admitAbuse(p.abuse, w, r, target.Host, fr.clientAddr, fr.onlyIfCached, func() string { return fr.originURL().String() }); refused {
		return true, p.refuseWithBody(w, err)
	}
	if _, ok := r.Header["Authorization"]; ok {
		// Coral serves public content: credentials are never forwarded,
		// and a cache must not answer an authorized request from a copy
		// fetched without them (RFC 9111 §3.5).
		return true, authorizationRefused(fr)
	}
	chargeAbuse(p.abuse, w, target.Host)
	return false, nil
}

// errBadTarget is the cause of a 400 for a request target that is neither
// origin-form nor the absolute form of a Coralized http(s) URL.
var errBadTarget = errors.New("coral_proxy: request target must be a path (/…) or a Coralized http URL")

// requestPath checks the form of r's target (errBadTarget) and returns its
// escaped path. The host is taken from r.Host (which net/http takes from
// an absolute-form target, ignoring the Host field, as RFC 9112 §3.2.2
// requires) and parsed by admit, through its target cache.
func requestPath(r *http.Request) (string, error) {
	u := r.URL
	bad := func(detail string) (string, error) {
		return "", fmt.Errorf("%w: %s", errBadTarget, detail)
	}
	if u == nil {
		return bad("no URL")
	}
	raw := r.RequestURI
	absolute := hasPrefixFold(raw, "http://") || hasPrefixFold(raw, "https://")
	switch {
	case u.Opaque != "":
		return bad("opaque target " + quoteTarget(raw))
	case u.User != nil:
		return bad("user information in the target")
	case raw != "" && raw[0] != '/' && !absolute:
		return bad("target " + quoteTarget(raw) + " is neither origin-form nor absolute-form")
	case u.Scheme != "" && !strings.EqualFold(u.Scheme, "http") && !strings.EqualFold(u.Scheme, "https"):
		return bad("scheme " + quoteTarget(u.Scheme))
	case u.Scheme == "" && u.Host != "":
		return bad("target with a host but no scheme")
	}
	path := u.EscapedPath()
	if path != "" && path[0] != '/' {
		return bad("path " + quoteTarget(path) + " does not start with '/'")
	}
	return path, nil
}

// hasPrefixFold is strings.HasPrefix ignoring ASCII case.
func hasPrefixFold(s, prefix string) bool {
	return len(s) >= len(prefix) && strings.EqualFold(s[:len(prefix)], prefix)
}

// quoteTarget quotes a piece of a hostile request for an error message,
// shortened so that a long target cannot flood the log.
func quoteTarget(s string) string {
	const max = 200
	if len(s) > max {
		s = s[:max] + "…"
	}
	return fmt.Sprintf("%q", s)
}

// targetRefused is the error for a request whose target admit could not
// parse. Refusals live outside admit so that a hit's frames stay small
// (see ServeHTTP).
func (p *Proxy) targetRefused(r *http.Request, err error) error {
	switch {
	case errors.Is(err, coralname.ErrNotCoralized):
		return statusError(http.StatusMisdirectedRequest,
			fmt.Errorf("this Coral proxy serves only host names ending in .%s (Coralized URLs); %q is not one: %w", strings.TrimSuffix(p.zone, "."), r.Host, coralname.ErrNotCoralized))
	case errors.Is(err, errBadTarget):
		return statusError(http.StatusBadRequest, err)
	}
	return statusError(statusForHostError(err), err)
}

// refuseTarget answers a parsed request that is not one to serve: a
// one-label name over http with https_redirect (308), a method other than
// GET and HEAD (405), the ACME challenge path (403), an origin address the
// guard forbids (403). done says it answered.
func (p *Proxy) refuseTarget(w *bodyCounter, r *http.Request, acct *requestAccount, pt *parsedTarget) (done bool, err error) {
	if p.httpsPort != 0 && r.TLS == nil && pt.target.OneLabel {
		acct.set(CacheRedirect, "none")
		return true, p.redirectToHTTPS(w, r, pt.target)
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		return true, statusError(http.StatusMethodNotAllowed, fmt.Errorf("coral_proxy serves GET and HEAD only"))
	}
	if pt.acmeChallenge {
		return true, statusError(http.StatusForbidden, errACMEChallenge)
	}
	if pt.namesAddress && !p.guard.permitted(pt.originAddr) {
		return true, p.refuseWithBody(w, statusError(http.StatusForbidden, fmt.Errorf("origin %s: %w", pt.target.Host, errOriginForbidden)))
	}
	return false, nil
}

// HTTPS for clients. A wildcard certificate for the zone covers one label
// below it, so only one-label names (www-example-com.nyud.net) can be
// served over TLS; dotted names (www.example.com.nyud.net) stay on http.
// Both name one object: the form is the client's, not the cache's
// (localizeLocation in respond.go).

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

// acmeChallengePath is where ACME HTTP-01 validation looks (RFC 8555
// §8.3).
const acmeChallengePath = "/.well-known/acme-challenge"

// errACMEChallenge is why a request for acmeChallengePath under a
// Coralized name is refused: relayed from the origin, it would let
// whoever runs the origin validate the Coralized name (a name inside the
// operator's zone) with a CA, and get a certificate for it. The proxy's
// own certificates are validated over DNS (DNS-01), never through here.
var errACMEChallenge = errors.New("coral_proxy: ACME HTTP-01 challenges (" + acmeChallengePath + "/) are not relayed for Coralized names")

// mayNameACMEChallenge is false for a request path that cannot normalize
// to the ACME challenge path: one with neither an escape nor "well-known"
// in any case. It spares a hit building the origin URL just to check.
func mayNameACMEChallenge(p string) bool {
	if strings.IndexByte(p, '%') >= 0 {
		return true
	}
	const word = "well-known"
	for i := 0; i+len(word) <= len(p); i++ {
		if strings.EqualFold(p[i:i+len(word)], word) {
			return true
		}
	}
	return false
}

// isACMEChallenge reports whether p, the path fetched from the origin
// (normalized and unescaped, so neither dot segments nor escapes hide it),
// is under acmeChallengePath, in any letter case (some origin servers
// match paths without case).
func isACMEChallenge(p string) bool {
	return len(p) >= len(acmeChallengePath) && strings.EqualFold(p[:len(acmeChallengePath)], acmeChallengePath) &&
		(len(p) == len(acmeChallengePath) || p[len(acmeChallengePath)] == '/')
}

// learnPeerAddr fills in this proxy's HTTP address from the first request:
// the node's IP and the port the request came in on.
func (p *Proxy) learnPeerAddr(r *http.Request) {
	if p.peerAddr.Load() != nil || r.TLS != nil {
		// Learnt already (every request after the first asks only
		// this), or TLS: peers speak plain HTTP, so a port that answers
		// with TLS is not their way in.
		return
	}
	node := p.dhtNode()
	if node == nil {
		return
	}
	la, ok := r.Context().Value(http.LocalAddrContextKey).(net.Addr)
	if !ok {
		return
	}
	lap, err := netip.ParseAddrPort(la.String())
	if err != nil {
		return
	}
	ip := node.Addr().Addr()
	ap := netip.AddrPortFrom(ip, lap.Port())
	p.peerAddr.CompareAndSwap(nil, &ap)
}

// clientIP is the address r came from, as X-Forwarded-For tells origins.
func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// admitAbuse asks a (nil: no controls) whether a Coralized request may be
// served. origin is the origin host (from parseTarget), client the
// client's address (Config.ClientAddr), fromPeer whether the request
// carries only-if-cached (a peer's), and originURL returns the absolute
// URL of the object at the origin (called only for a refusal or a
// redirect, so a request that is admitted does not pay for building it).
// When done is true the request has been answered or refused and
// ServeHTTP should return err: an *Error for a refusal, nil after a
// redirect has been written. A peer's refusal says why in Cache-Status.
func admitAbuse(a Abuse, w http.ResponseWriter, r *http.Request, origin string, client netip.Addr, fromPeer bool, originURL func() string) (done bool, err error) {
	if a == nil {
		return false, nil
	}
	ref := a.Admit(origin, client, fromPeer)
	switch {
	case ref == nil:
		return false, nil
	case ref.Status == http.StatusFound:
		loc, err := abuse.NoServeRedirect(originURL())
		if err != nil {
			return true, statusError(http.StatusInternalServerError, fmt.Errorf("%w; and the origin URL %q: %v", abuse.ErrOverBudget, originURL(), err))
		}
		// The redirect lasts only as long as the budget is exhausted.
		w.Header().Set("Cache-Control", "no-store")
		http.Redirect(w, r, loc, http.StatusFound)
		return true, nil
	}
	if fromPeer {
		w.Header().Set("Cache-Status", notCachedHeaderValue(ref.Detail))
	}
	if ref.RetryAfter > 0 {
		w.Header().Set("Retry-After", retryAfterSeconds(ref.RetryAfter))
	}
	return true, statusError(ref.Status, ref.Err(originURL))
}

// chargeAbuse makes w add the body bytes written through it to the
// bandwidth budget of a, if there is one, for origin (the origin host).
func chargeAbuse(a Abuse, w *bodyCounter, origin string) {
	if a != nil {
		w.charge = a.Charger(origin)
	}
}

// retryAfterSeconds is d as a Retry-After value: whole seconds, rounded
// up, at least 1.
func retryAfterSeconds(d time.Duration) string {
	s := int64(math.Ceil(d.Seconds()))
	return strconv.FormatInt(max(s, 1), 10)
}

// refuseWithBody answers a 403 Error with a short plain-text body
// saying why, logs it (rate-limited) and returns nil; other errors are
// returned as they are.
func (p *Proxy) refuseWithBody(w http.ResponseWriter, err error) error {
	var he *Error
	if !errors.As(err, &he) || he.Status != http.StatusForbidden {
		return err
	}
	cause, msg := "", ""
	switch {
	case errors.Is(err, errOriginForbidden):
		cause, msg = causeOrigin, "refused an origin on an address allow_origins does not permit (private, loopback or this node's own)"
	case errors.Is(err, abuse.ErrBlacklisted):
		cause, msg = causeBlacklist, "refused an origin on the blacklist"
	}
	if cause != "" {
		logRefusal(p.logger, cause, msg, zap.Error(err))
	}
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	w.Header().Set("X-Content-Type-Options", "nosniff")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(http.StatusForbidden)
	_, _ = fmt.Fprintf(w, "403 Forbidden: %v\n", he.Err)
	return nil
}

func authorizationRefused(fr *fetchRequest) error {
	return statusError(http.StatusForbidden, fmt.Errorf("%w; fetch %s directly", errAuthorization, fr.originURL()))
}

// errAuthorization is why a request with credentials is refused.
var errAuthorization = errors.New("coral_proxy: Coral serves public content and never forwards credentials (Authorization)")
