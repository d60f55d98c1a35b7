package coralcaddy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
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

// download is one fetch in progress at this proxy.
type download struct {
	ready chan struct{} // closed once the object exists in the store (or the fetch failed)
	done  chan struct{} // closed once the download has ended and left the in-flight table
	err   error         // why, if it failed before the object existed; set before ready closes
	// direct carries a response that may not be stored (no-store, private,
	// a transient error) to the request that started the download; the
	// requests that joined it fetch on their own.
	direct *http.Response
	// relay is direct's download slot, and cancelRelay ends its fetch.
	relay       *relaySlot
	cancelRelay context.CancelFunc
	source      string // where the bytes come from: "origin" or "peer-l<level>"
	// For revalidations of a stale copy: the origin said 304 and the copy
	// is fresh again (revalidated), or the origin failed and the stale copy
	// is served with its expiry extended (stale).
	revalidated, stale bool
	// cancel ends the fetch: its requests and connections.
	cancel context.CancelFunc
	// origin and client name the download slot this download holds
	// (downloadSlots): the origin, and the address of the client that
	// started it.
	origin, client string
	// key is the in-flight key the download runs under; storeKey, if
	// different, the key it stores the object under (a variant's), where
	// it is found as well.
	key, storeKey string
	// holders counts the requests waiting for or reading this download
	// (clients, and peers streaming it); guarded by engine.mu. When the
	// last one goes, the download is cancelled unless nearlyDone or
	// background (started for nobody: a stale-while-revalidate refresh).
	holders    int
	background bool
	abandoned  atomic.Bool // cancelled by letGo
	// received and expected count the body's bytes as they arrive and as
	// declared (-1: not known yet, or never).
	received, expected atomic.Int64
	// interim carries the origin's interim responses (1xx but 100 and
	// 101) to the request that started the download, which relays them
	// (RFC 9110 §15.2: a proxy forwards them). They are never stored.
	interim chan interimResponse
}

// interimResponse is one 1xx response from the origin.
type interimResponse struct {
	status int
	header http.Header
}

// interimWait bounds how long the origin's response waits for its
// requester to take an interim response: a requester that has gone, or
// does not read, does not hold the download up.
const interimWait = time.Second

// traceInterim returns ctx with a trace that passes the interim responses
// of a request to d's requester, at most maxInterimResponses of them: the
// one after that ends the fetch.
func traceInterim(ctx context.Context, d *download) context.Context {
	var limit interimLimiter
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		Got1xxResponse: func(code int, header textproto.MIMEHeader) error {
			if err := limit.next(); err != nil {
				return err
			}
			if err := checkHeadFields(http.Header(header)); err != nil {
				return err
			}
			if code == http.StatusContinue || code == http.StatusSwitchingProtocols {
				return nil
			}
			t := time.NewTimer(interimWait)
			defer t.Stop()
			select {
			case d.interim <- interimResponse{status: code, header: http.Header(header).Clone()}:
			case <-t.C:
			case <-ctx.Done():
			}
			return nil
		},
	})
}

// dhtNode is the DSHT node to use now: the one running for the newest
// configuration, which a restart in place or a drain replaces, rather than
// the one that ran when the handler was provisioned.
func (e *engine) dhtNode() *coraldht.Node {
	if e.nodeFunc != nil {
		return e.nodeFunc()
	}
	return e.node
}

// engine does the fetching for one handler.
type engine struct {
	store *diskcache.Store
	// node is a fixed DSHT node (handlers set up outside Caddy); nodeFunc,
	// when set, finds the node running now (see dhtNode).
	node     *coraldht.Node
	nodeFunc func() *coraldht.Node
	// How long an origin or a peer may keep a response body silent.
	originTimeout, peerTimeout time.Duration
	origin                     *http.Client
	peer                       *http.Client
	failures                   *originFailures
	policy                     httpcache.Policy
	logger                     *zap.Logger
	selfAddr                   func() netip.AddrPort // this proxy's HTTP address, for references
	userAgent                  string
	zone                       string // the alias zone, for Coralizing redirects
	guard                      originGuard
	// peerGuard decides which addresses in DSHT references may be asked:
	// public ones, and those allow_peers lists.
	peerGuard originGuard
	// httpsUpgrades remembers URLs and origins (host and http port) that
	// redirected to the https form of a URL, so later fetches go to https
	// at once.
	httpsUpgrades *httpsUpgrades
	// tooLarge remembers, until when, objects whose download outgrew
	// max_object_size: they are relayed uncached meanwhile rather than
	// fetched into the cache, and cut off, again and again.
	tooLarge *boundedMap[time.Time]
	// purged remembers when objects were purged here (purge.go): for
	// purgeMemory after that, a miss goes to the origin, not to peers,
	// which may still hold the old copy while a network purge works its
	// way round.
	purged *boundedMap[time.Time]
	// forward is the allow-list of request fields sent to origins and
	// peers (forwardFields).
	forward []string
	// slots bounds the downloads in progress; a request that would start
	// one waits at most downloadWait for a slot.
	slots        *downloadSlots
	downloadWait time.Duration
	// downloadTimeout bounds a whole download, however steadily its
	// bytes trickle in (originTimeout bounds each silence).
	downloadTimeout time.Duration
	// maxObject is the cache's bound on one object (max_object_size),
	// which also bounds a transfer-coded body as it is decoded.
	maxObject int64
	// clock is time.Now; tests replace it to move time on.
	clock func() time.Time
	// refs renews the long-lived references of requested objects.
	refs    *refTable
	metrics *proxyMetrics
	// peerAddr is this proxy's HTTP address for references: configured, or
	// learned from the first request.
	peerAddr atomic.Pointer[netip.AddrPort]

	mu       sync.Mutex
	inflight map[string]*download
}

// fetchRequest is what a download needs from the request that started it.
type fetchRequest struct {
	// key is the store key of the object fetched: baseKey, the URL's key,
	// or one variant of it when the URL's responses vary (see lookup).
	key, baseKey string
	// target is the origin resource; baseKey is target.Key(), and the
	// origin and peers are asked for exactly its normalized path and query.
	target Target
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
	// stale is the stored copy's metadata when this fetch revalidates it.
	stale *diskcache.Meta
}

// forwarded is fr.view, computed on first use (a cache hit never needs it).
func (fr *fetchRequest) forwarded() http.Header {
	if fr.view == nil {
		fr.view = forwardedView(fr.header, fr.allow, fr.varyIndex)
	}
	return fr.view
}

// clientKey is the client address as download slots count it (rateKey;
// "": not counted).
func (fr *fetchRequest) clientKey() string {
	if !fr.clientAddr.IsValid() {
		return ""
	}
	return rateKey(fr.clientAddr).String()
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

// startDownload returns the download for fr.key, starting one if none runs
// (started). Starting one takes a download slot: when none is free it waits
// at most wait for one (0: not at all), and returns errDownloadsBusy after
// that, or ctx's error when ctx (the request's) ends first. With hold, the
// download is held for the caller, who must letGo of it.
func (e *engine) startDownload(ctx context.Context, fr fetchRequest, wait time.Duration, hold bool) (d *download, started bool, err error) {
	if d := e.holdInflight(fr.key, hold); d != nil {
		return d, false, nil
	}
	origin := fr.originSlot()
	if err := e.slots.acquire(ctx, origin, fr.clientKey(), wait); err != nil {
		return nil, false, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if d, ok := e.inflight[fr.key]; ok {
		e.slots.release(origin, fr.clientKey()) // another request started it meanwhile
		if hold {
			d.holders++
		}
		return d, false, nil
	}
	d = &download{ready: make(chan struct{}), done: make(chan struct{}), origin: origin, client: fr.clientKey(),
		key: fr.key, interim: make(chan interimResponse)}
	d.expected.Store(-1)
	if hold {
		d.holders = 1
	} else {
		d.background = true
	}
	dctx, cancel := e.downloadContext()
	d.cancel = cancel
	e.inflight[fr.key] = d
	go e.run(dctx, fr, d)
	return d, true, nil
}

// inflightFor returns the download running for key, if any.
func (e *engine) inflightFor(key string) *download {
	return e.holdInflight(key, false)
}

// holdInflight returns the download running for key, if any, held for the
// caller (who must letGo of it) if hold.
func (e *engine) holdInflight(key string, hold bool) *download {
	e.mu.Lock()
	defer e.mu.Unlock()
	d := e.inflight[key]
	if d != nil && hold {
		d.holders++
	}
	return d
}

// letGo ends the caller's hold on d. A download that still runs, that
// nobody holds any more and that is not nearly done is cancelled: it
// leaves the in-flight table at once and frees its slot as it ends.
func (e *engine) letGo(d *download) {
	if d == nil {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	d.holders--
	if d.holders > 0 || d.background || e.inflight[d.key] != d || d.nearlyDone() {
		return
	}
	e.finishLocked(d)
	d.abandoned.Store(true)
	d.cancel()
}

// nearlyDone reports whether at least nearlyDonePercent of d's declared
// length has arrived.
func (d *download) nearlyDone() bool {
	want := d.expected.Load()
	return want > 0 && d.received.Load()*100 >= want*nearlyDonePercent
}

// finish takes d out of the in-flight table (where it is still the
// download for its keys).
func (e *engine) finish(d *download) {
	e.mu.Lock()
	e.finishLocked(d)
	e.mu.Unlock()
}

func (e *engine) finishLocked(d *download) {
	for _, k := range []string{d.key, d.storeKey} {
		if k != "" && e.inflight[k] == d {
			delete(e.inflight, k)
		}
	}
}

// storingAs notes that d stores its object under key, so requests for
// that key find and hold it.
func (e *engine) storingAs(d *download, key string) {
	if key == d.key {
		return
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if e.inflight[d.key] != d {
		return // already cancelled or finished
	}
	d.storeKey = key
	if _, ok := e.inflight[key]; !ok {
		e.inflight[key] = d
	}
}

func (e *engine) now() time.Time { return e.clock() }

// downloadContext is the context of one download: not the request's, since
// the download outlives the client that started it, but ended at
// download_timeout.
func (e *engine) downloadContext() (context.Context, context.CancelFunc) {
	if e.downloadTimeout > 0 {
		return context.WithTimeout(context.Background(), e.downloadTimeout)
	}
	return context.WithCancel(context.Background())
}

// run performs one download in ctx (ended by d.cancel): references first,
// then peers, then the origin. It never runs twice for one key at once
// (startDownload).
func (e *engine) run(ctx context.Context, fr fetchRequest, d *download) {
	readyOnce := sync.OnceFunc(func() { close(d.ready) })
	// Deferred calls run last first: the download leaves the in-flight
	// table before its waiters are released, so a request that comes after
	// them starts afresh (a revalidation, say) rather than joining a
	// finished download.
	defer close(d.done)
	defer readyOnce()
	defer e.finish(d)
	cancel := d.cancel
	defer func() {
		if d.direct != nil {
			// Handed to its requester unread: the fetch, and its download
			// slot, live until the requester closes the body, unless a
			// request waiting for a slot takes it over from a relay whose
			// client stopped reading (relayStall).
			rs := e.slots.relay(d.origin, d.client)
			d.relay, d.cancelRelay = rs, cancel
			d.direct.Body = &cancelOnClose{ReadCloser: d.direct.Body, cancel: func() {
				cancel()
				rs.end()
			}}
			return
		}
		cancel()
		e.slots.release(d.origin, d.client)
	}()

	fr.forwarded()
	ctx = traceInterim(ctx, d)
	if fr.stale != nil {
		e.revalidate(ctx, fr, d, readyOnce)
		return
	}
	// References are per URL, whatever variant: a peer picks the variant
	// the request's fields select, or answers 504.
	dhtKey := coraldht.KeyFor(fr.baseKey)
	self := e.selfAddr()
	selfRef := e.selfReference(self)
	var peers []reference
	peerLevel := -1
	node := e.dhtNode()
	if node != nil && self.IsValid() {
		res, err := node.PutGet(ctx, dhtKey, selfRef.encode(), refFetchingTTL)
		if err != nil {
			e.logger.Debug("put+get failed; going to the origin", zap.Error(err))
		}
		for _, v := range res.Values {
			r, err := decodeReference(v.Data)
			if err != nil || r.Addr == self {
				continue
			}
			r.Left = v.TTL
			if !e.peerGuard.permitted(r.Addr.Addr()) {
				// Any member may put any value: a reference to a
				// private or loopback address would make this proxy
				// send requests into its own network.
				e.metrics.peerFetch(metricRefusedAddress)
				logRefusal(e.logger, causePeer, "skipped a peer on an address allow_peers does not permit (private or loopback); list its network in allow_peers if the proxies talk over it",
					zap.Stringer("peer", r.Addr), zap.String("url", fr.target.OriginURL().String()))
				continue
			}
			peers = append(peers, r)
		}
		peerLevel = res.Level
		// Keep the short reference alive while the download runs, so peers
		// that arrive later find this proxy.
		renewCtx, stopRenewing := context.WithCancel(ctx)
		defer stopRenewing()
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
	}

	if at, ok := e.purged.get(fr.baseKey); ok && e.now().Sub(at) < purgeMemory {
		peers = nil
	}
	source := fmt.Sprintf("peer-l%d", peerLevel)
	idle := e.originTimeout + e.peerTimeout // a peer may itself wait on its origin
	requested := e.now()
	resp, err := e.fetchFromPeers(ctx, fr, peers)
	if resp == nil {
		requested = e.now()
		resp, err = e.fetchFromOrigin(ctx, fr)
		source, idle = "origin", e.originTimeout
	}
	if err != nil {
		d.err = err
		return
	}
	resp.Body = newIdleTimeoutBody(resp.Body, idle, cancel)
	d.source = source
	e.keep(ctx, fr, d, resp, source, requested, readyOnce)
}

// keep stores a fetched response and streams it into the cache, or hands
// it to the requester uncached; on success it puts the long-lived
// reference. requested is when the request that brought resp was sent.
func (e *engine) keep(ctx context.Context, fr fetchRequest, d *download, resp *http.Response, source string, requested time.Time, readyOnce func()) {
	self := e.selfAddr()
	dhtKey := coraldht.KeyFor(fr.baseKey)
	now := e.now()
	loop := e.coralizeRedirect(fr, resp)
	policy := e.policy.ForRequest(fr.header)
	ok, _ := policy.Storable(fr.header, resp.StatusCode, resp.Header)
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
	if until, big := e.tooLarge.get(key); big && now.Before(until) {
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
	if e.wouldHideFresh(fr, key, fields, resp.StatusCode, now) {
		// This request gets it; everyone else keeps the fresh copies.
		d.direct = resp
		return
	}
	if fields != "" && !e.writeVaryIndex(fr, fields, now, freshFor) {
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
	e.storingAs(d, key)
	w, err := e.store.Create(key, meta)
	if err != nil {
		// The cache cannot take it (full of downloads, or too large): the
		// client still gets it, uncached.
		e.logger.Debug("not caching", zap.String("url", meta.Extra["url"]), zap.Error(err))
		d.direct = resp
		return
	}
	d.expected.Store(resp.ContentLength)
	readyOnce()
	n, err := io.Copy(w, &countingReader{r: resp.Body, n: &d.received})
	resp.Body.Close()
	if ib, ok := resp.Body.(*idleTimeoutBody); ok && err != nil && ib.fired.Load() {
		err = fmt.Errorf("no data for %s after %d bytes", ib.timeout, n)
	} else if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("download_timeout %s reached after %d bytes", e.downloadTimeout, n)
	} else if errors.Is(err, context.Canceled) && d.abandoned.Load() {
		err = fmt.Errorf("%w after %d bytes", errAbandoned, n)
	}
	if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
		err = fmt.Errorf("body ended after %d of %d bytes", n, resp.ContentLength)
	}
	if err != nil {
		// A truncated body is never presented as complete: readers get the
		// error and the object is dropped. Requests from now on start over.
		if errors.Is(err, diskcache.ErrTooLarge) {
			// Larger than max_object_size without saying so: relay it
			// uncached from now on rather than cut every client off.
			e.tooLarge.put(key, now.Add(tooLargeMemory))
		}
		e.finish(d)
		w.Abort(err)
		if errors.Is(err, errAbandoned) {
			e.logger.Debug("download abandoned", zap.String("url", meta.Extra["url"]), zap.Error(err))
		} else {
			e.logger.Warn("download aborted", zap.String("url", meta.Extra["url"]), zap.Error(err))
		}
		return
	}
	meta.Size = n
	recordFetch(meta.Extra["url"], source, resp.StatusCode, n, e.now().Sub(now))
	if err := w.Commit(meta); err != nil {
		e.logger.Warn("cache commit failed", zap.Error(err))
		return
	}
	// Complete: later requests find it in the cache and must not join
	// this download while it puts its reference.
	e.finish(d)
	// The reference lives no longer than the copy is fresh: a peer that
	// follows it takes that as the most the copy may be fresh (askPeer).
	ttl := refGoodTTL
	if resp.StatusCode >= 400 {
		ttl = refNegativeTTL
	}
	ttl = min(ttl, meta.Expires.Sub(e.now()))
	if node := e.dhtNode(); node != nil && self.IsValid() && ttl >= time.Second {
		ref := reference{Addr: self, DHT: node.Addr(), Complete: true, Negative: resp.StatusCode >= 400}
		putCtx, cancelPut := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := node.Put(putCtx, dhtKey, ref.encode(), ttl); err == nil {
			e.refs.put(fr.baseKey, ref, ttl)
		}
		cancelPut()
	}
}

// errAbandoned is why a download was cancelled: no client waited for it
// any more (letGo).
var errAbandoned = errors.New("abandoned: no client wants it any more")

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
