package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/httpcache"
)

// ServeHTTP serves a Coralized request, in the phases of the request path:
// admit (is it one to serve, and what does it ask for), lookup (the
// cache), then serveFound for a stored object or serveMissing, which
// downloads it or joins the download under way, and respond (respond.go).
// It returns an *Error for a request it refused or could not answer, and
// the request's context error when the client went away first.
//
// The fetch request is built in this frame and handed down by pointer: a
// hit's call chain copying it (and the stored metadata) by value in every
// frame made the connection's goroutine outgrow its stack, which the
// runtime then copied on every request after each garbage collection had
// shrunk it (2.6 % of a 1 KiB hit's CPU).
func (p *Proxy) ServeHTTP(w http.ResponseWriter, r *http.Request) error {
	bc := &bodyCounter{ResponseWriter: w}
	acct := &requestAccount{status: CacheRefused, source: SourceNone}
	defer func() {
		if !acct.otherSite {
			p.metrics.Request(acct.status, acct.source, bc.n)
		}
	}()
	var fr fetchRequest
	if done, err := p.admit(bc, r, acct, &fr); done {
		acct.otherSite = NotCoralized(err)
		return err
	}
	if rd, ok := p.lookup(r.Context(), &fr); ok {
		return p.serveFound(bc, r, &fr, rd, acct)
	}
	return p.serveMissing(bc, r, &fr, acct)
}

// requestAccount is what a request is counted as in the metrics.
type requestAccount struct {
	status CacheStatus
	source string
	// retried: this request already went back for a second download (the
	// one it joined vanished, or answered another request's fields).
	retried bool
	// otherSite: the host is outside the zone, a request for another
	// site, which the server may pass on (NotCoralized): counted only if
	// the refusal stands (CountNotCoralized).
	otherSite bool
}

// CountNotCoralized counts a request for a host outside the zone that
// ServeHTTP refused (NotCoralized) and that nothing else answered: the
// refusal stands. A server that passed it on to another handler does not
// call it.
func (p *Proxy) CountNotCoralized() { p.metrics.Request(CacheRefused, SourceNone, 0) }

func (a *requestAccount) set(status CacheStatus, source string) {
	a.status, a.source = status, source
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
	fr.baseMark = rd.Mark()
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

// serveFound serves a request whose object is stored (rd): fresh (a hit,
// kept to the fewest and smallest frames: see ServeHTTP), or else
// serveNotFresh.
func (p *Proxy) serveFound(w http.ResponseWriter, r *http.Request, fr *fetchRequest, rd *diskcache.Reader, acct *requestAccount) error {
	if now := time.Now(); rd.Complete() && now.Before(rd.Meta().Expires) {
		p.refs.touchFirst(fr.baseKey, fr.baseMark)
		acct.set(CacheHit, "local")
		return p.serveStored(w, r, fr, rd, CacheHit, "local", fr.onlyIfCached, now)
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
		if rangeMiss(r, fr) && m.Status == http.StatusOK {
			// Being downloaded: the range now, from the origin, rather
			// than after everything before it (rangemiss.go).
			rd.Close()
			return p.serveRangeMiss(w, r, *fr, acct, true)
		}
		if time.Now().Before(m.Expires) {
			// Being downloaded right now: join it, and hold it while
			// reading (a peer streaming it too: see letGo).
			d := p.holdInflight(fr.key, true)
			defer p.letGo(d)
			acct.set(CacheCollapsed, m.Extra["source"])
			return p.serveStored(w, r, fr, rd, CacheCollapsed, m.Extra["source"], onlyIfCached, time.Now())
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
		return p.serveStored(w, r, fr, rd, CacheStaleWhileRevalidate, "local", onlyIfCached, time.Now())
	}
	rd.Close()
	return p.download(w, r, *fr, acct)
}

// serveMissing serves a request whose object is not stored.
func (p *Proxy) serveMissing(w http.ResponseWriter, r *http.Request, fr *fetchRequest, acct *requestAccount) error {
	if fr.onlyIfCached {
		return p.serveOnlyIfCached(w, r, *fr, acct)
	}
	if rangeMiss(r, fr) {
		return p.serveRangeMiss(w, r, *fr, acct, p.inflightFor(fr.key) != nil)
	}
	fr.missing = true
	return p.download(w, r, *fr, acct)
}

// rangeMiss reports whether r is a request serveRangeMiss answers: a GET
// with one Range field of byte ranges (at most maxRangeField long: the
// origin gets nothing else of it), not a peer's (only-if-cached). Any
// other Range is not forwarded: the object is fetched whole and the
// field answered, or ignored, from it as before.
func rangeMiss(r *http.Request, fr *fetchRequest) bool {
	v := r.Header["Range"]
	return len(v) == 1 && len(v[0]) <= maxRangeField && strings.HasPrefix(v[0], "bytes=") &&
		r.Method == http.MethodGet && !fr.onlyIfCached && len(r.Header["If-Range"]) <= 1
}

// maxRangeField bounds the Range field forwarded to an origin.
const maxRangeField = 1024

// serveRangeMiss answers a range request for fr's object, which is not
// stored (or still being downloaded: then download says so and no other
// is started), from the origin: see the top of rangemiss.go.
func (p *Proxy) serveRangeMiss(w http.ResponseWriter, r *http.Request, fr fetchRequest, acct *requestAccount, downloading bool) error {
	var d *download
	if !downloading {
		// The whole object, for the cache, if a download slot is free now.
		d, _, _ = p.startDownload(context.WithoutCancel(r.Context()), fr, 0, false)
	} else {
		d = p.inflightFor(fr.key)
	}
	rangeField, ifRange := r.Header.Get("Range"), r.Header.Get("If-Range")
	resp, source := p.rangeFromPeers(r.Context(), fr, d, rangeField, ifRange)
	if resp == nil {
		acct.set(CacheMiss, "origin")
		return p.fetchOwnWith(w, r, fr, acct, func(h http.Header) {
			setRangeFields(h, rangeField, ifRange)
		}, func(resp *http.Response) { shapeRange(resp, rangeField, ifRange) })
	}
	acct.set(CacheMiss, source)
	return p.serveDirect(w, r, resp, source, nil, func() {})
}

// serveOnlyIfCached answers an only-if-cached request (a peer's, or a
// client's) for an object not stored: a download under way here still
// counts, so it waits for one, as long as the asker waits for its head
// (origin_timeout + peer_timeout: the download may be waiting on its
// origin, or on a peer that waits on its own); else 504. Two proxies whose
// downloads ask each other would wait for each other that long and then
// both go to the origin: the one with the lower address answers the
// other 504 at once (asksBack), and the other then fetches the object for
// both. A download that lost its peer and waits to retry has nothing to
// give: 504 at once, also to the requests already waiting for it
// (refetch.go).
func (p *Proxy) serveOnlyIfCached(w http.ResponseWriter, r *http.Request, fr fetchRequest, acct *requestAccount) error {
	if d := p.holdInflight(fr.key, true); d != nil {
		defer p.letGo(d)
		retrying, lost := d.peerRetry.state()
		if retrying {
			return notCached(w, peerRetryingDetail)
		}
		t := time.NewTimer(p.originTimeout + p.peerTimeout)
		defer t.Stop()
		askingKnown := d.askingKnown
	wait:
		for {
			select {
			case <-lost:
				return notCached(w, peerRetryingDetail)
			case <-askingKnown:
				askingKnown = nil
				if p.asksBack(d, r) {
					return notCached(w, "only-if-cached")
				}
			case <-d.ready:
				if d.err == nil && d.direct == nil {
					if rd, ok := p.lookup(r.Context(), &fr); ok && (!rd.Complete() || time.Now().Before(rd.Meta().Expires)) {
						acct.set(CacheCollapsed, d.source)
						return p.serveStored(w, r, &fr, rd, CacheCollapsed, d.source, true, time.Now())
					} else if ok {
						rd.Close()
					}
				}
				break wait
			case <-t.C:
				break wait
			case <-r.Context().Done():
				return r.Context().Err()
			}
		}
	}
	return notCached(w, "only-if-cached")
}

// asksBack reports whether download d asks the peer that sent r (the
// address it names in peerAskerField) and this proxy's address is the
// lower of the two: of two proxies whose downloads ask each other, the
// lower one answers 504 at once (serveOnlyIfCached). The field is only a
// hint: a request that names an address falsely gets a 504, which any
// only-if-cached request may get.
func (p *Proxy) asksBack(d *download, r *http.Request) bool {
	asking := d.asking.Load()
	asker, err := netip.ParseAddrPort(r.Header.Get(peerAskerField))
	if asking == nil || err != nil || !slices.Contains(*asking, asker) {
		return false
	}
	return p.selfAddr().Compare(asker) < 0
}

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
	if errors.Is(err, errStoredMeanwhile) {
		fr.missing = false
		if rd, ok := p.lookup(r.Context(), &fr); ok {
			return p.serveFound(w, r, &fr, rd, acct)
		}
		d, started, err = p.startDownload(r.Context(), fr, p.downloadWait, true)
	}
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

// afterDownload waits for a download (or revalidation) to have something
// to serve, and serves it.
func (p *Proxy) afterDownload(w http.ResponseWriter, r *http.Request, fr fetchRequest, d *download, started bool, acct *requestAccount) error {
	if err := awaitDownload(w, r, d, started); err != nil {
		return err
	}
	var starter *diskcache.Reader
	if started {
		starter = d.takeStarter()
	}
	if starter != nil && (d.revalidated || d.stale || d.err != nil || d.direct != nil) {
		starter.Close()
		starter = nil
	}
	if d.revalidated || d.stale {
		rd, ok := p.lookup(r.Context(), &fr)
		if !ok {
			return statusError(http.StatusBadGateway, errors.New("the cached copy went away"))
		}
		if d.revalidated {
			acct.set(CacheRevalidated, "local")
			return p.serveStored(w, r, &fr, rd, CacheRevalidated, "local", false, time.Now())
		}
		acct.set(CacheStale, "local")
		return p.serveStored(w, r, &fr, rd, CacheStale, "local", false, time.Now())
	}
	if d.err != nil {
		return p.fetchFailed(w, acct, d.err)
	}
	status := CacheMiss
	if !started {
		status = CacheCollapsed
	}
	acct.set(status, d.source)
	if d.direct != nil {
		if !started {
			if resp := d.sharedFor(&fr); resp != nil {
				// An uncached error this request waited for, with the
				// same fields as the request that started it.
				return p.serveDirect(w, r, resp, d.source, nil, func() {})
			}
			if d.shared != nil && !acct.retried {
				// An error every joiner could have had, but this request
				// sent the origin other fields: it joins (or starts) the
				// next download of the key once, with the others whose
				// fields also differed, so a crowd whose first request
				// was unusual still reaches the origin about twice, not
				// once per request.
				acct.retried = true
				return p.download(w, r, fr, acct)
			}
			// The response may not be shared; fetch our own copy.
			return p.fetchOwn(w, r, fr, acct)
		}
		return p.serveDirect(w, r, d.direct, d.source, d.relay, d.cancelRelay)
	}
	// The object may have landed under a variant key (the response
	// varies), which lookup finds through the URL's entry.
	rd, ok := p.lookup(r.Context(), &fr)
	if starter != nil {
		if ok || (fr.varyIndex != "" && !acct.retried) {
			starter.Close()
		} else {
			// The disk refused the object and its download relays it
			// to the Readers it had: this one, opened for this request
			// before the first byte (see download.starter).
			rd, ok = starter, true
		}
	}
	if ok && !started && !time.Now().Before(rd.Meta().Expires) {
		// The download this request joined brought a response that was
		// stale as it arrived: it answers the request that caused it only.
		rd.Close()
		return p.fetchOwn(w, r, fr, acct)
	}
	if !ok && !started && (d.relayed.Load() || acct.retried) {
		// The disk refused the object, and the bytes this request would
		// start with have gone by (or a second download it joined ended
		// without an object): a copy of its own, uncached, this
		// request's one origin fetch.
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
	return p.serveStored(w, r, &fr, rd, status, d.source, false, time.Now())
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
					if rd := d.takeStarter(); rd != nil {
						rd.Close()
					}
				}()
			}
			return r.Context().Err()
		}
	}
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

// fetchOwn fetches fr from the origin for this request alone and relays
// the response uncached: for a request that joined a download whose
// response may not be shared (no-store, private, stale as it arrived). It
// takes a download slot of its own: it is a download like any other.
func (p *Proxy) fetchOwn(w http.ResponseWriter, r *http.Request, fr fetchRequest, acct *requestAccount) error {
	return p.fetchOwnWith(w, r, fr, acct, nil, nil)
}

// fetchOwnWith is fetchOwn with hooks: adjust changes the request header
// sent to the origin, shape the response before it is relayed (either
// may be nil).
func (p *Proxy) fetchOwnWith(w http.ResponseWriter, r *http.Request, fr fetchRequest, acct *requestAccount, adjust func(http.Header), shape func(*http.Response)) error {
	slot, err := p.slots.acquire(r.Context(), fr.originSlot(), p.clientKey(&fr), p.downloadWait)
	if err != nil {
		return p.fetchFailed(w, acct, err)
	}
	rs := p.slots.relay(slot)
	defer rs.end()
	ctx, cancel := context.WithCancel(withSlotHold(r.Context(), slot))
	defer cancel()
	resp, err := p.fetchFromOriginWith(ctx, fr, adjust)
	if err != nil {
		return p.fetchFailed(w, acct, err)
	}
	if shape != nil {
		shape(resp)
	}
	return p.serveDirect(w, r, resp, "origin", rs, cancel)
}

// fetchFailed is the answer to a request whose fetch failed: 403 when the
// origin's name led to an address the proxy may not contact (as for an
// address in the Host itself), 503 with Retry-After when no download slot
// was free for it (its origin address had none, say), else 502.
func (p *Proxy) fetchFailed(w http.ResponseWriter, acct *requestAccount, err error) error {
	switch {
	case errors.Is(err, errOriginForbidden):
		acct.set(CacheRefused, "none")
		return statusError(http.StatusForbidden, err)
	case errors.Is(err, errDownloadsBusy):
		acct.set(CacheRefused, "none")
		w.Header().Set("Retry-After", retryAfterSeconds(p.downloadWait))
		return statusError(http.StatusServiceUnavailable, err)
	}
	acct.set(CacheMiss, "none")
	return statusError(http.StatusBadGateway, err)
}
