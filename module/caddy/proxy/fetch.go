package proxy

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/httpcache"
	"go.uber.org/zap"
)

// The proxy's request path:
//
//	local cache → one put+get of a reference to this proxy (20 s TTL,
//	renewed while the download runs) → the peers it returned → the origin
//
// One download per object per proxy, however many clients and peers wait:
// the download writes into the disk cache, and every client reads the
// in-progress object from there, getting what has arrived at once and the
// rest as it comes.

// Reference lifetimes in the DSHT.
const (
	refFetchingTTL = 20 * time.Second // while the download runs; renewed
	refGoodTTL     = 2 * time.Hour    // after a successful response
	refNegativeTTL = 15 * time.Minute // after a non-transient error (403, 404, 410)
)

// fetchRequest is what a download needs from the request that started it.
type fetchRequest struct {
	// missing says the lookup found no stored object: a download started
	// for it first makes sure none was stored meanwhile (startDownload).
	missing bool
	// key is the store key of the object fetched: baseKey, the URL's key,
	// or one variant of it when the URL's responses vary (see lookup).
	key, baseKey string
	// baseMark is the store's mark of the URL's entry at the look-up: the
	// state of its DSHT reference (References).
	baseMark uint64
	// target is the origin resource; baseKey is target.Key(), and the
	// origin and peers are asked for exactly its normalized path and query.
	target target
	scheme string // how the origin is fetched: "http" or "https"
	// header is the client's request header, for the client's own
	// directives (request no-store); view is what of it reaches origins and
	// peers (forwardedView), and what a stored variant is keyed by.
	header, view http.Header
	// allow is the configuration's allow-list of forwarded fields, and
	// varyIndex names the fields of the URL's stored Vary index, if any:
	// they reach the origin too (forwardedView).
	allow     []string
	varyIndex string
	clientIP  string
	// clientAddr is the requesting client's address (invalid: none, as
	// for a background refresh); clientKey turns it into what download
	// slots count, only when a download needs a slot.
	clientAddr netip.Addr
	// onlyIfCached says the request carries only-if-cached (a peer's
	// request): it is served from this cache or joins a download, never
	// starts one.
	onlyIfCached bool
	// stale is the stored copy's metadata when this fetch revalidates it.
	stale *diskcache.Meta
	// peerFields are set in requests to peers besides the forwarded
	// ones (a slice's Range: slices.go).
	peerFields http.Header
	// neutral says the request goes to the origin with none of the
	// client's default fields and no clientIP, only the operator's
	// forward_fields in view (neutral.go).
	neutral bool
}

// forwarded is fr.view, computed on first use (a cache hit never needs it).
func (fr *fetchRequest) forwarded() http.Header {
	if fr.view == nil {
		fr.view = forwardedView(fr.header, fr.allow, fr.varyIndex)
	}
	return fr.view
}

// clientKey is the client as download slots count it: the prefix of
// fr's client address of the configured length (client_prefix); "": not
// counted.
func (p *Proxy) clientKey(fr *fetchRequest) string {
	return clientPrefix(fr.clientAddr, p.clientPrefixV4, p.clientPrefixV6)
}

// clientPrefix is ip's prefix of length v4 or v6 (IPv4-mapped IPv6 counts
// as IPv4; zones are dropped), as a string; "" for an invalid ip.
func clientPrefix(ip netip.Addr, v4, v6 int) string {
	if !ip.IsValid() {
		return ""
	}
	ip = ip.Unmap().WithZone("")
	bits := v6
	if ip.Is4() {
		bits = v4
	}
	pfx, err := ip.Prefix(bits)
	if err != nil {
		return ip.String()
	}
	return pfx.String()
}

// originURL is the URL fetched from the origin (before any https upgrade).
func (fr *fetchRequest) originURL() *url.URL {
	t := fr.target
	t.Scheme = fr.scheme
	return t.OriginURL()
}

// originSlot names the origin for the per-origin download bound: host and
// port as Coralized, so origin_scheme does not split one origin in two.
func (fr *fetchRequest) originSlot() string {
	return endpoint(fr.target.OriginURL())
}

// endpoint is u's host and port, the default port of its scheme written
// out: the key for what is remembered per origin server.
func endpoint(u *url.URL) string {
	port := u.Port()
	if port == "" {
		port = strconv.Itoa(coralname.DefaultPort(u.Scheme))
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// run performs one download in ctx (ended by d.cancel): references first,
// then peers, then the origin. It never runs twice for one key at once
// (startDownload).
func (p *Proxy) run(ctx context.Context, fr fetchRequest, d *download) {
	readyOnce := sync.OnceFunc(func() { close(d.ready) })
	// Deferred calls run last first: the download leaves the in-flight
	// table before its waiters are released, so a request that comes after
	// them starts afresh (a revalidation, say) rather than joining a
	// finished download.
	defer close(d.done)
	defer readyOnce()
	defer p.finish(d)
	cancel := d.cancel
	defer func() {
		if d.direct != nil && p.shareError(d, fr) {
			cancel()
			p.slots.release(d.slot)
			return
		}
		if d.direct != nil && d.background {
			// Started for nobody (a refresh, a range miss's whole
			// object): no request reads it, and its joiners fetch their
			// own. Unread, it would hold its connection and slot.
			d.direct.Body.Close()
			cancel()
			p.slots.release(d.slot)
			return
		}
		if d.direct != nil {
			// Handed to its requester unread: the fetch, and its download
			// slot, live until the requester closes the body, unless a
			// request waiting for a slot takes it over from a relay whose
			// client stopped reading (relayStall).
			rs := p.slots.relay(d.slot)
			d.relay, d.cancelRelay = rs, cancel
			d.direct.Body = &cancelOnClose{ReadCloser: d.direct.Body, cancel: func() {
				cancel()
				rs.end()
			}}
			return
		}
		cancel()
		p.slots.release(d.slot)
	}()

	fr.forwarded()
	ctx = traceInterim(ctx, d)
	if fr.stale != nil {
		p.revalidate(ctx, fr, d, readyOnce)
		return
	}
	peers, peerLevel, stopRenewing := p.announce(ctx, fr)
	defer stopRenewing()

	if at, ok := p.purged.get(fr.baseKey); ok && time.Since(at) < purgeMemory {
		peers = nil
	}
	source := PeerSource(peerLevel)
	idle := p.originTimeout + p.peerTimeout // a peer may itself wait on its origin
	requested := time.Now()
	var err error
	d.askingPeers(peers, peerLevel)
	resp, miss := p.fetchFromPeers(ctx, fr, peers)
	if resp == nil && miss.retry(p.selfAddr(), nil) {
		// A peer died or is out of reach: the put+get again, without it,
		// rather than the origin at once (refetch.go).
		requested = time.Now()
		resp, peerLevel, err = p.retryPeers(ctx, fr, d, peers, miss, peerLevel)
		source = PeerSource(peerLevel)
		if err != nil {
			d.err = err
			return
		}
	}
	if resp == nil {
		if ce := p.logger.Check(zap.DebugLevel, "fetching from the origin"); ce != nil {
			ce.Write(zap.String("url", fr.target.OriginURL().String()), zap.Int("references", len(peers)),
				zap.Int("dsht_level", peerLevel), zap.Int("peers_failed", len(miss.failed)), zap.Int("peers_retrying", len(miss.retrying)))
		}
		requested = time.Now()
		resp, err = p.fetchForCache(ctx, &fr, nil)
		source, idle = "origin", p.originTimeout
	}
	if err != nil {
		d.err = err
		return
	}
	resp.Body = newIdleTimeoutBody(resp.Body, idle, cancel)
	d.source = source
	p.keep(ctx, fr, d, resp, source, requested, readyOnce)
}

// announce does the download's put+get: a short reference to this proxy
// under the URL's key, and the references already there, to the peers
// this proxy may ask (allow_peers), with the DSHT level the get ended at
// (-1 without a node). It keeps the reference alive while the download
// runs, until stopRenewing is called.
func (p *Proxy) announce(ctx context.Context, fr fetchRequest) (peers []reference, peerLevel int, stopRenewing func()) {
	// References are per URL, whatever variant: a peer picks the variant
	// the request's fields select, or answers 504.
	dhtKey := coraldht.KeyFor(fr.baseKey)
	self := p.selfAddr()
	node := p.dhtNode()
	if node == nil || !self.IsValid() {
		return nil, -1, func() {}
	}
	selfRef := p.selfReference(self)
	peers, peerLevel = p.putGetPeers(ctx, fr)
	// Keep the short reference alive while the download runs, so peers
	// that arrive later find this proxy.
	renewCtx, stop := context.WithCancel(ctx)
	go func() {
		t := time.NewTicker(refFetchingTTL * 3 / 4)
		defer t.Stop()
		for {
			select {
			case <-renewCtx.Done():
				return
			case <-t.C:
				_, _ = node.Put(renewCtx, dhtKey, selfRef.encode(), refFetchingTTL)
			}
		}
	}()
	return peers, peerLevel, stop
}

// putGetPeers puts the short reference to this proxy under fr's URL and
// returns the references already there to the peers this proxy may ask,
// with the DSHT level the get ended at (-1 without a node).
func (p *Proxy) putGetPeers(ctx context.Context, fr fetchRequest) (peers []reference, level int) {
	self := p.selfAddr()
	node := p.dhtNode()
	if node == nil || !self.IsValid() {
		return nil, -1
	}
	res, err := node.PutGet(ctx, coraldht.KeyFor(fr.baseKey), p.selfReference(self).encode(), refFetchingTTL)
	if err != nil {
		p.logger.Debug("put+get failed; going to the origin", zap.Error(err))
	}
	return p.peerReferences(fr, res.Values, self), res.Level
}

// peerReferences decodes the references a put+get for fr returned: not
// this proxy's own, not undecodable ones, and none on an address
// allow_peers does not permit.
func (p *Proxy) peerReferences(fr fetchRequest, values []coraldht.Value, self netip.AddrPort) []reference {
	var peers []reference
	for _, v := range values {
		r, err := decodeReference(v.Data)
		if err != nil || r.Addr == self {
			continue
		}
		r.Left = v.TTL
		if !p.peerGuard.permitted(r.Addr.Addr()) {
			// Any member may put any value: a reference to a
			// private or loopback address would make this proxy
			// send requests into its own network.
			p.metrics.PeerFetch(OutcomeRefusedAddress)
			logRefusal(p.logger, causePeer, "skipped a peer on an address allow_peers does not permit (private or loopback); list its network in allow_peers if the proxies talk over it",
				zap.Stringer("peer", r.Addr), zap.String("url", fr.target.OriginURL().String()))
			continue
		}
		peers = append(peers, r)
	}
	return peers
}

// keep stores a fetched response and streams it into the cache, or hands
// it to the requester uncached; on success it puts the long-lived
// reference. requested is when the request that brought resp was sent.
func (p *Proxy) keep(ctx context.Context, fr fetchRequest, d *download, resp *http.Response, source string, requested time.Time, readyOnce func()) {
	now := time.Now()
	loop := p.coralizeRedirect(fr, resp)
	policy := p.policy.ForRequest(fr.header)
	ok, why := policy.Storable(fr.header, resp.StatusCode, resp.Header)
	if source == "origin" {
		p.originUsesFields(fr, resp) // renews what is remembered of the origin
	}
	if ok && source == "origin" && !fr.neutral && httpcache.NegativeHeuristic(resp.StatusCode, why) {
		// An error kept without the origin saying so, fetched with the
		// client's fields: only one the origin gives a request with none
		// of them. (A neutral request's answer is that already.)
		var confirmed bool
		if resp, confirmed = p.confirmNegative(ctx, fr, resp); !confirmed {
			d.direct = resp
			return
		}
		if ok, why = policy.Storable(fr.header, resp.StatusCode, resp.Header); !ok || !httpcache.NegativeHeuristic(resp.StatusCode, why) {
			d.direct = resp
			return
		}
	}
	// Vary: the object is kept under the key of the variant this
	// request selects, and the URL's key gets an index naming the fields.
	key := fr.baseKey
	fields := varyFields(resp.Header)
	if fields != "" {
		// Keyed by what the origin (or peer) was sent, not by what the
		// client sent: a field the origin never saw cannot select this
		// variant (the index makes the next request send it).
		vk, vok := httpcache.VaryKey(fields, fr.forwarded())
		ok = ok && vok
		key = variantKey(fr.baseKey, vk)
	}
	if until, big := p.tooLarge.get(key); big && now.Before(until) {
		ok = false
	}
	if !ok || loop {
		d.direct = resp
		return
	}
	freshFor, _ := httpcache.Lifetime(policy, now, resp.StatusCode, resp.Header)
	// A copy from a peer (or an origin behind another cache) is already
	// some age: it is fresh for what is left. The age is kept with the
	// object, so that what it says in Age grows from there.
	age := httpcache.CorrectedInitialAge(resp.Header, requested, now)
	freshFor -= age
	if source != "origin" {
		freshFor = min(freshFor, peerFreshness(resp.Header))
	}
	if p.wouldHideFresh(fr, key, fields, resp.StatusCode, now) {
		// This request gets it; everyone else keeps the fresh copies.
		d.direct = resp
		return
	}
	if fields != "" && !p.writeVaryIndex(fr, fields, now, freshFor) {
		d.direct = resp
		return
	}
	meta := diskcache.Meta{
		Key:     key,
		Status:  resp.StatusCode,
		Header:  storedHeader(resp.Header),
		Stored:  now,
		Expires: now.Add(freshFor),
		Size:    -1,
		Extra:   map[string]string{"source": source, "url": fr.originURL().String(), ageField: formatAge(age)},
	}
	if resp.ContentLength >= 0 {
		meta.Size = resp.ContentLength
	}
	if m, big := p.sliceable(fr, resp, source, fields); big && p.keepSliced(ctx, fr, resp, meta, m, readyOnce) {
		return // slices.go
	}
	if p.storeBody(ctx, d, resp, key, &meta, now, readyOnce) {
		p.publish(fr, resp.StatusCode, meta.Expires)
	}
}

// storeBody streams resp's body into the cache as key with meta (its Size
// set once known) and commits it; readers may join from the moment the
// entry exists (readyOnce). It reports whether the object was committed.
// A body the cache cannot take goes to the requester uncached (d.direct);
// a truncated one is never presented as complete: readers get the error
// and the object is dropped.
func (p *Proxy) storeBody(ctx context.Context, d *download, resp *http.Response, key string, meta *diskcache.Meta, now time.Time, readyOnce func()) bool {
	p.storingAs(d, key)
	// A body of known length is charged to the client's share of the
	// cache whole, before any of it is written; one of unknown length as
	// it arrives (relayWatch.charge).
	known := resp.ContentLength >= 0
	if known && !p.slots.chargeBytes(d.slot, resp.ContentLength) {
		p.logger.Debug("not caching: the client's downloads hold their share of the cache", zap.String("url", meta.Extra["url"]))
		d.direct = resp
		return false
	}
	w, err := p.store.Create(key, *meta)
	if err != nil {
		// The cache cannot take it (full of downloads, or too large): the
		// client still gets it, uncached.
		p.logger.Debug("not caching", zap.String("url", meta.Extra["url"]), zap.Error(err))
		d.direct = resp
		return false
	}
	d.expected.Store(resp.ContentLength)
	if !d.background {
		if rd, ok := p.store.Get(key); ok {
			d.starter.Store(rd)
		}
	}
	readyOnce()
	rw := &relayWatch{w: w, onRelay: func() {
		d.relayed.Store(true)
		p.finish(d)
	}}
	if !known {
		rw.charge = func(n int) bool { return p.slots.chargeBytes(d.slot, int64(n)) }
	}
	n, err := io.Copy(rw, &countingReader{r: resp.Body, n: &d.received})
	resp.Body.Close()
	if ib, ok := resp.Body.(*idleTimeoutBody); ok && err != nil && ib.fired.Load() {
		err = fmt.Errorf("no data for %s after %d bytes", ib.timeout, n)
	} else if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("download_timeout %s reached after %d bytes", p.downloadTimeout, n)
	} else if errors.Is(err, context.Canceled) && d.abandoned.Load() {
		err = fmt.Errorf("%w after %d bytes", errAbandoned, n)
	}
	if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
		err = fmt.Errorf("body ended after %d of %d bytes", n, resp.ContentLength)
	}
	if err != nil {
		if errors.Is(err, diskcache.ErrTooLarge) {
			// Larger than max_object_size without saying so: relay it
			// uncached from now on rather than cut every client off.
			p.tooLarge.put(key, now.Add(tooLargeMemory))
		}
		p.finish(d)
		w.Abort(err)
		if errors.Is(err, errAbandoned) {
			p.logger.Debug("download abandoned", zap.String("url", meta.Extra["url"]), zap.Error(err))
		} else {
			p.logger.Warn("download aborted", zap.String("url", meta.Extra["url"]), zap.Error(err))
		}
		return false
	}
	meta.Size = n
	if p.fetched != nil {
		p.fetched(Fetch{URL: meta.Extra["url"], Source: meta.Extra["source"], Status: resp.StatusCode, Bytes: n, Took: time.Since(now)})
	}
	if err := w.Commit(*meta); err != nil {
		if errors.Is(err, errClientBytes) {
			d.relayed.Store(true)
			p.logger.Debug("not cached: the client's downloads hold their share of the cache; relayed uncached", zap.String("url", meta.Extra["url"]))
			return false
		}
		if errors.Is(err, diskcache.ErrNotStored) {
			d.relayed.Store(true)
			// The disk would not take it: its readers got it whole,
			// relayed (see relayWatch); nothing to publish.
			p.logger.Warn("not cached: the cache's disk failed; relayed uncached", zap.String("url", meta.Extra["url"]), zap.Error(err))
			return false
		}
		p.logger.Warn("cache commit failed", zap.Error(err))
		return false
	}
	// Complete: later requests find it in the cache and must not join
	// this download while it puts its reference.
	p.finish(d)
	return true
}

// publish puts the long-lived reference to a committed object, with a
// status and freshness, and records it for renewal. The reference lives no
// longer than the copy is fresh: a peer that follows it takes that as the
// most the copy may be fresh (askPeer).
func (p *Proxy) publish(fr fetchRequest, status int, expires time.Time) {
	self := p.selfAddr()
	ttl := refGoodTTL
	if status >= 400 {
		ttl = refNegativeTTL
	}
	ttl = min(ttl, time.Until(expires))
	if node := p.dhtNode(); node != nil && self.IsValid() && ttl >= time.Second {
		ref := reference{Addr: self, DHT: node.Addr(), Complete: true, Negative: status >= 400}
		putCtx, cancelPut := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := node.Put(putCtx, coraldht.KeyFor(fr.baseKey), ref.encode(), ttl); err == nil {
			p.refs.put(fr.baseKey, ref, ttl)
		}
		cancelPut()
	}
}

// relayWatch writes a download into the cache and notices when the disk
// cache stops storing it and relays it to its readers instead (a full or
// failing disk: diskcache's ErrNotStored). The download then leaves the
// in-flight table at once (onRelay): the readers it has get the rest of
// the body, but a request that comes later could not (the bytes it would
// start with are gone), so it starts its own download instead of joining.
//
// charge, when set, charges each write to the download's client (its
// share of the cache, downloadSlots.chargeBytes); once the share is spent
// the download is relayed to its readers, not stored (errClientBytes).
type relayWatch struct {
	w       *diskcache.Writer
	onRelay func()
	charge  func(n int) bool
}

// errClientBytes is why a download of unknown length whose client's
// downloads would hold more than their share of the cache is relayed
// rather than stored.
var errClientBytes = errors.New("coral_proxy: the client's downloads in progress hold their share of the cache")

func (rw *relayWatch) Write(p []byte) (int, error) {
	if rw.charge != nil && !rw.charge(len(p)) {
		rw.charge = nil
		rw.w.Relay(errClientBytes)
	}
	n, err := rw.w.Write(p)
	if rw.onRelay != nil && rw.w.Relaying() {
		rw.onRelay()
		rw.onRelay = nil
	}
	return n, err
}

// countingReader counts the bytes read through it into n.
type countingReader struct {
	r io.Reader
	n *atomic.Int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	k, err := c.r.Read(p)
	c.n.Add(int64(k))
	return k, err
}

// tooLargeMemory is how long an object that outgrew max_object_size
// mid-download is relayed uncached before the cache tries it again (it
// may have shrunk, or the bound been raised).
const tooLargeMemory = time.Hour

// confirmNegative asks the origin again for fr without any field of the
// client's (no Accept, Accept-Language or forwarded field; the proxy's
// own User-Agent; no X-Forwarded-For), for an error resp that would be
// kept for the negative lifetime only because its status is cacheable by
// default (RFC 9110 §15.1): a 404 a client provoked with its own fields
// (a User-Agent a filter answers with 404, as in "Your Cache Has Fallen")
// must not be served to everyone. When that request gets an error of the
// same status, it returns that response (resp closed) to keep, and
// confirmed; otherwise resp, to relay to its client alone. Only a fetch
// made with the client's fields needs it (a URL with a Vary index, an
// origin remembered as looking at clients' fields: neutral.go); a
// neutral fetch's error is kept as it is, one origin request.
func (p *Proxy) confirmNegative(ctx context.Context, fr fetchRequest, resp *http.Response) (_ *http.Response, confirmed bool) {
	client := fr.forwarded()
	neutral, err := p.fetchFromOriginWith(ctx, fr, func(h http.Header) {
		for k := range client {
			h.Del(k)
		}
		h.Del("X-Forwarded-For")
		h.Set("User-Agent", p.userAgent)
	})
	if err != nil {
		return resp, false
	}
	if neutral.StatusCode != resp.StatusCode {
		neutral.Body.Close()
		return resp, false
	}
	resp.Body.Close()
	return neutral, true
}

// maxSharedAnswer bounds the body of an uncached error shared with the
// requests waiting for the same download: error pages are small, and a
// larger one goes to its requester alone as before.
const maxSharedAnswer = 64 << 10

// sharedAnswer is an uncached error handed to every request that waited
// for the download that got it (d.shared).
type sharedAnswer struct {
	status int
	header http.Header
	body   []byte
	view   http.Header // the fields the origin was sent
	// forAll: the origin was sent none of the client's fields and named
	// none in Vary (neutral.go), so every joiner would have been sent the
	// same request, and gets the answer whatever its fields.
	forAll bool
}

// shareError reads d.direct into d.shared, and gives d.direct a body of
// those bytes, when it may answer the requests that joined the download
// too: an error (status 400 or above, the answer of the moment a crowd
// gathered on) that is not private, sets no cookie and has a body of at
// most maxSharedAnswer. It is never stored: only the requests already
// waiting get it, each only if it sent the origin the same fields as the
// request that started the download (so no one's fields choose another's
// answer); later requests ask the origin again. A success the cache may
// not keep (no-store, private) is never shared: its waiters fetch their
// own, as before (a "hit-for-miss").
func (p *Proxy) shareError(d *download, fr fetchRequest) bool {
	resp := d.direct
	if resp.StatusCode < 400 || len(resp.Header.Values("Set-Cookie")) > 0 || httpcache.ParseResponseCacheControl(resp.Header).Private ||
		resp.ContentLength > maxSharedAnswer {
		return false
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxSharedAnswer+1))
	if err != nil || len(body) > maxSharedAnswer {
		// Its requester alone gets it: what was read, then the rest (or
		// the error) as it comes.
		resp.Body = readCloser{io.MultiReader(bytes.NewReader(body), resp.Body), resp.Body}
		return false
	}
	resp.Body.Close()
	resp.Body = io.NopCloser(bytes.NewReader(body))
	resp.ContentLength = int64(len(body))
	d.shared = &sharedAnswer{status: resp.StatusCode, header: resp.Header.Clone(), body: body, view: fr.forwarded(),
		forAll: fr.neutral && forwardedVary(resp.Header, fr.allow) == ""}
	return true
}

// readCloser reads from r and closes c.
type readCloser struct {
	r io.Reader
	c io.Closer
}

func (rc readCloser) Read(b []byte) (int, error) { return rc.r.Read(b) }
func (rc readCloser) Close() error               { return rc.c.Close() }

// sharedFor returns the answer a request that joined d (fr) may be
// given: d.shared if it sent the origin the same fields; else nil.
func (d *download) sharedFor(fr *fetchRequest) *http.Response {
	a := d.shared
	if a == nil || !(a.forAll || sameFields(a.view, fr.forwarded())) {
		return nil
	}
	return &http.Response{StatusCode: a.status, Header: a.header.Clone(), Body: io.NopCloser(bytes.NewReader(a.body)), ContentLength: int64(len(a.body))}
}

// sameFields reports whether a and b hold the same fields with the same
// values in the same order.
func sameFields(a, b http.Header) bool {
	if len(a) != len(b) {
		return false
	}
	for k, va := range a {
		vb, ok := b[k]
		if !ok || len(va) != len(vb) {
			return false
		}
		for i := range va {
			if va[i] != vb[i] {
				return false
			}
		}
	}
	return true
}
