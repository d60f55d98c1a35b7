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
	"syscall"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddyconfig/httpcaddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/httpcache"
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

	// CacheSize bounds the bytes the cache keeps on disk, each file
	// counted in whole 4 KiB blocks; least recently used objects go first.
	// Default 1 GiB.
	CacheSize int64 `json:"cache_size,omitempty"`

	// MaxObjectSize bounds one cached object's body. A response declaring
	// more is served to its client uncached; one that grows past it
	// mid-download is aborted. Default: an eighth of CacheSize, so no
	// single object (or origin lying about its length) can displace more
	// than an eighth of the cache.
	MaxObjectSize int64 `json:"max_object_size,omitempty"`

	// MaxObjects bounds the number of cached objects, and with it the
	// memory of the cache's index (about 170 bytes an object). Default:
	// CacheSize / 8 KiB, as many as fit at their smallest (two blocks).
	MaxObjects int `json:"max_objects,omitempty"`

	// AllowOrigins lists address prefixes of origins the proxy may fetch
	// from although they are private, loopback or otherwise not public.
	// By default such origins are refused.
	AllowOrigins []string `json:"allow_origins,omitempty"`

	// ForwardFields are request fields passed to origins (and peers)
	// besides the defaults: Accept, Accept-Language, User-Agent, and
	// whatever a stored response's Vary names. They are not part of the
	// cache key, so list only fields that never change what an origin
	// sends (a request ID, say): a field that does lets one client decide
	// what every other gets. Credentials, cookies, hop-by-hop fields,
	// conditionals and fields servers take as overrides of the URL, host,
	// method or client cannot be listed.
	ForwardFields []string `json:"forward_fields,omitempty"`

	// AllowPeers lists address prefixes where peer proxies may be although
	// they are private, loopback or otherwise not public. DSHT references
	// naming other such addresses are ignored: any member of the network
	// can put a reference, and one naming an internal address would make
	// this proxy send requests into its own network. Default: none (a
	// fleet on a private network lists its prefix here).
	AllowPeers []string `json:"allow_peers,omitempty"`

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

	// DownloadTimeout bounds one whole download from a peer or an origin,
	// however steadily its bytes arrive (OriginTimeout bounds each
	// silence). Default 10m.
	DownloadTimeout caddy.Duration `json:"download_timeout,omitempty"`

	// MaxDownloads bounds the downloads (from peers or origins) this
	// proxy runs at once, and MaxDownloadsPerOrigin those from one origin
	// host and port. A request that would start one more waits up to
	// DownloadWait for a slot, then gets 503 with Retry-After. Requests
	// served from the cache, or joining a download already running, need
	// no slot. Defaults 256, 32 and 10s.
	MaxDownloads          int            `json:"max_downloads,omitempty"`
	MaxDownloadsPerOrigin int            `json:"max_downloads_per_origin,omitempty"`
	DownloadWait          caddy.Duration `json:"download_wait,omitempty"`

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
	forward  []string // forwardFields(ForwardFields), set by Provision
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
	policy := h.policy()
	guard, err := newGuard("allow_origins", h.AllowOrigins)
	if err != nil {
		return err
	}
	peerGuard, err := newGuard("allow_peers", h.AllowPeers)
	if err != nil {
		return err
	}
	if h.forward, err = forwardFields(h.ForwardFields); err != nil {
		return err
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
		s, err := diskcache.Open(diskcache.Options{Dir: dir, MaxBytes: h.CacheSize, MaxObjectBytes: h.MaxObjectSize, MaxEntries: h.MaxObjects})
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
	h.setup(entry.Store, h.app.Node(), guard, peerGuard, policy)
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

// policy is the freshness policy the configuration asks for: Coral's
// defaults, with default_ttl and min_ttl if set.
func (h *Handler) policy() httpcache.Policy {
	p := httpcache.DefaultPolicy()
	if h.DefaultTTL != nil {
		p.DefaultTTL = time.Duration(*h.DefaultTTL)
	}
	if h.MinTTL != nil {
		p.MinTTL = time.Duration(*h.MinTTL)
	}
	return p
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

// setup builds the fetch engine around a store and a node; guard decides
// which origin addresses may be fetched from, peerGuard which peer
// addresses may be asked.
func (h *Handler) setup(store *diskcache.Store, node *coraldht.Node, guard, peerGuard originGuard, policy httpcache.Policy) {
	h.store = store
	if h.forward == nil {
		h.forward = defaultForwardFields
	}
	peerTransport := &http.Transport{
		Proxy:                  nil,
		DialContext:            (&net.Dialer{Timeout: time.Duration(h.PeerTimeout), Control: h.peerControl}).DialContext,
		ResponseHeaderTimeout:  time.Duration(h.PeerTimeout),
		MaxResponseHeaderBytes: 64 << 10,
		MaxIdleConnsPerHost:    8,
		DisableCompression:     true,
	}
	h.eng = &engine{
		store:           h.store,
		node:            node,
		originTimeout:   time.Duration(h.OriginTimeout),
		peerTimeout:     time.Duration(h.PeerTimeout),
		origin:          &http.Client{Transport: originTransport(guard, time.Duration(h.OriginTimeout), time.Duration(h.OriginTimeout)), CheckRedirect: noRedirects},
		peer:            &http.Client{Transport: peerTransport, CheckRedirect: noRedirects},
		failures:        newOriginFailures(3, 30*time.Second),
		httpsUpgrades:   newBoundedMap[int](maxRemembered),
		tooLarge:        newBoundedMap[time.Time](maxRemembered),
		purged:          newBoundedMap[time.Time](maxRemembered),
		slots:           newDownloadSlots(orDefault(h.MaxDownloads, defaultMaxDownloads), orDefault(h.MaxDownloadsPerOrigin, defaultMaxDownloadsPerOrigin)),
		downloadWait:    durationOr(h.DownloadWait, defaultDownloadWait),
		downloadTimeout: durationOr(h.DownloadTimeout, defaultDownloadTimeout),
		policy:          policy,
		clock:           time.Now,
		logger:          h.logger,
		selfAddr:        h.selfAddr,
		userAgent:       proxyVersion,
		forward:         h.forward,
		zone:            h.Zone,
		inflight:        make(map[string]*download),
		guard:           guard,
		peerGuard:       peerGuard,
	}
}

func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// newGuard builds an address guard allowing the prefixes of the option
// named option.
func newGuard(option string, prefixes []string) (originGuard, error) {
	var g originGuard
	for _, a := range prefixes {
		p, err := parsePrefix(a)
		if err != nil {
			return g, fmt.Errorf("coral_proxy: %s %q: %w", option, a, err)
		}
		g.allow = append(g.allow, p)
	}
	return g, nil
}

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

// peerControl runs on every socket opened to a peer, with the address
// about to be dialled: the references' filter (run) again, where it
// cannot be missed.
func (h *Handler) peerControl(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !h.eng.peerGuard.permitted(ap.Addr()) {
		return fmt.Errorf("coral_proxy: peer address %s not allowed (allow_peers)", address)
	}
	return nil
}

// maxRemembered bounds what the proxy remembers per origin or object:
// origins that redirect to https, objects too large to cache.
const maxRemembered = 10000

func orDefault(v, def int) int {
	if v > 0 {
		return v
	}
	return def
}

func durationOr(v caddy.Duration, def time.Duration) time.Duration {
	if v > 0 {
		return time.Duration(v)
	}
	return def
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
	if h.eng.peerAddr.Load() != nil || h.eng.node == nil {
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
	if h.MaxObjectSize < 0 || h.MaxObjectSize > h.CacheSize && h.CacheSize > 0 {
		return fmt.Errorf("coral_proxy: max_object_size %d must be positive and at most cache_size %d", h.MaxObjectSize, h.CacheSize)
	}
	if h.MaxObjects < 0 || h.MaxDownloads < 0 || h.MaxDownloadsPerOrigin < 0 {
		return errors.New("coral_proxy: max_objects and max_downloads must be positive")
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
	bc := &bodyCounter{ResponseWriter: w}
	acct := &requestAccount{cacheStatus: "refused", source: "none"}
	defer func() { h.metrics.request(acct.cacheStatus, acct.source, bc.n) }()
	return h.serve(bc, r, acct)
}

// requestAccount is what a request is counted as in the metrics.
type requestAccount struct {
	cacheStatus, source string
	retried             bool // a joined download vanished once already
}

func (a *requestAccount) set(cacheStatus, source string) {
	a.cacheStatus, a.source = cacheStatus, source
}

func (h *Handler) serve(w *bodyCounter, r *http.Request, acct *requestAccount) error {
	target, err := requestTarget(r, h.Zone)
	switch {
	case errors.Is(err, ErrNotCoralized):
		return caddyhttp.Error(http.StatusMisdirectedRequest,
			fmt.Errorf("this Coral proxy serves only host names ending in .%s (Coralized URLs); %q is not one", strings.TrimSuffix(h.Zone, "."), r.Host))
	case errors.Is(err, errBadTarget):
		return caddyhttp.Error(http.StatusBadRequest, err)
	case err != nil:
		return caddyhttp.Error(StatusForHostError(err), err)
	}
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		w.Header().Set("Allow", "GET, HEAD")
		return caddyhttp.Error(http.StatusMethodNotAllowed, fmt.Errorf("coral_proxy serves GET and HEAD only"))
	}
	if a, ok := OriginAddr(target.Host); ok && !h.eng.guard.permitted(a) {
		return caddyhttp.Error(http.StatusForbidden, fmt.Errorf("origin %s: %w", target.Host, errOriginForbidden))
	}
	h.learnPeerAddr(r)
	scheme := "http"
	if h.OriginScheme == "https" {
		scheme = "https"
	}
	key := target.Key()
	fr := fetchRequest{key: key, baseKey: key, target: target, scheme: scheme, header: r.Header, allow: h.eng.forward, clientIP: clientIP(r)}
	if done, err := h.abuse.admit(w, r, target.Host, func() string { return fr.originURL().String() }); done {
		return err
	}
	if _, ok := r.Header["Authorization"]; ok {
		// Coral serves public content: credentials are never forwarded,
		// and a cache must not answer an authorized request from a copy
		// fetched without them (RFC 9111 §3.5).
		return caddyhttp.Error(http.StatusForbidden, fmt.Errorf("%w; fetch %s directly", errAuthorization, fr.originURL()))
	}
	h.abuse.charge(w)
	onlyIfCached := httpcache.ParseRequestCacheControl(r.Header).OnlyIfCached

	if rd, m, ok := h.lookup(r.Context(), &fr); ok {
		if !rd.Complete() {
			if h.eng.now().Before(m.Expires) {
				// Being downloaded right now: join it.
				acct.set("collapsed", m.Extra["source"])
				return h.serveStored(w, r, rd, "fwd=uri-miss; collapsed", m.Extra["source"], onlyIfCached)
			}
			// Being downloaded, but stale as it arrives (max-age=0, an
			// Age beyond its lifetime): it answers the request that
			// fetched it and may not be reused for another (RFC 9111
			// §4), not even one that comes while it downloads.
			rd.Close()
			if onlyIfCached {
				return notCached(w, "stale")
			}
			acct.set("miss", "origin")
			return h.fetchOwn(w, r, fr, acct)
		}
		if h.eng.now().Before(m.Expires) {
			h.eng.refs.touch(fr.baseKey)
			acct.set("hit", "local")
			return h.serveStored(w, r, rd, "hit", "local", onlyIfCached)
		}
		rd.Close()
		if onlyIfCached {
			// Stale, and the client (a peer, usually) wants no origin
			// contact: RFC 9111 §5.2.1.7.
			return notCached(w, "stale")
		}
		// Stale: revalidate with the origin. Within stale-while-
		// revalidate the stale copy is served at once meanwhile.
		fr.stale = &m
		if swr, _ := httpcache.StaleWindows(m.Header); h.eng.now().Sub(m.Expires) < swr {
			// In the background, if a download slot is free now.
			_, _, _ = h.eng.startDownload(context.WithoutCancel(r.Context()), fr, 0)
			if rd, ok := h.store.GetContext(r.Context(), fr.key); ok {
				acct.set("stale", "local")
				return h.serveStored(w, r, rd, "hit; fwd=stale", "stale-while-revalidate", onlyIfCached)
			}
		}
		return h.download(w, r, fr, acct)
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
					if rd, _, ok := h.lookup(r.Context(), &fr); ok && (!rd.Complete() || h.eng.now().Before(rd.Meta().Expires)) {
						acct.set("collapsed", d.source)
						return h.serveStored(w, r, rd, "fwd=uri-miss; collapsed", d.source, true)
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
	return h.download(w, r, fr, acct)
}

// errAuthorization is why a request with credentials is refused.
var errAuthorization = errors.New("coral_proxy: Coral serves public content and never forwards credentials (Authorization)")

// notCached is the answer to an only-if-cached request the cache cannot
// satisfy: 504 (RFC 9111 §5.2.1.7), with why in Cache-Status.
func notCached(w http.ResponseWriter, why string) error {
	w.Header().Set("Cache-Status", fmt.Sprintf("coral; fwd=miss; detail=%q", why))
	return caddyhttp.Error(http.StatusGatewayTimeout, errors.New("not in this proxy's cache (only-if-cached)"))
}

// download starts (or joins) the download for fr and serves what it
// brings. A request that finds every download slot taken for download_wait
// gets 503 with Retry-After.
func (h *Handler) download(w http.ResponseWriter, r *http.Request, fr fetchRequest, acct *requestAccount) error {
	d, started, err := h.eng.startDownload(r.Context(), fr, h.eng.downloadWait)
	if errors.Is(err, errDownloadsBusy) {
		acct.set("refused", "none")
		w.Header().Set("Retry-After", retryAfterSeconds(h.eng.downloadWait))
		return caddyhttp.Error(http.StatusServiceUnavailable, err)
	}
	if err != nil {
		return err
	}
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
	fr.key, fr.varyIndex, fr.view = fr.baseKey, "", nil
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
	fr.varyIndex = fields
	vk, vok := httpcache.VaryKey(fields, fr.forwarded())
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
	var interim <-chan interimResponse
	if started {
		interim = d.interim // only the request that started the download gets them
	}
	var sent []string // fields of interim responses, not for the final one
wait:
	for {
		select {
		case <-d.ready:
			break wait
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
	for _, k := range sent {
		w.Header().Del(k)
	}
	if d.revalidated || d.stale {
		rd, _, ok := h.lookup(r.Context(), &fr)
		if !ok {
			return caddyhttp.Error(http.StatusBadGateway, errors.New("the cached copy went away"))
		}
		if d.revalidated {
			acct.set("hit", "local")
			return h.serveStored(w, r, rd, "hit; fwd=stale; fwd-status=304", "revalidated", false)
		}
		acct.set("stale", "local")
		return h.serveStored(w, r, rd, "hit; fwd=stale", "stale", false)
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
			return h.fetchOwn(w, r, fr, acct)
		}
		return h.serveDirect(w, d.direct, d.source)
	}
	// The object may have landed under a variant key (the response
	// varies), which lookup finds through the URL's entry.
	rd, m, ok := h.lookup(r.Context(), &fr)
	if ok && !started && !h.eng.now().Before(m.Expires) {
		// The download this request joined brought a response that was
		// stale as it arrived: it answers the request that caused it only.
		rd.Close()
		return h.fetchOwn(w, r, fr, acct)
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
		return h.download(w, r, fr, acct)
	}
	if !ok {
		return caddyhttp.Error(http.StatusBadGateway, errors.New("the download ended before the object could be read"))
	}
	status := "fwd=uri-miss"
	if !started {
		status = "fwd=uri-miss; collapsed"
	}
	return h.serveStored(w, r, rd, status, d.source, false)
}

// fetchOwn fetches fr from the origin for this request alone and relays
// the response uncached: for a request that joined a download whose
// response may not be shared (no-store, private, stale as it arrived). It
// takes a download slot of its own: it is a download like any other.
func (h *Handler) fetchOwn(w http.ResponseWriter, r *http.Request, fr fetchRequest, acct *requestAccount) error {
	if err := h.eng.slots.acquire(r.Context(), fr.originSlot(), h.eng.downloadWait); err != nil {
		return fetchFailed(acct, err)
	}
	defer h.eng.slots.release(fr.originSlot())
	resp, err := h.eng.fetchFromOrigin(r.Context(), fr)
	if err != nil {
		return fetchFailed(acct, err)
	}
	return h.serveDirect(w, resp, "origin")
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

// serveStored writes a cached (or still arriving) object. To a peer (an
// only-if-cached request) it also says how long the copy stays fresh here
// (peerFreshnessField), which bounds the peer's copy.
func (h *Handler) serveStored(w http.ResponseWriter, r *http.Request, rd *diskcache.Reader, status, source string, toPeer bool) error {
	defer rd.Close()
	m := rd.Meta()
	hdr := w.Header()
	// m.Header may be shared with other readers of the object (the store
	// keeps the metadata of recently read objects in memory), so the
	// response gets value slices of its own, capped so that an append
	// reallocates: one allocation for them all and the fields set here.
	vals := make([]string, 0, len(m.Header)+5)
	for k, v := range m.Header {
		if !toPeer && k == httpcache.CoralOnlyField {
			continue // for Coral proxies only (targeted.go)
		}
		vals = append(vals, v...)
		hdr[k] = vals[len(vals)-len(v) : len(vals) : len(vals)]
	}
	delete(hdr, "Set-Cookie")
	vals = setOwnValue(hdr, vals, "Via", "1.1 coral")
	vals = setOwnValue(hdr, vals, "Cache-Status", cacheStatusValue(status, source))
	now := h.eng.now()
	vals = setOwnValue(hdr, vals, "Age", formatAge(storedAge(&m, now)))
	if toPeer {
		left := max(m.Expires.Sub(now), 0)
		vals = setOwnValue(hdr, vals, peerFreshnessField, strconv.FormatInt(int64(left/time.Second), 10))
	}
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
	var err error
	if rd.Complete() {
		_, err = io.Copy(w, rd)
	} else {
		_, err = copyAsItArrives(w, rd)
	}
	if err != nil {
		// The download failed or the client went away: never let a
		// truncated body look complete.
		panic(http.ErrAbortHandler)
	}
	return nil
}

// copyAsItArrives copies a body still being downloaded (an object being
// written to the cache, or a response relayed uncached) to w, flushing
// after every read, so the client gets the header at once and each byte as
// soon as it is here, however slowly the rest comes.
func copyAsItArrives(w http.ResponseWriter, body io.Reader) (n int64, err error) {
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	_ = rc.Flush()
	for {
		nr, rerr := body.Read(buf)
		if nr > 0 {
			nw, werr := w.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				return n, werr
			}
			_ = rc.Flush()
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
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
	hdr.Del(httpcache.CoralOnlyField)
	hdr.Set("Via", "1.1 coral")
	hdr.Set("Cache-Status", fmt.Sprintf(`coral; fwd=uri-miss; stored=false; detail=%q`, source))
	w.WriteHeader(resp.StatusCode)
	if _, err := copyAsItArrives(w, resp.Body); err != nil {
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

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ caddyfile.Unmarshaler       = (*Handler)(nil)
)
