package coralcaddy

import (
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/httpcache"
	"go.uber.org/zap"
)

func init() { caddy.RegisterModule(Handler{}) }

// Handler is the HTTP handler "coral_proxy": it serves Coralized URLs
// (http://www.example.com.nyud.net/…) from its cache, from peer proxies
// found through the Coral DSHT, or from the origin.
type Handler struct {
	// Zone is the alias zone Coralized host names end in, e.g. "nyud.net":
	// a domain name (checked by `caddy validate`). Required.
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
	// /128) allows. Default: none.
	AllowOrigins []string `json:"allow_origins,omitempty"`

	// ForwardFields are request fields passed to origins (and peers)
	// besides the defaults: Accept, Accept-Language, User-Agent, and
	// whatever a stored response's Vary names. They are not part of the
	// cache key, so list only fields that never change what an origin
	// sends (a request ID, say): a field that does lets one client decide
	// what every other gets. Credentials, cookies, hop-by-hop fields,
	// conditionals and fields servers take as overrides of the URL, host,
	// method or client cannot be listed. Default: none.
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
	abuse    abuseControl
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
	h.setDefaults()
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
	entry, err := h.openStore(dir)
	if err != nil {
		return err
	}
	if msg := cacheSizeWarning(dir, h.CacheSize, entry.Store.Stats().Bytes); msg != "" {
		h.logger.Warn(msg)
	}
	h.store = entry.Store
	if h.metrics, err = newProxyMetrics(ctx.GetMetricsRegistry(), h.app, h.store); err != nil {
		return err
	}
	cfg := h.engineConfig(nil, guard, peerGuard, policy)
	cfg.nodeFunc, cfg.refs, cfg.metrics = runningNode, entry.refs, h.metrics
	h.eng = newEngine(cfg)
	if peerAddr.IsValid() {
		h.eng.peerAddr.Store(&peerAddr)
	}
	if err := h.provisionAbuse(); err != nil {
		return err
	}
	h.app.config.add("coral_proxy", h)
	if h.Blacklist != "" {
		h.app.config.addFile(h.Blacklist)
	}
	addRunningProxy(h)
	return nil
}

// setDefaults fills in the options left unset.
func (h *Handler) setDefaults() {
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
}

// openStore opens the cache in dir, or shares the one already open there
// (with its reference table): one store per directory in the process.
func (h *Handler) openStore(dir string) (*storeEntry, error) {
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
		return nil, fmt.Errorf("coral_proxy: cache %s: %w", dir, err)
	}
	h.storeKey = dir
	return val.(*storeEntry), nil
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

// Validate checks the configuration.
func (h *Handler) Validate() error {
	if h.Zone == "" {
		return errors.New("coral_proxy: the zone is required")
	}
	if _, err := coralname.NormalizeZone(h.Zone); err != nil {
		return fmt.Errorf("coral_proxy: zone %q is not a domain name: %w", h.Zone, err)
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
	removeRunningProxy(h)
	h.metrics.release()
	if h.abuse != nil {
		h.abuse.Close()
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
