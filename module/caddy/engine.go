package coralcaddy

import (
	"context"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/httpcache"
	"go.uber.org/zap"
)

// dhtNode is the DSHT node to use now: the one running for the newest
// configuration, which a restart in place or a drain replaces, rather than
// the one that ran when the handler was provisioned.
func (e *engine) dhtNode() *coraldht.Node {
	if e.nodeFunc != nil {
		return e.nodeFunc()
	}
	return e.node
}

// engineConfig is what an engine is built with (newEngine) and keeps
// unchanged while it runs. Tests may replace clock.
type engineConfig struct {
	store *diskcache.Store
	// node is a fixed DSHT node (handlers set up outside Caddy); nodeFunc,
	// when set, finds the node running now (see dhtNode).
	node     *coraldht.Node
	nodeFunc func() *coraldht.Node
	// How long an origin or a peer may keep a response body silent.
	originTimeout, peerTimeout time.Duration
	origin                     *http.Client
	peer                       *http.Client
	policy                     httpcache.Policy
	logger                     *zap.Logger
	selfAddr                   func() netip.AddrPort // this proxy's HTTP address, for references
	userAgent                  string
	zone                       string // the alias zone, for Coralizing redirects
	guard                      originGuard
	// peerGuard decides which addresses in DSHT references may be asked:
	// public ones, and those allow_peers lists.
	peerGuard originGuard
	// forward is the allow-list of request fields sent to origins and
	// peers (forwardFields).
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
	maxObject int64
	// clock is time.Now; tests replace it to move time on.
	clock func() time.Time
	// retryDelay, when set, replaces the random delay before a download
	// that lost its peer does its put+get again (tests).
	retryDelay func() time.Duration
	// urlPeers, when set, filters the references a put+get on a URL's
	// key returns (tests: a get that answers with only the downloader's
	// reference, as after a partition).
	urlPeers func([]reference) []reference
	// refs renews the long-lived references of requested objects.
	refs    *refTable
	metrics *proxyMetrics
}

// engine does the fetching for one handler: its fixed configuration and
// the state its downloads share.
type engine struct {
	engineConfig

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
	// slots bounds the downloads in progress.
	slots *downloadSlots
	// peerAddr is this proxy's HTTP address for references: configured, or
	// learned from the first request.
	peerAddr atomic.Pointer[netip.AddrPort]

	mu       sync.Mutex
	inflight map[string]*download
}

// newEngine builds an engine with configuration c and fresh state.
func newEngine(c engineConfig) *engine {
	if c.clock == nil {
		c.clock = time.Now
	}
	e := &engine{
		engineConfig: c,
		failures:     newOriginFailures(3, 30*time.Second),
		targets:      newTargetCache(),
		tooLarge:     newBoundedMap[time.Time](maxRemembered),
		purged:       newBoundedMap[time.Time](maxRemembered),
		slots:        newDownloadSlots(c.maxDownloads, c.maxDownloadsPerOrigin, c.maxDownloadsPerClient),
		inflight:     make(map[string]*download),
	}
	e.httpsUpgrades = newHTTPSUpgrades(maxRemembered, e.now)
	return e
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

// setup builds the fetch engine around a store and a node (a handler set
// up outside Caddy: tests); guard decides which origin addresses may be
// fetched from, peerGuard which peer addresses may be asked.
func (h *Handler) setup(store *diskcache.Store, node *coraldht.Node, guard, peerGuard originGuard, policy httpcache.Policy) {
	h.store = store
	h.eng = newEngine(h.engineConfig(node, guard, peerGuard, policy))
}

// engineConfig is the engine configuration h's options ask for, around
// h.store.
func (h *Handler) engineConfig(node *coraldht.Node, guard, peerGuard originGuard, policy httpcache.Policy) engineConfig {
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
	return engineConfig{
		store:                 h.store,
		node:                  node,
		originTimeout:         time.Duration(h.OriginTimeout),
		peerTimeout:           time.Duration(h.PeerTimeout),
		origin:                &http.Client{Transport: originTransport(guard, time.Duration(h.OriginTimeout), time.Duration(h.OriginTimeout)), CheckRedirect: noRedirects},
		peer:                  &http.Client{Transport: peerTransport, CheckRedirect: noRedirects},
		maxDownloads:          orDefault(h.MaxDownloads, defaultMaxDownloads),
		maxDownloadsPerOrigin: orDefault(h.MaxDownloadsPerOrigin, defaultMaxDownloadsPerOrigin),
		maxDownloadsPerClient: orDefault(h.MaxDownloadsPerClient, defaultMaxDownloadsPerClient),
		downloadWait:          durationOr(h.DownloadWait, defaultDownloadWait),
		downloadTimeout:       durationOr(h.DownloadTimeout, defaultDownloadTimeout),
		maxObject:             h.store.Stats().MaxObjectBytes,
		policy:                policy,
		clock:                 time.Now,
		logger:                h.logger,
		selfAddr:              h.selfAddr,
		userAgent:             proxyVersion,
		forward:               h.forward,
		zone:                  h.Zone,
		guard:                 guard,
		peerGuard:             peerGuard,
	}
}

func noRedirects(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }

// maxRemembered bounds what the proxy remembers per origin or object:
// origins that redirect to https, objects too large to cache.
const maxRemembered = 10000
