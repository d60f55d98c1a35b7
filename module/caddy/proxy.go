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
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/module/caddy/diskcache"
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
	policy                     Policy
	logger                     *zap.Logger
	selfAddr                   func() netip.AddrPort // this proxy's HTTP address, for references
	userAgent                  string
	zone                       string // the alias zone, for Coralizing redirects
	guard                      originGuard
	// httpsHosts remembers origins that redirected http to https, so later
	// fetches go to https at once.
	httpsHosts sync.Map
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
	scheme       string // "http" or "https"
	host         string // origin host
	port         int    // 0: the scheme's default
	uri          string // path and query as sent
	coralHost    string // the Coralized Host the client used; peers need it
	header       http.Header
	clientIP     string
	// stale is the stored copy's metadata when this fetch revalidates it.
	stale *diskcache.Meta
}

// startDownload returns the download for key, starting one if none runs.
// started reports whether this call started it.
func (e *engine) startDownload(fr fetchRequest) (d *download, started bool) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if d, ok := e.inflight[fr.key]; ok {
		return d, false
	}
	d = &download{ready: make(chan struct{})}
	e.inflight[fr.key] = d
	go e.run(fr, d)
	return d, true
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

// run performs one download: references first, then peers, then the
// origin. It never runs twice for one key at once (startDownload).
func (e *engine) run(fr fetchRequest, d *download) {
	readyOnce := sync.OnceFunc(func() { close(d.ready) })
	// Deferred calls run last first: the download leaves the in-flight
	// table before its waiters are released, so a request that comes after
	// them starts afresh (a revalidation, say) rather than joining a
	// finished download.
	defer readyOnce()
	defer e.finish(fr.key, d)
	ctx, cancel := context.WithCancel(context.Background())
	d.cancel = cancel
	defer func() {
		if d.direct != nil {
			// Handed to its requester unread: the fetch lives until the
			// requester closes the body.
			d.direct.Body = &cancelOnClose{ReadCloser: d.direct.Body, cancel: cancel}
			return
		}
		cancel()
	}()

	if fr.stale != nil {
		e.revalidate(ctx, fr, d, readyOnce)
		return
	}
	// References are per URL, whatever variant: a peer picks the variant
	// the request's fields select, or answers 504.
	dhtKey := coraldht.KeyFor(fr.baseKey)
	self := e.selfAddr()
	selfRef := reference{Addr: self}
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

	source := fmt.Sprintf("peer-l%d", peerLevel)
	idle := e.originTimeout + e.peerTimeout // a peer may itself wait on its origin
	resp, err := e.fetchFromPeers(ctx, fr, peers)
	if resp == nil {
		resp, err = e.fetchFromOrigin(ctx, fr)
		source, idle = "origin", e.originTimeout
	}
	if err != nil {
		d.err = err
		return
	}
	resp.Body = newIdleTimeoutBody(resp.Body, idle, cancel)
	d.source = source
	e.keep(fr, d, resp, source, readyOnce)
}

// keep stores a fetched response and streams it into the cache, or hands
// it to the requester uncached; on success it puts the long-lived
// reference.
func (e *engine) keep(fr fetchRequest, d *download, resp *http.Response, source string, readyOnce func()) {
	self := e.selfAddr()
	dhtKey := coraldht.KeyFor(fr.baseKey)
	now := time.Now()
	loop := e.coralizeRedirect(fr, resp)
	policy := e.policy.ForRequest(fr.header)
	ok, _ := policy.Storable(fr.header, resp.StatusCode, resp.Header)
	transient := resp.StatusCode >= 500 || resp.StatusCode == http.StatusRequestTimeout || resp.StatusCode == http.StatusTooManyRequests
	// Vary: the object is kept under the key of the variant this
	// request selects, and the URL's key gets an index naming the fields.
	key := fr.baseKey
	fields := varyFields(resp.Header)
	if fields != "" {
		vk, vok := VaryKey(fields, fr.header)
		ok = ok && vok
		key = variantKey(fr.baseKey, vk)
	}
	if !ok || transient || loop {
		d.direct = resp
		return
	}
	freshFor, _ := Lifetime(policy, now, resp.StatusCode, resp.Header)
	// A copy from a peer (or an origin behind another cache) is already
	// some age: it is fresh for what is left.
	freshFor -= CurrentAge(resp.Header, now, now, now)
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
		Extra:   map[string]string{"source": source, "url": fr.scheme + "://" + hostPort(fr.host, fr.port) + fr.uri},
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
	}
	if err == nil && resp.ContentLength >= 0 && n != resp.ContentLength {
		err = fmt.Errorf("body ended after %d of %d bytes", n, resp.ContentLength)
	}
	if err != nil {
		// A truncated body is never presented as complete: readers get the
		// error and the object is dropped. Requests from now on start over.
		e.finish(fr.key, d)
		w.Abort(err)
		e.logger.Warn("download aborted", zap.String("url", meta.Extra["url"]), zap.Error(err))
		return
	}
	meta.Size = n
	recordFetch(meta.Extra["url"], source, resp.StatusCode, n, time.Since(now))
	if err := w.Commit(meta); err != nil {
		e.logger.Warn("cache commit failed", zap.Error(err))
		return
	}
	// Complete: later requests find it in the cache and must not join
	// this download while it puts its reference.
	e.finish(fr.key, d)
	if e.node != nil && self.IsValid() {
		ref := reference{Addr: self, Complete: true}
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
	u := "http://" + p.Addr.String() + fr.uri
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	req.Host = fr.coralHost
	// The client's fields go along (less cookies and credentials, as to an
	// origin): the peer picks the variant they select.
	req.Header = originRequestHeader(fr.header, "", e.userAgent)
	req.Header.Set("Cache-Control", "only-if-cached")
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
	if down, until := e.failures.down(fr.host); down {
		e.metrics.originFetch("backoff")
		return nil, fmt.Errorf("origin %s unreachable; not retrying before %s", fr.host, until.Format(time.RFC3339))
	}
	scheme := fr.scheme
	if _, ok := e.httpsHosts.Load(fr.host); ok {
		scheme = "https"
	}
	for range 2 {
		u := scheme + "://" + hostPort(fr.host, fr.port) + fr.uri
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
		if err != nil {
			return nil, err
		}
		req.Header = originRequestHeader(fr.header, fr.clientIP, e.userAgent)
		if adjust != nil {
			adjust(req.Header)
		}
		resp, err := e.origin.Do(req)
		status := 0
		if err == nil {
			status = resp.StatusCode
		}
		e.metrics.originFetch(fetchOutcome(status, err))
		if err != nil {
			if isConnectFailure(err) && !errors.Is(err, errOriginForbidden) {
				e.failures.failed(fr.host)
			}
			return nil, err
		}
		e.failures.succeeded(fr.host)
		if scheme == "http" && isRedirect(resp.StatusCode) {
			if loc, err := resp.Location(); err == nil && loc.Scheme == "https" &&
				strings.EqualFold(loc.Hostname(), fr.host) && loc.RequestURI() == req.URL.RequestURI() {
				resp.Body.Close()
				scheme = "https"
				e.httpsHosts.Store(fr.host, true)
				continue
			}
		}
		return resp, nil
	}
	return nil, errors.New("origin redirected in a loop")
}

func isRedirect(code int) bool {
	switch code {
	case http.StatusMovedPermanently, http.StatusFound, http.StatusSeeOther, http.StatusTemporaryRedirect, http.StatusPermanentRedirect:
		return true
	}
	return false
}

func hostPort(host string, port int) string {
	if port == 0 {
		return host
	}
	return net.JoinHostPort(host, strconv.Itoa(port))
}

// hopHeaders are never forwarded (RFC 9110 §7.6.1), nor are cookies,
// credentials, conditionals and ranges (the proxy fetches whole objects
// and answers those itself).
var hopHeaders = []string{
	"Connection", "Keep-Alive", "Proxy-Connection", "Proxy-Authenticate", "Proxy-Authorization",
	"Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

var notToOrigin = []string{
	"Cookie", "Cookie2", "Authorization", "Accept-Encoding", "Range", "If-Range", "If-None-Match",
	"If-Modified-Since", "If-Match", "If-Unmodified-Since", "Cache-Control", "Pragma",
	"X-Forwarded-For", "X-Forwarded-Host", "X-Forwarded-Proto", "Forwarded", "Via",
}

func originRequestHeader(in http.Header, clientIP, ua string) http.Header {
	h := in.Clone()
	for _, k := range h.Values("Connection") {
		for _, f := range strings.Split(k, ",") {
			h.Del(strings.TrimSpace(f))
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
	for _, k := range notToOrigin {
		h.Del(k)
	}
	h.Set("Via", "1.1 coral")
	if clientIP != "" {
		h.Set("X-Forwarded-For", clientIP)
	}
	if cu := in.Get("User-Agent"); cu != "" {
		h.Set("User-Agent", cu+" "+ua)
	} else {
		h.Set("User-Agent", ua)
	}
	return h
}

// storedHeader is what the cache keeps of an origin response's header:
// no hop-by-hop fields and never Set-Cookie.
func storedHeader(in http.Header) http.Header {
	h := in.Clone()
	for _, k := range h.Values("Connection") {
		for _, f := range strings.Split(k, ",") {
			h.Del(strings.TrimSpace(f))
		}
	}
	for _, k := range hopHeaders {
		h.Del(k)
	}
	h.Del("Set-Cookie")
	h.Del("Set-Cookie2")
	return h
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
	now := time.Now()
	resp, err := e.fetchFromOriginWith(ctx, fr, func(h http.Header) { AddValidators(h, m.Header) })
	if err == nil {
		resp.Body = newIdleTimeoutBody(resp.Body, e.originTimeout, d.cancel)
	}
	status := 0
	if err == nil {
		status = resp.StatusCode
	}
	switch {
	case err == nil && status == http.StatusNotModified:
		resp.Body.Close()
		if Freshen(m.Header, storedHeader(resp.Header)) {
			freshFor, _ := Lifetime(e.policy.ForRequest(fr.header), now, m.Status, m.Header)
			m.Stored, m.Expires = now, now.Add(freshFor)
			if e.store.UpdateMeta(fr.key, m) == nil {
				d.revalidated, d.source = true, "origin"
				return
			}
		}
		// The 304 does not match the copy: fetch it whole.
		resp, err = e.fetchFromOrigin(ctx, fr)
		if err != nil {
			d.err = err
			return
		}
		resp.Body = newIdleTimeoutBody(resp.Body, e.originTimeout, d.cancel)
		d.source = "origin"
		e.keep(fr, d, resp, "origin", readyOnce)
	case StaleOnError(status, m.Header):
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
		e.keep(fr, d, resp, "origin", readyOnce)
	}
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
	u, err := url.Parse(resp.Header.Get("Location"))
	if err != nil || !u.IsAbs() || !strings.EqualFold(u.Hostname(), fr.host) || (u.Scheme != "http" && u.Scheme != "https") {
		return false
	}
	port := 0
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return false
		}
		if !(u.Scheme == "http" && n == 80 || u.Scheme == "https" && n == 443) {
			port = n
		}
	}
	coral := "http://" + CoralizeHost(strings.ToLower(u.Hostname()), port, e.zone) + u.RequestURI()
	self := "http://" + CoralizeHost(fr.host, fr.port, e.zone) + fr.uri
	if coral == self {
		return true
	}
	resp.Header.Set("Location", coral)
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
		Extra:   map[string]string{varyIndexField: fields, "url": fr.scheme + "://" + hostPort(fr.host, fr.port) + fr.uri},
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
