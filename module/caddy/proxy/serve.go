package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/httpcache"
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
	chargeAbuse(p.abuse, w)
	return false, nil
}

func authorizationRefused(fr *fetchRequest) error {
	return statusError(http.StatusForbidden, fmt.Errorf("%w; fetch %s directly", errAuthorization, fr.originURL()))
}

// targetRefused is the error for a request whose target admit could not
// parse. Refusals live outside admit so that a hit's frames stay small
// (see ServeHTTP).
func (p *Proxy) targetRefused(r *http.Request, err error) error {
	switch {
	case errors.Is(err, coralname.ErrNotCoralized):
		return statusError(http.StatusMisdirectedRequest,
			fmt.Errorf("this Coral proxy serves only host names ending in .%s (Coralized URLs); %q is not one", strings.TrimSuffix(p.zone, "."), r.Host))
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

// serveMissing serves a request whose object is not stored.
func (p *Proxy) serveMissing(w http.ResponseWriter, r *http.Request, fr *fetchRequest, acct *requestAccount) error {
	if fr.onlyIfCached {
		return p.serveOnlyIfCached(w, r, *fr, acct)
	}
	return p.download(w, r, *fr, acct)
}

// serveFound serves a request whose object is stored (rd): fresh (a hit,
// kept to the fewest and smallest frames: see ServeHTTP), or else
// serveNotFresh.
func (p *Proxy) serveFound(w http.ResponseWriter, r *http.Request, fr *fetchRequest, rd *diskcache.Reader, acct *requestAccount) error {
	if now := time.Now(); rd.Complete() && now.Before(rd.Meta().Expires) {
		p.refs.touch(fr.baseKey)
		acct.set(CacheHit, "local")
		return p.serveStored(w, r, rd, CacheHit, "local", fr.onlyIfCached, now)
	}
	return p.serveNotFresh(w, r, fr, rd, acct)
}

// serveNotFresh serves a request whose object is stored (rd) but is not a
// plain hit: being downloaded, or stale (revalidated, or served meanwhile
// within stale-while-revalidate).
func (p *Proxy) serveNotFresh(w http.ResponseWriter, r *http.Request, fr *fetchRequest, rd *diskcache.Reader, acct *requestAccount) error {
	onlyIfCached := fr.onlyIfCached
	m := rd.Meta()
	if !rd.Complete() {
		if time.Now().Before(m.Expires) {
			// Being downloaded right now: join it, and hold it while
			// reading (a peer streaming it too: see letGo).
			d := p.holdInflight(fr.key, true)
			defer p.letGo(d)
			acct.set(CacheCollapsed, m.Extra["source"])
			return p.serveStored(w, r, rd, CacheCollapsed, m.Extra["source"], onlyIfCached, time.Now())
		}
		// Being downloaded, but stale as it arrives (max-age=0, an
		// Age beyond its lifetime): it answers the request that
		// fetched it and may not be reused for another (RFC 9111
		// §4), not even one that comes while it downloads.
		rd.Close()
		if onlyIfCached {
			return notCached(w, "stale")
		}
		acct.set(CacheMiss, "origin")
		return p.fetchOwn(w, r, *fr, acct)
	}
	// Complete and not fresh (serveFound): stale.
	if onlyIfCached {
		// Stale, and the client (a peer, usually) wants no origin
		// contact: RFC 9111 §5.2.1.7.
		rd.Close()
		return notCached(w, "stale")
	}
	// Stale: revalidate with the origin. Within stale-while-
	// revalidate the stale copy is served at once meanwhile: the one
	// already open, so that the new version the refresh may create
	// before this request reads is not served in its place.
	stale := m // a copy: taking m's address would move it to the heap for the collapsed joiners above too
	fr.stale = &stale
	if swr, _ := httpcache.StaleWindows(m.Header); time.Since(m.Expires) < swr {
		// In the background, if a download slot is free now.
		_, _, _ = p.startDownload(context.WithoutCancel(r.Context()), *fr, 0, false)
		acct.set(CacheStaleWhileRevalidate, "local")
		return p.serveStored(w, r, rd, CacheStaleWhileRevalidate, "local", onlyIfCached, time.Now())
	}
	rd.Close()
	return p.download(w, r, *fr, acct)
}

// serveOnlyIfCached answers an only-if-cached request (a peer's, or a
// client's) for an object not stored: a download under way here still
// counts, so it waits for one, a little; else 504. The bound breaks the
// rare cycle of two proxies each waiting on the other. A download that
// lost its peer and waits to retry has nothing to give: 504 at once, also
// to the requests already waiting for it (refetch.go).
func (p *Proxy) serveOnlyIfCached(w http.ResponseWriter, r *http.Request, fr fetchRequest, acct *requestAccount) error {
	if d := p.holdInflight(fr.key, true); d != nil {
		defer p.letGo(d)
		retrying, lost := d.peerRetry.state()
		if retrying {
			return notCached(w, peerRetryingDetail)
		}
		t := time.NewTimer(p.peerTimeout)
		defer t.Stop()
		select {
		case <-lost:
			return notCached(w, peerRetryingDetail)
		case <-d.ready:
			if d.err == nil && d.direct == nil {
				if rd, ok := p.lookup(r.Context(), &fr); ok && (!rd.Complete() || time.Now().Before(rd.Meta().Expires)) {
					acct.set(CacheCollapsed, d.source)
					return p.serveStored(w, r, rd, CacheCollapsed, d.source, true, time.Now())
				} else if ok {
					rd.Close()
				}
			}
		case <-t.C:
		case <-r.Context().Done():
			return r.Context().Err()
		}
	}
	return notCached(w, "only-if-cached")
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

// isACMEChallenge reports whether p, the path fetched from the origin
// (normalized and unescaped, so neither dot segments nor escapes hide it),
// is under acmeChallengePath, in any letter case (some origin servers
// match paths without case).
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

func isACMEChallenge(p string) bool {
	return len(p) >= len(acmeChallengePath) && strings.EqualFold(p[:len(acmeChallengePath)], acmeChallengePath) &&
		(len(p) == len(acmeChallengePath) || p[len(acmeChallengePath)] == '/')
}

// errAuthorization is why a request with credentials is refused.
var errAuthorization = errors.New("coral_proxy: Coral serves public content and never forwards credentials (Authorization)")

// notCached is the answer to an only-if-cached request the cache cannot
// satisfy: 504 (RFC 9111 §5.2.1.7), with why in Cache-Status.
func notCached(w http.ResponseWriter, why string) error {
	w.Header().Set("Cache-Status", notCachedHeaderValue(why))
	return statusError(http.StatusGatewayTimeout, errors.New("not in this proxy's cache (only-if-cached)"))
}

// download starts (or joins) the download for fr and serves what it
// brings, holding it meanwhile (a download nobody holds is cancelled). A
// request that finds every download slot taken for download_wait gets 503
// with Retry-After.
func (p *Proxy) download(w http.ResponseWriter, r *http.Request, fr fetchRequest, acct *requestAccount) error {
	d, started, err := p.startDownload(r.Context(), fr, p.downloadWait, true)
	if err == nil {
		defer p.letGo(d)
	}
	if errors.Is(err, errDownloadsBusy) {
		acct.set(CacheRefused, "none")
		w.Header().Set("Retry-After", retryAfterSeconds(p.downloadWait))
		return statusError(http.StatusServiceUnavailable, err)
	}
	if err != nil {
		return err
	}
	return p.afterDownload(w, r, fr, d, started, acct)
}

// fetchFailed is the answer to a request whose fetch failed: 403 when the
// origin's name led to an address the proxy may not contact (as for an
// address in the Host itself), else 502.
func fetchFailed(acct *requestAccount, err error) error {
	if errors.Is(err, errOriginForbidden) {
		acct.set(CacheRefused, "none")
		return statusError(http.StatusForbidden, err)
	}
	acct.set(CacheMiss, "none")
	return statusError(http.StatusBadGateway, err)
}

// lookup opens the stored object for fr's request: the entry under the
// URL's key or, when that entry is a Vary index, the variant the request's
// fields select. It points fr.key at the object's key, found or not, so a
// download started after a miss fills the right entry.
func (p *Proxy) lookup(ctx context.Context, fr *fetchRequest) (rd *diskcache.Reader, ok bool) {
	fr.key, fr.varyIndex, fr.view = fr.baseKey, "", nil
	rd, ok = p.store.GetContext(ctx, fr.baseKey)
	if !ok {
		return nil, false
	}
	fields := rd.Meta().Extra[varyIndexField]
	if fields == "" {
		return rd, true
	}
	rd.Close()
	fr.varyIndex = fields
	vk, vok := httpcache.VaryKey(fields, fr.forwarded())
	if !vok {
		return nil, false
	}
	fr.key = variantKey(fr.baseKey, vk)
	return p.store.GetContext(ctx, fr.key)
}

// afterDownload waits for a download (or revalidation) to have something
// to serve, and serves it.
func (p *Proxy) afterDownload(w http.ResponseWriter, r *http.Request, fr fetchRequest, d *download, started bool, acct *requestAccount) error {
	if err := awaitDownload(w, r, d, started); err != nil {
		return err
	}
	if d.revalidated || d.stale {
		rd, ok := p.lookup(r.Context(), &fr)
		if !ok {
			return statusError(http.StatusBadGateway, errors.New("the cached copy went away"))
		}
		if d.revalidated {
			acct.set(CacheRevalidated, "local")
			return p.serveStored(w, r, rd, CacheRevalidated, "local", false, time.Now())
		}
		acct.set(CacheStale, "local")
		return p.serveStored(w, r, rd, CacheStale, "local", false, time.Now())
	}
	if d.err != nil {
		return fetchFailed(acct, d.err)
	}
	status := CacheMiss
	if !started {
		status = CacheCollapsed
	}
	acct.set(status, d.source)
	if d.direct != nil {
		if !started {
			// The response may not be shared; fetch our own copy.
			return p.fetchOwn(w, r, fr, acct)
		}
		return p.serveDirect(w, r, d.direct, d.source, d.relay, d.cancelRelay)
	}
	// The object may have landed under a variant key (the response
	// varies), which lookup finds through the URL's entry.
	rd, ok := p.lookup(r.Context(), &fr)
	if ok && !started && !time.Now().Before(rd.Meta().Expires) {
		// The download this request joined brought a response that was
		// stale as it arrived: it answers the request that caused it only.
		rd.Close()
		return p.fetchOwn(w, r, fr, acct)
	}
	if !ok && !acct.retried && (!started || fr.varyIndex != "") {
		// The download this request joined failed or was dropped before
		// it could be read, or the one it started stored the variant of a
		// field the origin was not sent yet (the URL's new Vary index,
		// which lookup found, now has it sent): once it has ended, try
		// once more. A download this request started and that failed is
		// not tried again: one origin fetch per client request.
		acct.retried = true
		select {
		case <-d.done:
		case <-r.Context().Done():
			return r.Context().Err()
		}
		return p.download(w, r, fr, acct)
	}
	if !ok {
		return statusError(http.StatusBadGateway, errors.New("the download ended before the object could be read"))
	}
	return p.serveStored(w, r, rd, status, d.source, false, time.Now())
}

// awaitDownload waits until d has something to serve, relaying its
// interim responses (1xx) to the request that started it; it returns the
// request's context error if the client goes first.
func awaitDownload(w http.ResponseWriter, r *http.Request, d *download, started bool) error {
	var interim <-chan interimResponse
	if started {
		interim = d.interim // only the request that started the download gets them
	}
	var sent []string // fields of interim responses, not for the final one
	for {
		select {
		case <-d.ready:
			for _, k := range sent {
				w.Header().Del(k)
			}
			return nil
		case ir := <-interim:
			sent = writeInterim(w, ir, sent)
		case <-r.Context().Done():
			if started {
				// A response handed to this request alone would hold its
				// origin connection until read: close it when it comes.
				go func() {
					<-d.ready
					if d.direct != nil {
						d.direct.Body.Close()
					}
				}()
			}
			return r.Context().Err()
		}
	}
}

// fetchOwn fetches fr from the origin for this request alone and relays
// the response uncached: for a request that joined a download whose
// response may not be shared (no-store, private, stale as it arrived). It
// takes a download slot of its own: it is a download like any other.
func (p *Proxy) fetchOwn(w http.ResponseWriter, r *http.Request, fr fetchRequest, acct *requestAccount) error {
	if err := p.slots.acquire(r.Context(), fr.originSlot(), fr.clientKey(), p.downloadWait); err != nil {
		return fetchFailed(acct, err)
	}
	rs := p.slots.relay(fr.originSlot(), fr.clientKey())
	defer rs.end()
	ctx, cancel := context.WithCancel(r.Context())
	defer cancel()
	resp, err := p.fetchFromOrigin(ctx, fr)
	if err != nil {
		return fetchFailed(acct, err)
	}
	return p.serveDirect(w, r, resp, "origin", rs, cancel)
}

// writeInterim relays an interim response to the client: its fields are
// set for the 1xx only (sent collects their names, to be removed before
// the final response), hop-by-hop fields excluded.
func writeInterim(w http.ResponseWriter, ir interimResponse, sent []string) []string {
	hdr := w.Header()
	for _, k := range sent {
		hdr.Del(k)
	}
	sent = sent[:0]
	for k, v := range storedHeader(ir.header) {
		hdr[k] = v
		sent = append(sent, k)
	}
	w.WriteHeader(ir.status)
	return sent
}
