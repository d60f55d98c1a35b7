package proxy

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/httpcache"
	"go.uber.org/zap"
)

// Proxy serves Coralized requests for one configuration (New): from its
// cache, from the downloads it runs (each object once however many clients
// wait), which copy from peer proxies the DSHT names or fetch from the
// origin. It is safe for concurrent use.
type Proxy struct {
	settings

	failures *originFailures
	// targets keeps recent requests' parsed targets (targetcache.go).
	targets *targetCache
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
	// fieldsMatter remembers, until when, origins (originSlot) that
	// showed they look at clients' fields: their misses are fetched with
	// the client's fields first (neutral.go).
	fieldsMatter *boundedMap[time.Time]
	// slots bounds the downloads in progress.
	slots *downloadSlots
	// slices are the slices of big objects being fetched (slices.go).
	slices *sliceTable
	// peerAddr is this proxy's HTTP address for references: configured, or
	// learned from the first request.
	peerAddr atomic.Pointer[netip.AddrPort]

	mu       sync.Mutex
	inflight map[string]*download
}

// settings is what a Proxy takes from its Config, in the form it uses.
type settings struct {
	store *diskcache.Store
	refs  *References
	node  func() DHT
	// How long an origin or a peer may keep a response body silent.
	originTimeout, peerTimeout time.Duration
	origin                     *http.Client
	peer                       *http.Client
	policy                     httpcache.Policy
	logger                     *zap.Logger
	userAgent                  string
	zone                       string // the alias zone, for Coralizing redirects
	// scheme is how origins are fetched first: "http" or "https"
	// (origin_scheme; auto is http, upgraded as origins redirect).
	scheme string
	// httpsPort, when not 0, is where one-label names over plain http are
	// redirected (https_redirect).
	httpsPort int
	guard     originGuard
	// peerGuard decides which addresses in DSHT references may be asked:
	// public ones, and those allow_peers lists.
	peerGuard originGuard
	// forward is the allow-list of request fields sent to origins and
	// peers (ForwardFields).
	forward []string
	// The download slots: in all, per origin, per client and origin
	// (max_downloads); a request that would start a download waits at
	// most downloadWait for one.
	maxDownloads, maxDownloadsPerOrigin, maxDownloadsPerClient int
	downloadWait                                               time.Duration
	// downloadTimeout bounds a whole download, however steadily its
	// bytes trickle in (originTimeout bounds each silence).
	downloadTimeout time.Duration
	// maxObject is the cache's bound on one object (max_object_size),
	// which also bounds a transfer-coded body as it is decoded.
	maxObject       int64
	peerRetryJitter time.Duration
	metrics         Metrics
	fetched         func(Fetch)
	abuse           Abuse
	clientAddr      func(*http.Request) netip.Addr
	// clientPrefixV4 and clientPrefixV6 are the prefix lengths a client
	// is counted by in the per-client download bounds.
	clientPrefixV4, clientPrefixV6 int
}

// New builds a proxy from c, which must be valid (Config.Validate) and
// have a Store.
func New(c Config) (*Proxy, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	if c.Store == nil {
		return nil, errors.New("coral proxy: Config.Store is required")
	}
	forward, _ := ForwardFields(c.ForwardFields)
	st := c.Store.Stats()
	bounds := slotBoundsOf(&c)
	bounds.perClientBytes = clientBytesShare(st.MaxBytes, st.MaxObjectBytes)
	p := &Proxy{
		failures:      newOriginFailures(3, 30*time.Second),
		targets:       newTargetCache(),
		httpsUpgrades: newHTTPSUpgrades(maxRemembered),
		tooLarge:      newBoundedMap[time.Time](maxRemembered),
		purged:        newBoundedMap[time.Time](maxRemembered),
		fieldsMatter:  newBoundedMap[time.Time](maxRemembered),
		slots:         newDownloadSlots(bounds),
		slices:        newSliceTable(c.SliceSize),
		inflight:      make(map[string]*download),
	}
	// The guard's own addresses include the proxy's (advertisedAddrs).
	guard := originGuard{allow: c.AllowOrigins, self: newSelfAddresses(p.ownAddrSources(c.OwnAddrs)...)}
	p.settings = settings{
		store: c.Store, refs: c.References, node: c.Node,
		originTimeout: c.OriginTimeout, peerTimeout: c.PeerTimeout,
		origin: &http.Client{Transport: originTransport(guard, c.OriginTimeout, c.OriginTimeout), CheckRedirect: noRedirects},
		peer:   &http.Client{Transport: p.peerTransport(c.PeerTimeout, c.OriginTimeout+c.PeerTimeout), CheckRedirect: noRedirects},
		policy: c.Policy, logger: c.Logger, userAgent: c.UserAgent, zone: c.Zone,
		scheme: "http", guard: guard, peerGuard: originGuard{allow: c.AllowPeers}, forward: forward,
		maxDownloads: c.MaxDownloads, maxDownloadsPerOrigin: c.MaxDownloadsPerOrigin, maxDownloadsPerClient: c.MaxDownloadsPerClient,
		downloadWait: c.DownloadWait, downloadTimeout: c.DownloadTimeout,
		maxObject: st.MaxObjectBytes, peerRetryJitter: c.PeerRetryJitter,
		metrics: c.Metrics, fetched: c.Fetched, abuse: c.Abuse, clientAddr: c.ClientAddr,
		clientPrefixV4: c.ClientPrefixV4, clientPrefixV6: c.ClientPrefixV6,
	}
	if c.OriginScheme == "https" {
		p.scheme = "https"
	}
	if c.HTTPSRedirect {
		p.httpsPort = c.HTTPSPort
	}
	if p.node == nil {
		p.node = func() DHT { return nil }
	}
	if p.metrics == nil {
		p.metrics = nopMetrics{}
	}
	if c.PeerAddress.IsValid() {
		addr := c.PeerAddress
		p.peerAddr.Store(&addr)
	}
	return p, nil
}

// dhtNode is the DSHT node to use now (Config.Node), or nil.
func (p *Proxy) dhtNode() DHT { return p.node() }

// downloadContext is the context of one download: not the request's, since
// the download outlives the client that started it, but ended at
// download_timeout.
func (p *Proxy) downloadContext() (context.Context, context.CancelFunc) {
	return context.WithTimeout(context.Background(), p.downloadTimeout)
}

// peerTransport is the HTTP transport for peers: dialled only to
// addresses allow_peers permits, bounded headers and timeouts. connect
// bounds the connection (peer_timeout); head the wait for the response
// head (origin_timeout + peer_timeout): a peer that is itself downloading
// the object answers once its own origin has, and a proxy that gave up on
// it sooner would fetch the object from the origin a second time.
func (p *Proxy) peerTransport(connect, head time.Duration) *http.Transport {
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            (&net.Dialer{Timeout: connect, Control: p.peerControl}).DialContext,
		ResponseHeaderTimeout:  head,
		MaxResponseHeaderBytes: maxHeadBytes,
		MaxIdleConnsPerHost:    8,
		DisableCompression:     true,
	}
}

func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// maxRemembered bounds what the proxy remembers per origin or object:
// origins that redirect to https, objects too large to cache.
const maxRemembered = 10000
