package coralcaddy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/dustin/go-humanize"
	"go.uber.org/zap"
)

func init() {
	caddy.RegisterModule(Handler{})
	httpcaddyfile.RegisterHandlerDirective("coral_proxy", parseHandlerCaddyfile)
	httpcaddyfile.RegisterDirectiveOrder("coral_proxy", httpcaddyfile.Before, "reverse_proxy")
}

// Handler is the HTTP handler "coral_proxy": it serves Coralized URLs
// (http://www.example.com.nyud.net/…) from its cache, from peer proxies
// found through the Coral DSHT, or from the origin.
type Handler struct {
	// Zone is the alias zone Coralized host names end in, e.g. "nyud.net".
	Zone string `json:"zone,omitempty"`

	// CacheDir is where cached objects live. Default "coral-cache" under
	// Caddy's data directory.
	CacheDir string `json:"cache_dir,omitempty"`

	// CacheSize bounds the bytes the cache keeps on disk; least recently
	// used objects go first. Default 1 GiB.
	CacheSize int64 `json:"cache_size,omitempty"`

	// AllowOrigins lists address prefixes of origins the proxy may fetch
	// from although they are private, loopback or otherwise not public.
	// By default such origins are refused.
	AllowOrigins []string `json:"allow_origins,omitempty"`

	// OriginScheme is how origins are fetched: "http", "https" or "auto"
	// (default: http, following a redirect to the https form of the same
	// URL itself).
	OriginScheme string `json:"origin_scheme,omitempty"`

	// DefaultTTL is how long a response without freshness information is
	// fresh. Default 12h. MinTTL is the least a cached response is fresh,
	// overriding no-cache and shorter max-age. Default 5m. Both 0 gives
	// strict RFC 9111 behaviour.
	DefaultTTL *caddy.Duration `json:"default_ttl,omitempty"`
	MinTTL     *caddy.Duration `json:"min_ttl,omitempty"`

	// OriginTimeout bounds connecting to an origin and waiting for its
	// response header. Default 15s.
	OriginTimeout caddy.Duration `json:"origin_timeout,omitempty"`

	// PeerTimeout bounds connecting to a peer proxy and waiting for its
	// response header. Default 3s.
	PeerTimeout caddy.Duration `json:"peer_timeout,omitempty"`

	// PeerAddress is the HTTP address other proxies use to reach this one.
	// Default: the coral app's node IP and the port the request came in on.
	PeerAddress string `json:"peer_address,omitempty"`

	// Blacklist is a file of domains (one per line; "example.com" blocks
	// it and every name under it, "*.example.com" only the names under it)
	// whose content this proxy refuses with 403. It is checked for changes
	// every BlacklistPoll (default 10s). Default: none.
	Blacklist     string         `json:"blacklist,omitempty"`
	BlacklistPoll caddy.Duration `json:"blacklist_poll,omitempty"`

	// RateLimit is the requests per second one client (an IPv4 address or
	// IPv6 /64) may make, with bursts of RateBurst; beyond that, 429.
	// Defaults 10 and 50: a page with its images fits in a burst. A
	// negative RateLimit turns the limit off.
	RateLimit float64 `json:"rate_limit,omitempty"`
	RateBurst int     `json:"rate_burst,omitempty"`

	// BandwidthBudget is how many bytes this proxy serves per
	// BandwidthWindow (default 24h); beyond it, clients are redirected to
	// the origin with "coral-no-serve" in the query. Default: no budget.
	BandwidthBudget int64          `json:"bandwidth_budget,omitempty"`
	BandwidthWindow caddy.Duration `json:"bandwidth_window,omitempty"`

	app      *App
	store    *diskcache.Store
	storeKey string
	eng      *engine
	metrics  *proxyMetrics
	abuse    *abuseControls
	logger   *zap.Logger
}

// CaddyModule returns the Caddy module information.
func (Handler) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "http.handlers.coral_proxy", New: func() caddy.Module { return new(Handler) }}
}

// stores holds the open caches by directory across reloads.
var stores = caddy.NewUsagePool()

// storeEntry is a cache and the references put for what it holds.
type storeEntry struct {
	*diskcache.Store
	refs *refTable
}

func (s *storeEntry) Destruct() error {
	s.refs.stop()
	return s.Close()
}

// Defaults.
const (
	defaultCacheSize     = 1 << 30
	defaultOriginTimeout = 15 * time.Second
	defaultPeerTimeout   = 3 * time.Second
	proxyVersion         = "CoralWebPrx/2.0"
)

// Provision finds the coral app (and so the DSHT node), opens the cache
// and builds the fetch engine.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	app, err := ctx.App("coral")
	if err != nil {
		return fmt.Errorf("coral_proxy needs the coral app (the coral global option): %w", err)
	}
	h.app = app.(*App)
	if h.CacheDir == "" {
		h.CacheDir = filepath.Join(caddy.AppDataDir(), "coral-cache")
	}
	if h.CacheSize == 0 {
		h.CacheSize = defaultCacheSize
	}
	if h.OriginTimeout == 0 {
		h.OriginTimeout = caddy.Duration(defaultOriginTimeout)
	}
	if h.PeerTimeout == 0 {
		h.PeerTimeout = caddy.Duration(defaultPeerTimeout)
	}
	if h.OriginScheme == "" {
		h.OriginScheme = "auto"
	}
	policy := DefaultPolicy()
	if h.DefaultTTL != nil {
		policy.DefaultTTL = time.Duration(*h.DefaultTTL)
	}
	if h.MinTTL != nil {
		policy.MinTTL = time.Duration(*h.MinTTL)
	}
	var guard originGuard
	for _, a := range h.AllowOrigins {
		p, err := parsePrefix(a)
		if err != nil {
			return fmt.Errorf("coral_proxy: allow_origins %q: %w", a, err)
		}
		guard.allow = append(guard.allow, p)
	}
	var peerAddr netip.AddrPort
	if h.PeerAddress != "" {
		if peerAddr, err = netip.ParseAddrPort(h.PeerAddress); err != nil {
			return fmt.Errorf("coral_proxy: peer_address %q: want IP:PORT", h.PeerAddress)
		}
	}
	dir, err := filepath.Abs(h.CacheDir)
	if err != nil {
		return err
	}
	val, _, err := stores.LoadOrNew(dir, func() (caddy.Destructor, error) {
		s, err := diskcache.Open(diskcache.Options{Dir: dir, MaxBytes: h.CacheSize})
		if err != nil {
			return nil, err
		}
		refs := newRefTable(s, h.app.Node())
		refs.run(time.Minute)
		return &storeEntry{Store: s, refs: refs}, nil
	})
	if err != nil {
		return fmt.Errorf("coral_proxy: cache %s: %w", dir, err)
	}
	h.storeKey = dir
	entry := val.(*storeEntry)
	h.setup(entry.Store, h.app.Node(), guard, policy)
	h.eng.refs = entry.refs
	if peerAddr.IsValid() {
		h.eng.peerAddr.Store(&peerAddr)
	}
	if h.metrics, err = newProxyMetrics(ctx.GetMetricsRegistry(), h.app, h.store); err != nil {
		return err
	}
	h.eng.metrics = h.metrics
	if err := h.provisionAbuse(); err != nil {
		return err
	}
	registerProxy(h)
	return nil
}

// provisionAbuse sets up the blacklist, the rate limit and the budget.
func (h *Handler) provisionAbuse() error {
	a := &abuseControls{}
	if h.Blacklist != "" {
		every := time.Duration(h.BlacklistPoll)
		if every <= 0 {
			every = defaultBlacklistPoll
		}
		logger := h.logger
		bl, err := newBlacklist(h.Blacklist, every, func(format string, args ...any) { logger.Warn(fmt.Sprintf(format, args...)) })
		if err != nil {
			return fmt.Errorf("coral_proxy: blacklist: %w", err)
		}
		a.blacklist = bl
	}
	rate, burst := h.RateLimit, h.RateBurst
	if rate == 0 {
		rate = defaultRate
	}
	if burst == 0 {
		burst = defaultBurst
	}
	a.rate = newRateLimiter(rate, burst, defaultMaxClients)
	a.peerRate = newRateLimiter(rate*peerRateFactor, burst*peerRateFactor, defaultMaxClients)
	window := time.Duration(h.BandwidthWindow)
	if window <= 0 {
		window = defaultBudgetWindow
	}
	a.budget = newBandwidthBudget(h.BandwidthBudget, window)
	h.abuse = a
	return nil
}

// setup builds the fetch engine around a store and a node.
func (h *Handler) setup(store *diskcache.Store, node *coraldht.Node, guard originGuard, policy Policy) {
	h.store = store
	peerTransport := &http.Transport{
		Proxy:                  nil,
		DialContext:            (&net.Dialer{Timeout: time.Duration(h.PeerTimeout)}).DialContext,
		ResponseHeaderTimeout:  time.Duration(h.PeerTimeout),
		MaxResponseHeaderBytes: 64 << 10,
		MaxIdleConnsPerHost:    8,
		DisableCompression:     true,
	}
	h.eng = &engine{
		store:         h.store,
		node:          node,
		originTimeout: time.Duration(h.OriginTimeout),
		peerTimeout:   time.Duration(h.PeerTimeout),
		origin:        &http.Client{Transport: originTransport(guard, time.Duration(h.OriginTimeout), time.Duration(h.OriginTimeout)), CheckRedirect: noRedirects},
		peer:          &http.Client{Transport: peerTransport, CheckRedirect: noRedirects},
		failures:      newOriginFailures(3, 30*time.Second),
		policy:        policy,
		logger:        h.logger,
		selfAddr:      h.selfAddr,
		userAgent:     proxyVersion,
		zone:          h.Zone,
		inflight:      make(map[string]*download),
		guard:         guard,
	}
}

func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

func parsePrefix(s string) (netip.Prefix, error) {
	if p, err := netip.ParsePrefix(s); err == nil {
		return p.Masked(), nil
	}
	a, err := netip.ParseAddr(s)
	if err != nil {
		return netip.Prefix{}, errors.New("not a prefix or address")
	}
	return netip.PrefixFrom(a, a.BitLen()), nil
}

// selfAddr is the HTTP address put in DSHT references.
func (h *Handler) selfAddr() netip.AddrPort {
	if p := h.eng.peerAddr.Load(); p != nil {
		return *p
	}
	return netip.AddrPort{}
}

// learnPeerAddr fills in this proxy's HTTP address from the first request:
// the node's IP and the port the request came in on.
func (h *Handler) learnPeerAddr(r *http.Request) {
	if h.eng.peerAddr.Load() != nil {
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
	ip := h.eng.node.Addr().Addr()
	ap := netip.AddrPortFrom(ip, lap.Port())
	h.eng.peerAddr.CompareAndSwap(nil, &ap)
}

// Validate checks the configuration.
func (h *Handler) Validate() error {
	if h.Zone == "" {
		return errors.New("coral_proxy: the zone is required")
	}
	switch h.OriginScheme {
	case "", "http", "https", "auto":
	default:
		return fmt.Errorf("coral_proxy: origin_scheme %q: want http, https or auto", h.OriginScheme)
	}
	if h.CacheSize < 0 {
		return errors.New("coral_proxy: cache_size must be positive")
	}
	return nil
}

// Cleanup releases this configuration's hold on the cache.
func (h *Handler) Cleanup() error {
	unregisterProxy(h)
	h.metrics.release()
	if h.abuse != nil && h.abuse.blacklist != nil {
		h.abuse.blacklist.Close()
	}
	if h.storeKey == "" {
		return nil
	}
	_, err := stores.Delete(h.storeKey)
	return err
}

// ServeHTTP serves a Coralized request.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	mw := &metricsWriter{ResponseWriter: w}
	acct := &requestAccount{cacheStatus: "refused", source: "none"}
	defer func() { h.metrics.request(acct.cacheStatus, acct.source, mw.n) }()
	return h.serve(mw, r, acct)
}

// requestAccount is what a request is counted as in the metrics.
type requestAccount struct {
	cacheStatus, source string
	retried             bool // a joined download vanished once already
}

func (a *requestAccount) set(cacheStatus, source string) {
	a.cacheStatus, a.source = cacheStatus, source
}

func (h *Handler) serve(w http.ResponseWriter, r *http.Request, acct *requestAccount) error {
	origin, port, err := ParseCoralized(r.Host, h.Zone)
	switch {
	case errors.Is(err, ErrNotCoralized):
		return caddyhttp.Error(http.StatusMisdirectedRequest,
			fmt.Errorf("this Coral proxy serves only host names ending in .%s (Coralized URLs); %q is not one", strings.TrimSuffix(h.Zone, "."), r.Host))
	case err != nil:
		return caddyhttp.Error(StatusForHostError(err), err)
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		return caddyhttp.Error(http.StatusMethodNotAllowed, fmt.Errorf("coral_proxy serves GET and HEAD only"))
	}
	if a, ok := OriginAddr(origin); ok && !h.eng.guard.permitted(a) {
		return caddyhttp.Error(http.StatusForbidden, fmt.Errorf("origin %s: %w", origin, errOriginForbidden))
	}
	h.learnPeerAddr(r)
	originURL := "http://" + hostPort(origin, port) + r.URL.RequestURI()
	if done, err := h.abuse.admit(w, r, origin, originURL); done {
		return err
	}
	w = h.abuse.count(w)

	scheme := "http"
	if h.OriginScheme == "https" {
		scheme = "https"
	}
	key := CacheKey("http", origin, port, r.URL.EscapedPath(), r.URL.RawQuery)
	fr := fetchRequest{
		key: key, baseKey: key, scheme: scheme, host: origin, port: port, uri: r.URL.RequestURI(),
		coralHost: r.Host, header: r.Header, clientIP: clientIP(r),
	}
	onlyIfCached := ParseRequestCacheControl(r.Header).OnlyIfCached
	auth := r.Header.Get("Authorization") != ""

	if !auth {
		if rd, m, ok := h.lookup(r.Context(), &fr); ok {
			if !rd.Complete() {
				// Being downloaded right now: join it.
				acct.set("collapsed", m.Extra["source"])
				return h.serveStored(w, r, rd, "fwd=uri-miss; collapsed", m.Extra["source"])
			}
			if time.Now().Before(m.Expires) {
				h.eng.refs.touch(fr.baseKey)
				acct.set("hit", "local")
				return h.serveStored(w, r, rd, "hit", "local")
			}
			rd.Close()
			// Stale: revalidate with the origin. Within stale-while-
			// revalidate the stale copy is served at once meanwhile.
			fr.stale = &m
			if swr, _ := StaleWindows(m.Header); time.Since(m.Expires) < swr {
				h.eng.startDownload(fr)
				if rd, ok := h.store.GetContext(r.Context(), fr.key); ok {
					acct.set("stale", "local")
					return h.serveStored(w, r, rd, "hit; fwd=stale", "stale-while-revalidate")
				}
			}
			d, started := h.eng.startDownload(fr)
			return h.afterDownload(w, r, fr, d, started, acct)
		}
	}
	if onlyIfCached {
		// A peer (or a client) that wants no origin fetch. A download under
		// way here still counts: wait for it, a little. The bound breaks the
		// rare cycle of two proxies each waiting on the other.
		if d := h.eng.inflightFor(fr.key); d != nil {
			t := time.NewTimer(time.Duration(h.PeerTimeout))
			defer t.Stop()
			select {
			case <-d.ready:
				if d.err == nil && d.direct == nil {
					if rd, _, ok := h.lookup(r.Context(), &fr); ok {
						acct.set("collapsed", d.source)
						return h.serveStored(w, r, rd, "fwd=uri-miss; collapsed", d.source)
					}
				}
			case <-t.C:
			case <-r.Context().Done():
				return r.Context().Err()
			}
		}
		w.Header().Set("Cache-Status", `coral; fwd=miss; detail="only-if-cached"`)
		return caddyhttp.Error(http.StatusGatewayTimeout, errors.New("not in this proxy's cache (only-if-cached)"))
	}
	d, started := h.eng.startDownload(fr)
	return h.afterDownload(w, r, fr, d, started, acct)
}

// fetchFailed is the answer to a request whose fetch failed: 403 when the
// origin's name led to an address the proxy may not contact (as for an
// address in the Host itself), else 502.
func fetchFailed(acct *requestAccount, err error) error {
	if errors.Is(err, errOriginForbidden) {
		acct.set("refused", "none")
		return caddyhttp.Error(http.StatusForbidden, err)
	}
	acct.set("miss", "none")
	return caddyhttp.Error(http.StatusBadGateway, err)
}

// lookup opens the stored object for fr's request: the entry under the
// URL's key or, when that entry is a Vary index, the variant the request's
// fields select. It points fr.key at the object's key, found or not, so a
// download started after a miss fills the right entry. m is the object's
// metadata.
func (h *Handler) lookup(ctx context.Context, fr *fetchRequest) (rd *diskcache.Reader, m diskcache.Meta, ok bool) {
	fr.key = fr.baseKey
	rd, ok = h.store.GetContext(ctx, fr.baseKey)
	if !ok {
		return nil, m, false
	}
	m = rd.Meta()
	fields := m.Extra[varyIndexField]
	if fields == "" {
		return rd, m, true
	}
	rd.Close()
	vk, vok := VaryKey(fields, fr.header)
	if !vok {
		return nil, diskcache.Meta{}, false
	}
	fr.key = variantKey(fr.baseKey, vk)
	if rd, ok = h.store.GetContext(ctx, fr.key); !ok {
		return nil, diskcache.Meta{}, false
	}
	return rd, rd.Meta(), true
}

// afterDownload waits for a download (or revalidation) to have something
// to serve, and serves it.
func (h *Handler) afterDownload(w http.ResponseWriter, r *http.Request, fr fetchRequest, d *download, started bool, acct *requestAccount) error {
	select {
	case <-d.ready:
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
	if d.revalidated || d.stale {
		rd, _, ok := h.lookup(r.Context(), &fr)
		if !ok {
			return caddyhttp.Error(http.StatusBadGateway, errors.New("the cached copy went away"))
		}
		if d.revalidated {
			acct.set("hit", "local")
			return h.serveStored(w, r, rd, "hit; fwd=stale; fwd-status=304", "revalidated")
		}
		acct.set("stale", "local")
		return h.serveStored(w, r, rd, "hit; fwd=stale", "stale")
	}
	if d.err != nil {
		return fetchFailed(acct, d.err)
	}
	if started {
		acct.set("miss", d.source)
	} else {
		acct.set("collapsed", d.source)
	}
	if d.direct != nil {
		if !started {
			// The response may not be shared; fetch our own copy.
			resp, err := h.eng.fetchFromOrigin(r.Context(), fr)
			if err != nil {
				return fetchFailed(acct, err)
			}
			return h.serveDirect(w, resp, "origin")
		}
		return h.serveDirect(w, d.direct, d.source)
	}
	// The object may have landed under a variant key (the response
	// varies), which lookup finds through the URL's entry.
	rd, _, ok := h.lookup(r.Context(), &fr)
	if !ok && !started && !acct.retried {
		// The download this request joined failed or was dropped before
		// it could be read: try once more.
		acct.retried = true
		d, started = h.eng.startDownload(fr)
		return h.afterDownload(w, r, fr, d, started, acct)
	}
	if !ok {
		return caddyhttp.Error(http.StatusBadGateway, errors.New("the download ended before the object could be read"))
	}
	status := "fwd=uri-miss"
	if !started {
		status = "fwd=uri-miss; collapsed"
	}
	return h.serveStored(w, r, rd, status, d.source)
}

// serveStored writes a cached (or still arriving) object.
func (h *Handler) serveStored(w http.ResponseWriter, r *http.Request, rd *diskcache.Reader, status, source string) error {
	defer rd.Close()
	m := rd.Meta()
	hdr := w.Header()
	// m.Header may be shared with other readers of the object (the store
	// keeps the metadata of recently read objects in memory), so the
	// response gets value slices of its own, capped so that an append
	// reallocates: one allocation for them all and the fields set here.
	vals := make([]string, 0, len(m.Header)+4)
	for k, v := range m.Header {
		vals = append(vals, v...)
		hdr[k] = vals[len(vals)-len(v) : len(vals) : len(vals)]
	}
	delete(hdr, "Set-Cookie")
	vals = setOwnValue(hdr, vals, "Via", "1.1 coral")
	vals = setOwnValue(hdr, vals, "Cache-Status", cacheStatusValue(status, source))
	age := max(time.Since(m.Stored), 0)
	vals = setOwnValue(hdr, vals, "Age", strconv.FormatInt(int64(age/time.Second), 10))
	if rd.Complete() && m.Status == http.StatusOK {
		if !plainRequest(r, hdr) {
			// Ranges and conditional requests are answered from the cache.
			// The file itself, so that bodies go out with sendfile.
			http.ServeContent(w, r, "", lastModified(m.Header), rd.File())
			return nil
		}
		// What ServeContent sends for a request without conditions or
		// ranges, without its checks, date parsing and formatting.
		setOwnValue(hdr, vals, "Accept-Ranges", "bytes")
		if cl := hdr["Content-Length"]; len(cl) != 1 || !isDecimal(cl[0], m.Size) {
			hdr["Content-Length"] = []string{strconv.FormatInt(m.Size, 10)}
		}
		w.WriteHeader(http.StatusOK)
		if r.Method == http.MethodHead {
			return nil
		}
		if _, err := rd.WriteTo(w); err != nil {
			// The client went away, or the file is damaged: never let a
			// truncated body look complete.
			panic(http.ErrAbortHandler)
		}
		return nil
	}
	hdr.Del("Content-Length")
	if m.Size >= 0 {
		hdr.Set("Content-Length", fmt.Sprint(m.Size))
	}
	w.WriteHeader(m.Status)
	if r.Method == http.MethodHead {
		return nil
	}
	if _, err := io.Copy(w, rd); err != nil {
		// The download failed or the client went away: never let a
		// truncated body look complete.
		panic(http.ErrAbortHandler)
	}
	return nil
}

// setOwnValue sets hdr[key] to the one value v, appended to vals (see
// serveStored), and returns vals.
func setOwnValue(hdr http.Header, vals []string, key, v string) []string {
	vals = append(vals, v)
	hdr[key] = vals[len(vals)-1 : len(vals) : len(vals)]
	return vals
}

// cacheStatusValue is the Cache-Status field of a served object.
func cacheStatusValue(status, source string) string {
	if status == "hit" && source == "local" {
		return `coral; hit; detail="local"` // every hit: no formatting
	}
	return fmt.Sprintf(`coral; %s; detail=%q`, status, source)
}

// plainRequest reports whether http.ServeContent would send the whole
// stored response with nothing to decide: no range or precondition in the
// request, a Content-Type in the response (else it sniffs one) and no
// Content-Encoding (else it leaves Content-Length out).
func plainRequest(r *http.Request, hdr http.Header) bool {
	for _, k := range [...]string{"Range", "If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since", "If-Range"} {
		if _, ok := r.Header[k]; ok {
			return false
		}
	}
	_, typed := hdr["Content-Type"]
	_, encoded := hdr["Content-Encoding"]
	return typed && !encoded
}

// isDecimal reports whether s is n as strconv.FormatInt writes it.
func isDecimal(s string, n int64) bool {
	var b [20]byte
	return string(strconv.AppendInt(b[:0], n, 10)) == s
}

func lastModified(h http.Header) time.Time {
	t, err := http.ParseTime(h.Get("Last-Modified"))
	if err != nil {
		return time.Time{}
	}
	return t
}

// serveDirect streams a response that is not cached.
func (h *Handler) serveDirect(w http.ResponseWriter, resp *http.Response, source string) error {
	defer resp.Body.Close()
	hdr := w.Header()
	for k, v := range storedHeader(resp.Header) {
		hdr[k] = v
	}
	hdr.Set("Via", "1.1 coral")
	hdr.Set("Cache-Status", fmt.Sprintf(`coral; fwd=uri-miss; stored=false; detail=%q`, source))
	w.WriteHeader(resp.StatusCode)
	if _, err := io.Copy(w, resp.Body); err != nil {
		panic(http.ErrAbortHandler)
	}
	return nil
}

func clientIP(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}

// parseHandlerCaddyfile reads the coral_proxy directive.
func parseHandlerCaddyfile(h httpcaddyfile.Helper) (caddyhttp.MiddlewareHandler, error) {
	var hd Handler
	err := hd.UnmarshalCaddyfile(h.Dispenser)
	return &hd, err
}

// UnmarshalCaddyfile implements caddyfile.Unmarshaler:
//
//	coral_proxy ZONE {
//	    cache_dir      DIR
//	    cache_size     SIZE          # e.g. 1GiB
//	    allow_origins  PREFIX...     # private origins allowed anyway
//	    origin_scheme  http|https|auto
//	    default_ttl    DURATION
//	    min_ttl        DURATION
//	    origin_timeout DURATION
//	    peer_timeout   DURATION
//	    peer_address   IP:PORT
//	    blacklist      FILE [POLL]
//	    rate_limit     PER_SECOND BURST | off
//	    bandwidth_budget SIZE [per DURATION]
//	}
func (h *Handler) UnmarshalCaddyfile(d *caddyfile.Dispenser) error {
	d.Next() // the directive name
	if !d.NextArg() {
		return d.ArgErr()
	}
	h.Zone = d.Val()
	if d.NextArg() {
		return d.ArgErr()
	}
	for d.NextBlock(0) {
		prop := d.Val()
		args := d.RemainingArgs()
		one := func() (string, error) {
			if len(args) != 1 {
				return "", d.Errf("%s takes one argument", prop)
			}
			return args[0], nil
		}
		duration := func() (caddy.Duration, error) {
			v, err := one()
			if err != nil {
				return 0, err
			}
			dur, err := caddy.ParseDuration(v)
			if err != nil || dur < 0 {
				return 0, d.Errf("%s: %q is not a duration", prop, v)
			}
			return caddy.Duration(dur), nil
		}
		var err error
		switch prop {
		case "cache_dir":
			h.CacheDir, err = one()
		case "cache_size":
			var v string
			if v, err = one(); err == nil {
				n, perr := humanize.ParseBytes(v)
				if perr != nil || n == 0 || n > 1<<62 {
					return d.Errf("cache_size: %q is not a size such as 1GiB", v)
				}
				h.CacheSize = int64(n)
			}
		case "allow_origins":
			if len(args) == 0 {
				return d.Errf("allow_origins needs at least one prefix")
			}
			for _, a := range args {
				if _, perr := parsePrefix(a); perr != nil {
					return d.Errf("allow_origins: %q is not a prefix or address", a)
				}
			}
			h.AllowOrigins = append(h.AllowOrigins, args...)
		case "origin_scheme":
			if h.OriginScheme, err = one(); err == nil {
				switch h.OriginScheme {
				case "http", "https", "auto":
				default:
					return d.Errf("origin_scheme: %q; want http, https or auto", h.OriginScheme)
				}
			}
		case "default_ttl":
			var v caddy.Duration
			if v, err = duration(); err == nil {
				h.DefaultTTL = &v
			}
		case "min_ttl":
			var v caddy.Duration
			if v, err = duration(); err == nil {
				h.MinTTL = &v
			}
		case "origin_timeout":
			h.OriginTimeout, err = duration()
		case "peer_timeout":
			h.PeerTimeout, err = duration()
		case "blacklist":
			if len(args) < 1 || len(args) > 2 {
				return d.Errf("blacklist takes a file and optionally how often to check it")
			}
			h.Blacklist = args[0]
			if len(args) == 2 {
				dur, perr := caddy.ParseDuration(args[1])
				if perr != nil || dur <= 0 {
					return d.Errf("blacklist: %q is not a positive duration", args[1])
				}
				h.BlacklistPoll = caddy.Duration(dur)
			}
		case "rate_limit":
			if len(args) == 1 && args[0] == "off" {
				h.RateLimit = -1
				break
			}
			if len(args) != 2 {
				return d.Errf("rate_limit takes REQUESTS_PER_SECOND BURST, or off")
			}
			rate, perr := strconv.ParseFloat(args[0], 64)
			burst, berr := strconv.Atoi(args[1])
			if perr != nil || rate <= 0 || berr != nil || burst < 1 {
				return d.Errf("rate_limit: want a positive rate and a burst of at least 1, got %q %q", args[0], args[1])
			}
			h.RateLimit, h.RateBurst = rate, burst
		case "bandwidth_budget":
			if len(args) != 1 && !(len(args) == 3 && args[1] == "per") {
				return d.Errf("bandwidth_budget takes SIZE [per DURATION]")
			}
			n, perr := humanize.ParseBytes(args[0])
			if perr != nil || n == 0 || n > 1<<62 {
				return d.Errf("bandwidth_budget: %q is not a size such as 100GiB", args[0])
			}
			h.BandwidthBudget = int64(n)
			if len(args) == 3 {
				dur, derr := caddy.ParseDuration(args[2])
				if derr != nil || dur <= 0 {
					return d.Errf("bandwidth_budget: %q is not a positive duration", args[2])
				}
				h.BandwidthWindow = caddy.Duration(dur)
			}
		case "peer_address":
			var v string
			if v, err = one(); err == nil {
				if _, perr := netip.ParseAddrPort(v); perr != nil {
					return d.Errf("peer_address: %q is not IP:PORT", v)
				}
				h.PeerAddress = v
			}
		default:
			return d.Errf("unknown coral_proxy option %q", prop)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ caddyfile.Unmarshaler       = (*Handler)(nil)
)
