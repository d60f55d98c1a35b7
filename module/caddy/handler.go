package coralcaddy

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"syscall"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/httpcache"
	"go.uber.org/zap"
)

func init() { caddy.RegisterModule(Handler{}) }

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

	// MemoryCacheSize bounds the bodies of small, often-read objects
	// (16 KiB or less) the cache also keeps in memory, so that a hit on
	// one reads no file. Default 16 MiB; -1 keeps none. (The decoded
	// metadata of often-read objects takes up to another 16 MiB.)
	MemoryCacheSize int64 `json:"memory_cache_size,omitempty"`

	// AllowOrigins lists address prefixes of origins the proxy may fetch
	// from although they are private, loopback or otherwise not public.
	// By default such origins are refused, and so are the node's own
	// addresses (its interfaces', its listeners', its advertised ones),
	// which only an entry of that address alone (a bare address, /32 or
	// /128) allows.
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

	// HTTPSRedirect sends plain-HTTP requests for one-label Coralized
	// names (www-example-com.nyud.net, the form a wildcard certificate
	// covers) to the same URL over https with 308 Permanent Redirect.
	// Turn it on where this Caddy also serves the zone's wildcard over
	// TLS. Dotted names (www.example.com.nyud.net) stay on http: no
	// certificate can cover them. Default off.
	HTTPSRedirect bool `json:"https_redirect,omitempty"`
	// HTTPSPort is the port the redirects name. Default 443.
	HTTPSPort int `json:"https_port,omitempty"`

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

	// WriteIdleTimeout is how long a write of a response to a client may
	// make no progress (the client reads nothing) before the client is
	// dropped; it is renewed as bytes flow, so a slow but steady client is
	// never cut off. A client that stops reading cannot hold a cached
	// version on disk for longer. It overrides the server's own
	// write_idle_timeout for coral_proxy's responses; negative leaves that
	// in charge. Default 30s.
	WriteIdleTimeout caddy.Duration `json:"write_idle_timeout,omitempty"`

	// MaxDownloads bounds the downloads (from peers or origins) this
	// proxy runs at once, and MaxDownloadsPerOrigin those from one origin
	// host and port. A request that would start one more waits up to
	// DownloadWait for a slot, then gets 503 with Retry-After. Requests
	// served from the cache, or joining a download already running, need
	// no slot. Defaults 256, 32 and 10s. MaxDownloadsPerClient bounds the
	// slots of one origin that downloads started by one client address
	// (IPv4, or IPv6 /64) hold at once. Default 16.
	MaxDownloads          int            `json:"max_downloads,omitempty"`
	MaxDownloadsPerOrigin int            `json:"max_downloads_per_origin,omitempty"`
	MaxDownloadsPerClient int            `json:"max_downloads_per_client,omitempty"`
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
	// BlacklistSHA256 is the blacklist's SHA-256 when the Caddyfile was
	// adapted, so that `caddy reload` sees a changed list; see
	// App.KeyFileSHA256.
	BlacklistSHA256 string `json:"blacklist_sha256,omitempty"`

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

// validating reports whether this process is `caddy validate`, which
// provisions a configuration to check it and never runs it (the Caddy
// command line's subcommand is always its first argument).
var validating = len(os.Args) > 1 && os.Args[1] == "validate"

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
	if h.WriteIdleTimeout == 0 {
		h.WriteIdleTimeout = caddy.Duration(defaultWriteIdleTimeout)
	}
	if h.OriginScheme == "" {
		h.OriginScheme = "auto"
	}
	policy := h.policy()
	guard, err := newGuard("allow_origins", h.AllowOrigins)
	if err != nil {
		return err
	}
	guard.self = newSelfAddresses(time.Now, interfaceAddrs, dhtAddrs, h.advertisedAddrs,
		func() []netip.Addr { return processListenerAddrs("/proc") })
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
	if validating {
		// `caddy validate`: a running Caddy holds the cache's lock, and
		// validation must not take it; check what can be checked.
		if fi, err := os.Stat(dir); err == nil && !fi.IsDir() {
			return fmt.Errorf("coral_proxy: cache_dir %s is not a directory", dir)
		}
		h.app.config.add("coral_proxy", h)
		return h.provisionAbuse()
	}
	val, _, err := stores.LoadOrNew(dir, func() (caddy.Destructor, error) {
		s, err := diskcache.Open(diskcache.Options{Dir: dir, MaxBytes: h.CacheSize, MaxObjectBytes: h.MaxObjectSize, MaxEntries: h.MaxObjects, HotBodyBytes: h.MemoryCacheSize})
		if err != nil {
			return nil, err
		}
		refs := newRefTable(s, nil)
		refs.nodeFunc = runningNode
		refs.run(time.Minute)
		return &storeEntry{Store: s, refs: refs}, nil
	})
	if err != nil {
		return fmt.Errorf("coral_proxy: cache %s: %w", dir, err)
	}
	h.storeKey = dir
	entry := val.(*storeEntry)
	if msg := cacheSizeWarning(dir, h.CacheSize, entry.Store.Stats().Bytes); msg != "" {
		h.logger.Warn(msg)
	}
	h.setup(entry.Store, nil, guard, peerGuard, policy)
	h.eng.nodeFunc = runningNode
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
	h.app.config.add("coral_proxy", h)
	if h.Blacklist != "" {
		h.app.config.addFile(h.Blacklist)
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
			return err // it names coral_proxy, the blacklist and the file
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
		MaxResponseHeaderBytes: maxHeadBytes,
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
		tooLarge:        newBoundedMap[time.Time](maxRemembered),
		purged:          newBoundedMap[time.Time](maxRemembered),
		slots:           newDownloadSlots(orDefault(h.MaxDownloads, defaultMaxDownloads), orDefault(h.MaxDownloadsPerOrigin, defaultMaxDownloadsPerOrigin), orDefault(h.MaxDownloadsPerClient, defaultMaxDownloadsPerClient)),
		downloadWait:    durationOr(h.DownloadWait, defaultDownloadWait),
		downloadTimeout: durationOr(h.DownloadTimeout, defaultDownloadTimeout),
		maxObject:       store.Stats().MaxObjectBytes,
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
	h.eng.httpsUpgrades = newHTTPSUpgrades(maxRemembered, h.eng.now)
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

// advertisedAddrs is the address this proxy gives peers (peer_address,
// or learned), for the node's own addresses.
func (h *Handler) advertisedAddrs() []netip.Addr {
	if h.eng == nil {
		return nil
	}
	if p := h.eng.peerAddr.Load(); p != nil {
		return []netip.Addr{p.Addr()}
	}
	return nil
}

// learnPeerAddr fills in this proxy's HTTP address from the first request:
// the node's IP and the port the request came in on.
func (h *Handler) learnPeerAddr(r *http.Request) {
	node := h.eng.dhtNode()
	if h.eng.peerAddr.Load() != nil || node == nil || r.TLS != nil {
		// Peers speak plain HTTP: a port that answers with TLS is not
		// their way in.
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
	if h.MemoryCacheSize < -1 {
		return errors.New("coral_proxy: memory_cache_size must be a size, or -1 for none")
	}
	if h.MaxObjectSize < 0 || h.MaxObjectSize > h.CacheSize && h.CacheSize > 0 {
		return fmt.Errorf("coral_proxy: max_object_size %d must be positive and at most cache_size %d", h.MaxObjectSize, h.CacheSize)
	}
	if h.HTTPSPort < 0 || h.HTTPSPort > 65535 {
		return fmt.Errorf("coral_proxy: https_port %d: want 1-65535", h.HTTPSPort)
	}
	if h.MaxObjects < 0 || h.MaxDownloads < 0 || h.MaxDownloadsPerOrigin < 0 || h.MaxDownloadsPerClient < 0 {
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
	w, done := h.idleWrites(w, r)
	defer done()
	bc := &bodyCounter{ResponseWriter: w}
	acct := &requestAccount{status: cacheRefused, source: "none"}
	defer func() { h.metrics.request(acct.status, acct.source, bc.n) }()
	return h.serve(bc, r, acct)
}

// requestAccount is what a request is counted as in the metrics.
type requestAccount struct {
	status  CacheStatus
	source  string
	retried bool // a joined download vanished once already
}

func (a *requestAccount) set(status CacheStatus, source string) {
	a.status, a.source = status, source
}

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ caddyfile.Unmarshaler       = (*Handler)(nil)
)
