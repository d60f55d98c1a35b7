package coralcaddy

import (
	"context"
	"crypto/sha1"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coraldht"
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
	source string // where the bytes come from: "origin" or "peer-l<level>"
	// For revalidations of a stale copy: the origin said 304 and the copy
	// is fresh again (revalidated), or the origin failed and the stale copy
	// is served with its expiry extended (stale).
	revalidated, stale bool
	// cancel ends the fetch: its requests and connections.
	cancel context.CancelFunc
	// origin is the download slot this download holds (downloadSlots).
	origin string
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
// of a request to d's requester.
func traceInterim(ctx context.Context, d *download) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		Got1xxResponse: func(code int, header textproto.MIMEHeader) error {
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

// engine does the fetching for one handler.
type engine struct {
	store *diskcache.Store
	node  *coraldht.Node
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
	// httpsUpgrades remembers origins (host and http port) that redirected
	// to the https form of a URL, and the https port they named (0: 443),
	// so later fetches go to https at once.
	httpsUpgrades *boundedMap[int]
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
		port = strconv.Itoa(schemeDefaultPort(u.Scheme))
	}
	return net.JoinHostPort(u.Hostname(), port)
}

// startDownload returns the download for fr.key, starting one if none runs
// (started). Starting one takes a download slot: when none is free it waits
// at most wait for one (0: not at all), and returns errDownloadsBusy after
// that, or ctx's error when ctx (the request's) ends first.
func (e *engine) startDownload(ctx context.Context, fr fetchRequest, wait time.Duration) (d *download, started bool, err error) {
	if d := e.inflightFor(fr.key); d != nil {
		return d, false, nil
	}
	origin := fr.originSlot()
	if err := e.slots.acquire(ctx, origin, wait); err != nil {
		return nil, false, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if d, ok := e.inflight[fr.key]; ok {
		e.slots.release(origin) // another request started it meanwhile
		return d, false, nil
	}
	d = &download{ready: make(chan struct{}), done: make(chan struct{}), origin: origin, interim: make(chan interimResponse)}
	e.inflight[fr.key] = d
	go e.run(fr, d)
	return d, true, nil
}

// inflightFor returns the download running for key, if any.
func (e *engine) inflightFor(key string) *download {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.inflight[key]
}

// finish takes d out of the in-flight table (if it is still the download
// there for key).
func (e *engine) finish(key string, d *download) {
	e.mu.Lock()
	if e.inflight[key] == d {
		delete(e.inflight, key)
	}
	e.mu.Unlock()
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

// run performs one download: references first, then peers, then the
// origin. It never runs twice for one key at once (startDownload).
func (e *engine) run(fr fetchRequest, d *download) {
	readyOnce := sync.OnceFunc(func() { close(d.ready) })
	// Deferred calls run last first: the download leaves the in-flight
	// table before its waiters are released, so a request that comes after
	// them starts afresh (a revalidation, say) rather than joining a
	// finished download.
	defer close(d.done)
	defer readyOnce()
	defer e.finish(fr.key, d)
	ctx, cancel := e.downloadContext()
	d.cancel = cancel
	defer func() {
		if d.direct != nil {
			// Handed to its requester unread: the fetch, and its download
			// slot, live until the requester closes the body.
			d.direct.Body = &cancelOnClose{ReadCloser: d.direct.Body, cancel: func() {
				cancel()
				e.slots.release(d.origin)
			}}
			return
		}
		cancel()
		e.slots.release(d.origin)
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
	if e.node != nil && self.IsValid() {
		res, err := e.node.PutGet(ctx, dhtKey, selfRef.encode(), refFetchingTTL)
		if err != nil {
			e.logger.Debug("put+get failed; going to the origin", zap.Error(err))
		}
		for _, v := range res.Values {
			r, err := decodeReference(v.Data)
			if err != nil || r.Addr == self {
				continue
			}
			if !e.peerGuard.permitted(r.Addr.Addr()) {
				// Any member may put any value: a reference to a
				// private or loopback address would make this proxy
				// send requests into its own network.
				e.metrics.peerFetch("refused_address")
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
					_, _ = e.node.Put(renewCtx, dhtKey, selfRef.encode(), refFetchingTTL)
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
	w, err := e.store.Create(key, meta)
	if err != nil {
		// The cache cannot take it (full of downloads, or too large): the
		// client still gets it, uncached.
		e.logger.Debug("not caching", zap.String("url", meta.Extra["url"]), zap.Error(err))
		d.direct = resp
		return
	}
	readyOnce()
	n, err := io.Copy(w, resp.Body)
	resp.Body.Close()
	if ib, ok := resp.Body.(*idleTimeoutBody); ok && err != nil && ib.fired.Load() {
		err = fmt.Errorf("no data for %s after %d bytes", ib.timeout, n)
	} else if err != nil && errors.Is(ctx.Err(), context.DeadlineExceeded) {
		err = fmt.Errorf("download_timeout %s reached after %d bytes", e.downloadTimeout, n)
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
		e.finish(fr.key, d)
		w.Abort(err)
		e.logger.Warn("download aborted", zap.String("url", meta.Extra["url"]), zap.Error(err))
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
	e.finish(fr.key, d)
	if e.node != nil && self.IsValid() {
		ref := reference{Addr: self, DHT: e.node.Addr(), Complete: true}
		ttl := refGoodTTL
		if resp.StatusCode >= 400 {
			ref.Negative, ttl = true, refNegativeTTL
		}
		putCtx, cancelPut := context.WithTimeout(context.Background(), 5*time.Second)
		if _, err := e.node.Put(putCtx, dhtKey, ref.encode(), ttl); err == nil {
			e.refs.put(fr.baseKey, ref, ttl)
		}
		cancelPut()
	}
}

// fetchFromPeers asks the peers for the object, two at a time: the first
// to answer with the object wins; the next ones are tried if both fail.
// Peers are asked with only-if-cached, so a peer never goes to the origin
// on our behalf. It returns a nil response when no peer had it.
func (e *engine) fetchFromPeers(ctx context.Context, fr fetchRequest, peers []reference) (*http.Response, error) {
	for i := 0; i < len(peers); i += 2 {
		batch := peers[i:min(i+2, len(peers))]
		type result struct {
			resp *http.Response
			err  error
		}
		results := make(chan result, len(batch))
		pctx, cancel := context.WithCancel(ctx)
		for _, p := range batch {
			go func() {
				resp, err := e.askPeer(pctx, fr, p)
				results <- result{resp, err}
			}()
		}
		var win *http.Response
		for range batch {
			r := <-results
			if r.err == nil && win == nil {
				win = r.resp
				continue
			}
			if r.resp != nil {
				r.resp.Body.Close()
			}
		}
		if win != nil {
			// The loser was cancelled or closed above; keep the winner's
			// context alive until its body is read.
			win.Body = &cancelOnClose{ReadCloser: win.Body, cancel: cancel}
			return win, nil
		}
		cancel()
	}
	return nil, nil
}

// purgeMemory is how long after a purge an object is fetched from its
// origin only: the longest a network purge may take (its timeout is at
// most 5 min).
const purgeMemory = purgeMaxTimeout

// tooLargeMemory is how long an object that outgrew max_object_size
// mid-download is relayed uncached before the cache tries it again (it
// may have shrunk, or the bound been raised).
const tooLargeMemory = time.Hour

// peerFreshnessField is the response field in which a proxy tells a peer
// how many more seconds its copy is fresh (in its own cache, under its own
// policy). The peer's copy is never fresh longer: not beyond what the
// origin gave, nor beyond the sender's own extensions (min_ttl, stale
// copies served while the origin is down). It is never stored, nor sent
// to clients.
const peerFreshnessField = "Coral-Fresh"

// maxPeerFreshness bounds how long a copy taken from a peer is fresh,
// whatever the peer claims: as long as the reference that led to it lives.
// A member of the network can serve anything; past this bound the copy is
// revalidated with the origin.
const maxPeerFreshness = refGoodTTL

// peerFreshness is the longest a copy from a peer may be fresh: what its
// peerFreshnessField says (0 when absent, repeated or malformed), at most
// maxPeerFreshness.
func peerFreshness(h http.Header) time.Duration {
	v := h.Values(peerFreshnessField)
	if len(v) != 1 {
		return 0
	}
	d, ok := httpcache.ParseDeltaSeconds(strings.TrimSpace(v[0]))
	if !ok {
		return 0
	}
	return min(d, maxPeerFreshness)
}

// idleTimeoutBody ends a response body when one read waits longer than
// timeout (cancelling its fetch): a stalled origin or peer must not hold the
// download, and every client reading it, forever. Only time spent waiting
// in Read counts, so a slow reader downstream is not taken for a stall.
type idleTimeoutBody struct {
	io.ReadCloser
	timeout time.Duration
	timer   *time.Timer
	fired   atomic.Bool
}

func newIdleTimeoutBody(rc io.ReadCloser, timeout time.Duration, cancel context.CancelFunc) io.ReadCloser {
	if timeout <= 0 {
		return rc // no limit configured
	}
	b := &idleTimeoutBody{ReadCloser: rc, timeout: timeout}
	b.timer = time.AfterFunc(timeout, func() {
		b.fired.Store(true)
		cancel()
	})
	b.timer.Stop()
	return b
}

func (b *idleTimeoutBody) Read(p []byte) (int, error) {
	b.timer.Reset(b.timeout)
	n, err := b.ReadCloser.Read(p)
	b.timer.Stop()
	return n, err
}

func (b *idleTimeoutBody) Close() error {
	b.timer.Stop()
	return b.ReadCloser.Close()
}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel()
	return err
}

// askPeer fetches the Coralized URL from one peer, from its cache only.
func (e *engine) askPeer(ctx context.Context, fr fetchRequest, p reference) (*http.Response, error) {
	u := fr.target.OriginURL()
	u.Scheme, u.Host = "http", p.Addr.String()
	// The client's fields go along, as to an origin: the peer picks the
	// variant they select.
	h := originRequestHeader(fr.forwarded(), "", e.userAgent)
	h.Set("Cache-Control", "only-if-cached")
	req := newGet(ctx, u, h)
	req.Host = fr.target.CoralHost(e.zone)
	resp, err := e.peer.Do(req)
	if err != nil {
		e.metrics.peerFetch(fetchOutcome(0, err))
		return nil, err
	}
	if !servedFromPeerCache(resp.Header) {
		// 504: only-if-cached and not cached. Anything else without a
		// cache's Cache-Status is the peer's own refusal or error, never
		// the object.
		e.metrics.peerFetch("not_cached")
		resp.Body.Close()
		return nil, fmt.Errorf("peer %s does not have it (%d)", p.Addr, resp.StatusCode)
	}
	e.metrics.peerFetch("ok")
	resp.Header.Del("Cache-Status")
	return resp, nil
}

// servedFromPeerCache reports whether a peer's answer to an only-if-cached
// request is a cached object: its Cache-Status (written by serveStored)
// says hit or collapsed.
func servedFromPeerCache(h http.Header) bool {
	cs, ok := strings.CutPrefix(h.Get("Cache-Status"), "coral;")
	if !ok {
		return false
	}
	for _, p := range strings.Split(cs, ";") {
		switch strings.TrimSpace(p) {
		case "hit", "collapsed":
			return true
		}
	}
	return false
}

// fetchFromOrigin gets the object from the origin server. When the origin
// redirects to the https form of the same URL, the proxy follows that
// itself (verifying the certificate) instead of handing the redirect to the
// client, which would loop through the Coralized name.
func (e *engine) fetchFromOrigin(ctx context.Context, fr fetchRequest) (*http.Response, error) {
	return e.fetchFromOriginWith(ctx, fr, nil)
}

// fetchFromOriginWith is fetchFromOrigin with a hook that adjusts the
// request header (validators for a revalidation).
func (e *engine) fetchFromOriginWith(ctx context.Context, fr fetchRequest, adjust func(http.Header)) (*http.Response, error) {
	u := fr.originURL()
	if port, ok := e.httpsUpgrades.get(endpoint(u)); ok && u.Scheme == "http" {
		u = fr.httpsURL(port)
	}
	for range 2 {
		ep := endpoint(u)
		if down, until := e.failures.down(ep); down {
			e.metrics.originFetch("backoff")
			return nil, fmt.Errorf("origin %s unreachable; not retrying before %s", ep, until.Format(time.RFC3339))
		}
		h := originRequestHeader(fr.forwarded(), fr.clientIP, e.userAgent)
		if adjust != nil {
			adjust(h)
		}
		resp, err := e.origin.Do(newGet(ctx, u, h))
		if tr, ok := e.origin.Transport.(*http.Transport); ok && refusedTransferCoding(err) {
			// Valid HTTP/1.1 that net/http does not take: see
			// transfercoding.go.
			resp, err = fetchTransferCoded(ctx, tr, newGet(ctx, u, h), e.originTimeout)
		}
		status := 0
		if err == nil {
			status = resp.StatusCode
		}
		e.metrics.originFetch(fetchOutcome(status, err))
		if err != nil {
			if isConnectFailure(err) && !errors.Is(err, errOriginForbidden) {
				e.failures.failed(ep)
			}
			return nil, err
		}
		e.failures.succeeded(ep)
		if u.Scheme == "http" && isRedirect(resp.StatusCode) {
			if port, ok := httpsUpgradePort(u, resp); ok {
				resp.Body.Close()
				e.httpsUpgrades.put(ep, port)
				u = fr.httpsURL(port)
				continue
			}
		}
		return resp, nil
	}
	return nil, errors.New("origin redirected in a loop")
}

// httpsURL is the origin URL over https on port (0: 443).
func (fr *fetchRequest) httpsURL(port int) *url.URL {
	t := fr.target
	t.Scheme, t.Port = "https", port
	return t.OriginURL()
}

// httpsUpgradePort reports whether resp, the answer to a GET of the http
// URL u, redirects to the https form of u (the same host and request
// target), and the redirect's port (0: the default).
func httpsUpgradePort(u *url.URL, resp *http.Response) (port int, ok bool) {
	loc, err := resp.Location()
	if err != nil || !strings.EqualFold(loc.Scheme, "https") || loc.User != nil ||
		!strings.EqualFold(loc.Hostname(), u.Hostname()) || loc.RequestURI() != u.RequestURI() {
		return 0, false
	}
	if p := loc.Port(); p != "" {
		n, ok := parsePortLabel(p)
		if !ok {
			return 0, false
		}
		port = n
	}
	return port, true
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

// staleExtension is how long a stale copy stays servable after a failed
// revalidation before the proxy tries the origin again.
func (e *engine) staleExtension() time.Duration {
	return max(e.policy.MinTTL, time.Minute)
}

// revalidate asks the origin whether a stale copy is still good, with the
// copy's validators. 304: the copy is freshened and fresh again. A new
// response: it replaces the copy. Failure (unreachable, or 403, 404, 408,
// 500, 502, 503, 504) where the copy allows it: the stale copy is served and
// its expiry extended, so a dead origin does not take its content with it.
func (e *engine) revalidate(ctx context.Context, fr fetchRequest, d *download, readyOnce func()) {
	m := fr.stale.Clone()
	requested := e.now()
	resp, err := e.fetchFromOriginWith(ctx, fr, func(h http.Header) { httpcache.AddValidators(h, m.Header) })
	now := e.now()
	if err == nil {
		resp.Body = newIdleTimeoutBody(resp.Body, e.originTimeout, d.cancel)
	}
	status := 0
	if err == nil {
		status = resp.StatusCode
	}
	policy := e.policy.ForRequest(fr.header)
	switch {
	case err == nil && status == http.StatusNotModified:
		resp.Body.Close()
		if httpcache.Freshen(m.Header, storedHeader(resp.Header)) {
			// The 304 is the response now: its age is the copy's age.
			age := httpcache.CorrectedInitialAge(resp.Header, requested, now)
			freshFor, _ := httpcache.Lifetime(policy, now, m.Status, m.Header)
			m.Stored, m.Expires = now, now.Add(freshFor-age)
			m.Extra[ageField] = formatAge(age)
			if e.store.UpdateMeta(fr.key, m) == nil {
				d.revalidated, d.source = true, "origin"
				return
			}
		}
		// The 304 does not match the copy: fetch it whole.
		requested = e.now()
		resp, err = e.fetchFromOrigin(ctx, fr)
		if err != nil {
			d.err = err
			return
		}
		resp.Body = newIdleTimeoutBody(resp.Body, e.originTimeout, d.cancel)
		d.source = "origin"
		e.keep(ctx, fr, d, resp, "origin", requested, readyOnce)
	case policy.StaleOnError(status, m.Header, staleness(policy, m, now)):
		if resp != nil {
			resp.Body.Close()
		}
		m.Expires = now.Add(e.staleExtension())
		if uerr := e.store.UpdateMeta(fr.key, m); uerr != nil {
			e.logger.Debug("extending a stale copy failed", zap.Error(uerr))
		}
		e.logger.Info("origin failed; serving the stale copy", zap.String("url", m.Extra["url"]), zap.Int("status", status), zap.Error(err))
		d.stale, d.source = true, "local"
	case err != nil:
		d.err = err
	default:
		d.source = "origin"
		e.keep(ctx, fr, d, resp, "origin", requested, readyOnce)
	}
}

// ageField is the Meta.Extra entry that keeps a stored response's
// corrected initial age (RFC 9111 §4.2.3), in whole seconds: its age when
// it arrived. Its current age, what Age says when it is served, is that
// plus the time since Meta.Stored (storedAge).
const ageField = "age"

func formatAge(d time.Duration) string { return strconv.FormatInt(int64(d/time.Second), 10) }

// storedAge is the current age of a stored response at now: its corrected
// initial age plus its resident time, never more than 2^31 s.
func storedAge(m *diskcache.Meta, now time.Time) time.Duration {
	var initial time.Duration
	if v, ok := m.Extra[ageField]; ok {
		initial, _ = httpcache.ParseDeltaSeconds(v)
	}
	return min(httpcache.AddSaturating(initial, max(now.Sub(m.Stored), 0)), httpcache.MaxDelta)
}

// staleness is how long a stored response has been stale at now by its
// own freshness lifetime (not by Meta.Expires, which a failed
// revalidation extends): current age minus lifetime.
func staleness(p httpcache.Policy, m diskcache.Meta, now time.Time) time.Duration {
	lifetime, _ := httpcache.Lifetime(p, m.Stored, m.Status, m.Header)
	return max(storedAge(&m, now)-lifetime, 0)
}

// coralizeRedirect rewrites an absolute redirect to the origin's own host
// into its Coralized form, so the client stays on Coral. A redirect that
// would come back to the very URL being fetched (a loop through the
// Coralized name) keeps the origin's Location, which takes the client to
// the origin directly, and is not cached: loop reports it.
func (e *engine) coralizeRedirect(fr fetchRequest, resp *http.Response) (loop bool) {
	if !isRedirect(resp.StatusCode) || e.zone == "" {
		return false
	}
	loc, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || !loc.IsAbs() || loc.Opaque != "" || loc.User != nil ||
		(loc.Scheme != "http" && loc.Scheme != "https") || !strings.EqualFold(loc.Hostname(), fr.target.Host) {
		return false
	}
	port := 0
	if p := loc.Port(); p != "" {
		n, ok := parsePortLabel(p)
		if !ok {
			return false
		}
		if n != schemeDefaultPort(loc.Scheme) {
			port = n
		}
	}
	to := Target{Host: fr.target.Host, Port: port, Scheme: "http", Path: loc.EscapedPath(), RawQuery: loc.RawQuery}
	if to.Key() == fr.target.Key() {
		return true
	}
	coral := to.OriginURL()
	coral.Host = to.CoralHost(e.zone)
	coral.Fragment, coral.RawFragment = loc.Fragment, loc.RawFragment
	resp.Header.Set("Location", coral.String())
	return false
}

// Vary. Origins are asked for the identity encoding, so Accept-Encoding
// selects nothing here. A response that varies on other request fields is
// kept per variant: the URL's key holds a small index entry (no body,
// Extra[varyIndexField] naming the fields), and each variant lives under
// variantKey(URL key, VaryKey(fields, its request)). The index is only a
// pointer: it is read whatever its age, and rewritten when a response
// names other fields.
const varyIndexField = "vary-index"

// varyFields returns the request fields a response varies on, other than
// Accept-Encoding: lower case, sorted, without duplicates, joined with
// commas; "" when there are none. Vary: * is refused before (Storable).
func varyFields(h http.Header) string {
	var names []string
	for _, v := range h.Values("Vary") {
		for _, f := range strings.Split(v, ",") {
			f = strings.ToLower(strings.TrimSpace(f))
			if f != "" && f != "accept-encoding" {
				names = append(names, f)
			}
		}
	}
	slices.Sort(names)
	return strings.Join(slices.Compact(names), ",")
}

// variantKey is the store key of one variant of the object under base.
func variantKey(base, varyKey string) string {
	sum := sha1.Sum([]byte(base + "\n" + varyKey))
	return hex.EncodeToString(sum[:])
}

// writeVaryIndex makes the URL's entry an index of variants varying on
// fields, unless it already is one. It reports whether the index is in
// place.
func (e *engine) writeVaryIndex(fr fetchRequest, fields string, now time.Time, freshFor time.Duration) bool {
	if m, ok := e.store.Peek(fr.baseKey); ok && m.Extra[varyIndexField] == fields {
		return true
	}
	m := diskcache.Meta{
		Key:     fr.baseKey,
		Status:  http.StatusOK,
		Header:  http.Header{"Vary": {fields}},
		Stored:  now,
		Expires: now.Add(freshFor),
		Size:    0,
		Extra:   map[string]string{varyIndexField: fields, "url": fr.originURL().String()},
	}
	w, err := e.store.Create(fr.baseKey, m)
	if err != nil {
		e.logger.Debug("no vary index", zap.String("url", m.Extra["url"]), zap.Error(err))
		return false
	}
	if err := w.Commit(m); err != nil {
		e.logger.Debug("no vary index", zap.String("url", m.Extra["url"]), zap.Error(err))
		return false
	}
	return true
}
