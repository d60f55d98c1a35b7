package coralcaddy

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync/atomic"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/abuse"
	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/httpcache"
	"github.com/coralcdn/coral/module/caddy/proxy"
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
	// memory of the cache's index (about 90 bytes an object). Default:
	// CacheSize / 4 KiB, as many as fit at their smallest (one block).
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
	// NegativeTTL is how long a 404, 405, 410, 414 or 501 without
	// freshness information is kept (the origin must give it without the
	// client's fields too). Default 5m, none with DefaultTTL 0 (strict);
	// 0 or negative: not kept.
	NegativeTTL *caddy.Duration `json:"negative_ttl,omitempty"`

	// OriginTimeout bounds connecting to an origin and waiting for its
	// response header. Default 15s.
	OriginTimeout caddy.Duration `json:"origin_timeout,omitempty"`

	// PeerTimeout bounds connecting to a peer proxy. Waiting for a peer's
	// response header, and each silence of its body, is bounded by
	// origin_timeout + peer_timeout, since the peer may itself be waiting
	// on its origin. Default 3s.
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
	// MaxClientDownloads bounds the downloads one client holds over every
	// origin together (and its requests waiting for a slot);
	// MaxDownloadsPerAddress those from one origin address, whatever the
	// name and port. Defaults: an eighth and a quarter of MaxDownloads
	// (32 and 64). A client is an address's prefix of ClientPrefixV4 or
	// ClientPrefixV6 bits: defaults 32 and 48.
	MaxClientDownloads     int `json:"max_client_downloads,omitempty"`
	MaxDownloadsPerAddress int `json:"max_downloads_per_address,omitempty"`
	ClientPrefixV4         int `json:"client_prefix_v4,omitempty"`
	ClientPrefixV6         int `json:"client_prefix_v6,omitempty"`

	// SliceSize is the size of the slices in which an object larger than
	// it is fetched, kept and shared among peers, each slice its own DSHT
	// key: 1 MiB to 8 MiB, or -1 to keep every object whole. Default
	// 4 MiB (the proxy package's README says why).
	SliceSize int64 `json:"slice_size,omitempty"`

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

	// FleetBlacklist is the fleet-wide blacklist: one list the operator
	// signs with a publisher key, which every node fetches, verifies and
	// reloads while it runs (see FleetBlacklist). It applies besides
	// Blacklist: an origin either names is refused. Default: none.
	FleetBlacklist *FleetBlacklist `json:"fleet_blacklist,omitempty"`

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
	// BandwidthShare is how the budget is shared: "fair" (the default)
	// shares it max-min fairly among origins, counted by origin address,
	// so that the hottest origin's clients are redirected first and a
	// small site keeps being served; "node" is one counter for the node,
	// every origin redirected once it is used up.
	BandwidthShare string `json:"bandwidth_share,omitempty"`

	// LoadRequests is how many requests in flight count as a full proxy,
	// for the load this node publishes to the DNS servers (which stop
	// handing out a proxy whose load reaches their load_threshold).
	// Default 1024.
	LoadRequests int `json:"load_requests,omitempty"`

	app      *App
	store    *diskcache.Store
	refs     *proxy.References // the store's
	storeKey string            // the store's directory, its key in stores
	proxy    *proxy.Proxy
	metrics  *proxyMetrics
	abuse    *abuse.Controls
	fleet    *abuse.FleetList // shared through fleetLists
	fleetKey string           // its key there
	logger   *zap.Logger
	// inflight counts the requests the proxy is serving, for the load
	// (a pointer: Caddy copies the module value).
	inflight *atomic.Int64
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
	refs *proxy.References
}

func (s *storeEntry) Destruct() error {
	s.refs.Stop()
	return s.Close()
}

// defaultCacheSize is cache_size's default.
const defaultCacheSize = 1 << 30

// validating reports whether this process is `caddy validate`, which
// provisions a configuration to check it and never runs it (the Caddy
// command line's subcommand is always its first argument).
var validating = len(os.Args) > 1 && os.Args[1] == "validate"

// Provision finds the coral app (and so the DSHT node), opens the cache
// and builds the proxy.
func (h *Handler) Provision(ctx caddy.Context) error {
	h.logger = ctx.Logger()
	h.inflight = new(atomic.Int64)
	app, err := ctx.App("coral")
	if err != nil {
		return fmt.Errorf("coral_proxy needs the coral app (the coral global option): %w", err)
	}
	h.app = app.(*App)
	h.setDefaults()
	cfg, err := h.proxyConfig()
	if err != nil {
		return err
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
	h.store, h.refs = entry.Store, entry.refs
	if h.metrics, err = newProxyMetrics(ctx.GetMetricsRegistry(), h.app, h.store); err != nil {
		return err
	}
	if err := h.provisionAbuse(); err != nil {
		return err
	}
	cfg.Store, cfg.References, cfg.Metrics, cfg.Abuse = h.store, h.refs, h.metrics, h.abuse
	if h.proxy, err = proxy.New(cfg); err != nil {
		return err
	}
	h.app.config.add("coral_proxy", h)
	if h.Blacklist != "" {
		h.app.config.addFile(h.Blacklist)
	}
	if h.FleetBlacklist != nil {
		h.app.config.addFile(h.FleetBlacklist.KeyFile)
	}
	addRunningProxy(h)
	return nil
}

// proxyConfig is the proxy's configuration h's options ask for, without
// the store and what comes with it; it is checked (Config.Validate).
func (h *Handler) proxyConfig() (proxy.Config, error) {
	c := proxy.DefaultConfig()
	c.Zone, c.Policy, c.ForwardFields, c.Logger = h.Zone, h.policy(), h.ForwardFields, h.logger
	var err error
	if c.AllowOrigins, err = parsePrefixes("allow_origins", h.AllowOrigins); err != nil {
		return c, err
	}
	if c.AllowPeers, err = parsePrefixes("allow_peers", h.AllowPeers); err != nil {
		return c, err
	}
	if h.PeerAddress != "" {
		if c.PeerAddress, err = netip.ParseAddrPort(h.PeerAddress); err != nil {
			return c, fmt.Errorf("coral_proxy: peer_address %q: want IP:PORT", h.PeerAddress)
		}
	}
	c.OriginScheme, c.HTTPSRedirect = h.OriginScheme, h.HTTPSRedirect
	if h.HTTPSPort != 0 {
		c.HTTPSPort = h.HTTPSPort
	}
	c.OriginTimeout, c.PeerTimeout = time.Duration(h.OriginTimeout), time.Duration(h.PeerTimeout)
	c.DownloadTimeout = durationOr(h.DownloadTimeout, c.DownloadTimeout)
	c.DownloadWait = durationOr(h.DownloadWait, c.DownloadWait)
	c.MaxDownloads = orDefault(h.MaxDownloads, c.MaxDownloads)
	c.MaxDownloadsPerOrigin = orDefault(h.MaxDownloadsPerOrigin, c.MaxDownloadsPerOrigin)
	c.MaxDownloadsPerClient = orDefault(h.MaxDownloadsPerClient, c.MaxDownloadsPerClient)
	c.MaxClientDownloads, c.MaxDownloadsPerAddress = h.MaxClientDownloads, h.MaxDownloadsPerAddress
	c.ClientPrefixV4 = orDefault(h.ClientPrefixV4, c.ClientPrefixV4)
	c.ClientPrefixV6 = orDefault(h.ClientPrefixV6, c.ClientPrefixV6)
	switch {
	case h.SliceSize < 0:
		c.SliceSize = 0
	case h.SliceSize > 0:
		c.SliceSize = h.SliceSize
	}
	c.Node, c.OwnAddrs, c.Fetched, c.ClientAddr = runningDHT, dhtAddrs, recordFetch, requestClientAddr
	return c, c.Validate()
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
		h.OriginTimeout = caddy.Duration(proxy.DefaultConfig().OriginTimeout)
	}
	if h.PeerTimeout == 0 {
		h.PeerTimeout = caddy.Duration(proxy.DefaultConfig().PeerTimeout)
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
		refs := proxy.NewReferences(s, runningDHT)
		refs.Run(time.Minute)
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
	switch {
	case h.NegativeTTL != nil && *h.NegativeTTL > 0:
		p.NegativeTTL = time.Duration(*h.NegativeTTL)
	case h.NegativeTTL != nil, p.DefaultTTL == 0:
		// off (0 too: Policy's 0, "as DefaultTTL", would surprise), and
		// strict mode (default_ttl 0) keeps no error heuristically.
		p.NegativeTTL = -1
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
	if h.LoadRequests < 0 {
		return errors.New("coral_proxy: load_requests must be positive")
	}
	switch h.BandwidthShare {
	case "", bandwidthShareFair, bandwidthShareNode:
	default:
		return fmt.Errorf("coral_proxy: bandwidth_share %q: want fair or node", h.BandwidthShare)
	}
	return nil
}

// Cleanup releases this configuration's hold on the cache. Caddy also
// cleans up a handler whose Provision failed part way.
func (h *Handler) Cleanup() error {
	removeRunningProxy(h)
	h.metrics.release()
	if h.abuse != nil {
		h.abuse.Close()
	}
	h.releaseFleet()
	if h.storeKey == "" {
		return nil
	}
	_, err := stores.Delete(h.storeKey)
	return err
}

// ServeHTTP serves a Coralized request: the proxy does, its writes bounded
// by write_idle_timeout; its refusals become Caddy's handler errors. A
// request for a host outside the zone goes to the next handler (passOn).
// Every request returns to Caddy, so that its metrics and access log count
// it: a body sent whole returns nil however the client leaves, and one cut
// short an error, its connection cut so that the client cannot take it
// for complete.
func (h *Handler) ServeHTTP(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler) error {
	iw, done := h.idleWrites(w, r)
	if c := h.inflight; c != nil {
		c.Add(1)
		defer c.Add(-1)
	}
	err := h.proxy.ServeHTTP(iw, r)
	done()
	switch {
	case err == nil:
		return nil
	case errors.Is(err, proxy.ErrCutShort):
		// Again: the idle writer moves the deadline when it is done.
		proxy.CutConnection(w)
		status := http.StatusBadGateway
		if r.Context().Err() != nil {
			status = statusClientClosedRequest
		}
		return caddyhttp.Error(status, err)
	case proxy.NotCoralized(err):
		return h.passOn(w, r, next, err)
	}
	return caddyError(err)
}

// statusClientClosedRequest is the status Caddy's reverse_proxy records
// for a client that went away (nginx's 499); it is never sent.
const statusClientClosedRequest = 499

// passOn hands a request for a host outside the proxy's zone to the next
// handler, as a Caddy user combining coral_proxy with other handlers in
// one site expects. Where nothing after coral_proxy answers (it ends the
// route), its refusal stands: 421 Misdirected Request.
func (h *Handler) passOn(w http.ResponseWriter, r *http.Request, next caddyhttp.Handler, refusal error) error {
	if next != nil {
		aw := &answerWatch{ResponseWriter: w}
		if err := next.ServeHTTP(aw, r); err != nil || aw.answered {
			return err
		}
	}
	h.proxy.CountNotCoralized()
	return caddyError(refusal)
}

// answerWatch notes whether a handler answered: wrote a head or body,
// flushed, or took the connection over.
type answerWatch struct {
	http.ResponseWriter
	answered bool
}

func (a *answerWatch) WriteHeader(status int) {
	a.answered = true
	a.ResponseWriter.WriteHeader(status)
}

func (a *answerWatch) Write(b []byte) (int, error) {
	a.answered = true
	return a.ResponseWriter.Write(b)
}

// ReadFrom keeps sendfile for a file server's bodies.
func (a *answerWatch) ReadFrom(src io.Reader) (int64, error) {
	a.answered = true
	return io.Copy(a.ResponseWriter, src)
}

func (a *answerWatch) FlushError() error {
	a.answered = true
	return http.NewResponseController(a.ResponseWriter).Flush()
}

func (a *answerWatch) Hijack() (net.Conn, *bufio.ReadWriter, error) {
	a.answered = true
	return http.NewResponseController(a.ResponseWriter).Hijack()
}

func (a *answerWatch) Unwrap() http.ResponseWriter { return a.ResponseWriter }

// caddyError is err as Caddy's handler error: a proxy's *Error with its
// status, anything else (the client went away) as it is.
func caddyError(err error) error {
	var pe *proxy.Error
	if errors.As(err, &pe) {
		return caddyhttp.Error(pe.Status, pe.Err)
	}
	return err
}

// defaultWriteIdleTimeout is how long a write to a client may make no
// progress before the client is dropped (write_idle_timeout).
const defaultWriteIdleTimeout = 30 * time.Second

// idleWrites bounds every write of r's response to the client with the
// handler's write_idle_timeout, renewed as bytes flow: each write, flush
// and 64 KiB of a file sent with sendfile must make progress within it, or
// the connection is closed. So a client that stops reading is dropped and
// closes the cache Readers it holds (a version it reads stays on disk,
// counted against cache_size, until it does) however large the response.
// Caddy's server-wide idle writer (its write_idle_timeout) is overridden
// for the handler's response; when the server has none, the handler
// installs its own. It returns the writer to use and what to call when the
// handler is done.
func (h *Handler) idleWrites(w http.ResponseWriter, r *http.Request) (http.ResponseWriter, func()) {
	timeout := time.Duration(h.WriteIdleTimeout)
	if timeout <= 0 {
		return w, func() {}
	}
	if _, iw := caddyhttp.IdleTimeoutsFromContext(r.Context()); iw != nil {
		return w, iw.Override(timeout, 0, 0)
	}
	iw := &caddyhttp.IdleTimeoutWriter{
		ResponseWriterWrapper: &caddyhttp.ResponseWriterWrapper{ResponseWriter: w},
		Ctrl:                  http.NewResponseController(w),
		Deadline:              caddyhttp.IdleDeadline{Start: time.Now(), Timeout: timeout},
		Logger:                h.logger,
		// On HTTP/2 an armed deadline resets the stream even between
		// writes (see IdleTimeoutWriter).
		ClearBetweenWrites: r.ProtoMajor == 2,
	}
	return iw, iw.HandlerDone
}

// The values of Handler.BandwidthShare.
const (
	bandwidthShareFair = "fair"
	bandwidthShareNode = "node"
)

// provisionAbuse sets up the blacklists, the rate limit and the budget.
func (h *Handler) provisionAbuse() error {
	logger := h.logger
	fleet, err := h.provisionFleet()
	if err != nil {
		return err
	}
	h.fleet = fleet
	a, err := abuse.New(abuse.Config{
		BlacklistPath: h.Blacklist,
		BlacklistPoll: time.Duration(h.BlacklistPoll),
		Fleet:         fleet,
		Logf:          func(format string, args ...any) { logger.Warn(fmt.Sprintf(format, args...)) },
		Rate:          h.RateLimit,
		Burst:         h.RateBurst,
		BudgetBytes:   h.BandwidthBudget,
		BudgetWindow:  time.Duration(h.BandwidthWindow),
		BudgetPerNode: h.BandwidthShare == bandwidthShareNode,
	})
	if err != nil {
		return err
	}
	a.OnBudget = countBudgetDecision
	h.abuse = a
	return nil
}

// requestClientAddr is the client's address: Caddy's client_ip variable,
// which honours trusted_proxies, else the connection's remote address.
// Behind a load balancer that is not listed in trusted_proxies every
// client would share the balancer's address, and its rate.
func requestClientAddr(r *http.Request) netip.Addr {
	if s, ok := caddyhttp.GetVar(r.Context(), caddyhttp.ClientIPVarKey).(string); ok {
		if a, err := netip.ParseAddr(s); err == nil {
			return a
		}
	}
	return proxy.RemoteAddr(r)
}

// parsePrefixes reads the address prefixes of the option named option.
func parsePrefixes(option string, prefixes []string) ([]netip.Prefix, error) {
	var out []netip.Prefix
	for _, a := range prefixes {
		p, err := parsePrefix(a)
		if err != nil {
			return nil, fmt.Errorf("coral_proxy: %s %q: %w", option, a, err)
		}
		out = append(out, p)
	}
	return out, nil
}

// parsePrefix reads a prefix, or an address as the prefix of it alone.
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

// Interface guards.
var (
	_ caddy.Provisioner           = (*Handler)(nil)
	_ caddy.Validator             = (*Handler)(nil)
	_ caddy.CleanerUpper          = (*Handler)(nil)
	_ caddyhttp.MiddlewareHandler = (*Handler)(nil)
	_ caddyfile.Unmarshaler       = (*Handler)(nil)
)
