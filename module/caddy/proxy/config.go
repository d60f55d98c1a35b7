package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/abuse"
	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/httpcache"
	"go.uber.org/zap"
)

// Config is what a Proxy is built with (New) and keeps unchanged while it
// runs. Start from DefaultConfig, which says every default, and set Zone
// and Store.
type Config struct {
	// Zone is the alias zone Coralized host names end in, e.g.
	// "nyud.net". Required.
	Zone string
	// Store is the disk cache the proxy serves from and downloads into.
	// Required. Several proxies may share one.
	Store *diskcache.Store
	// References renews the long-lived DSHT references this proxy puts
	// for what Store holds; proxies sharing a store share it. Nil: none is
	// renewed (each lapses at its TTL).
	References *References
	// Node is the one way the proxy reaches its DSHT node: it returns the
	// node to use now, or nil when none runs (the proxy then serves from
	// its cache and the origins alone). See "The node" in the package
	// documentation. Nil: never a node.
	Node func() DHT

	// Policy decides what is stored and for how long. Default
	// httpcache.DefaultPolicy(): Coral's 12 h default and 5 min least
	// freshness.
	Policy httpcache.Policy
	// AllowOrigins are address prefixes of origins the proxy may fetch
	// from although they are private, loopback or otherwise not public
	// (allow_origins). The node's own addresses pass only when a prefix
	// names that address alone.
	AllowOrigins []netip.Prefix
	// AllowPeers are address prefixes where peer proxies may be although
	// they are not public (allow_peers).
	AllowPeers []netip.Prefix
	// OwnAddrs, if set, returns more addresses of this node, refused as
	// origins like its interfaces', its process's listeners', its DSHT
	// node's and PeerAddress (which the proxy finds itself). It is read
	// again every 30 s.
	OwnAddrs func() []netip.Addr
	// ForwardFields are request fields sent to origins and peers besides
	// Accept, Accept-Language and User-Agent (forward_fields).
	ForwardFields []string
	// OriginScheme is how origins are fetched: "http", "https" or "auto"
	// (http, following an origin's redirect to the https form of the same
	// URL itself). Default "auto".
	OriginScheme string
	// HTTPSRedirect answers plain-HTTP requests for one-label names with
	// 308 to https on HTTPSPort (https_redirect). Default off, port 443.
	HTTPSRedirect bool
	HTTPSPort     int

	// OriginTimeout bounds connecting to an origin, waiting for its
	// response header and each silence of its body. Default 15 s.
	OriginTimeout time.Duration
	// PeerTimeout bounds connecting to a peer proxy. The wait for a
	// peer's response head, and each silence of its body, is bounded by
	// OriginTimeout + PeerTimeout: the peer may itself be waiting on its
	// origin. Default 3 s.
	PeerTimeout time.Duration
	// DownloadTimeout bounds one whole download. Default 10 min.
	DownloadTimeout time.Duration
	// MaxDownloads, MaxDownloadsPerOrigin and MaxDownloadsPerClient bound
	// the downloads at once: in all, per origin host and port, and per
	// client address and origin. A request that would start one more
	// waits up to DownloadWait for a slot. Defaults 256, 32, 16 and 10 s
	// (slots.go says why).
	MaxDownloads, MaxDownloadsPerOrigin, MaxDownloadsPerClient int
	DownloadWait                                               time.Duration
	// MaxClientDownloads bounds the downloads one client holds over every
	// origin together, and the requests it may have waiting for a slot;
	// MaxDownloadsPerAddress those from one origin address, whatever the
	// name and port (a wildcard domain is one origin). 0: a share of
	// MaxDownloads, an eighth and a quarter (at least
	// MaxDownloadsPerOrigin); slots.go says why.
	MaxClientDownloads, MaxDownloadsPerAddress int
	// ClientPrefixV4 and ClientPrefixV6 are the prefix lengths a client is
	// counted by in the per-client bounds: an IPv4 address or /24 (8–32),
	// an IPv6 /48 or /56 (32–128). Defaults 32 and 48: a user may have a
	// whole /48 (RFC 6177), so less would let one user count as many.
	ClientPrefixV4, ClientPrefixV6 int
	// PeerRetryJitter bounds the random wait of a download that lost its
	// peer before it does its put+get again, so that the proxies which
	// lost the same peer at the same instant do not all retry at once.
	// Default 1 s; 0 retries at once.
	PeerRetryJitter time.Duration
	// PeerAddress is this proxy's HTTP address for peers. Default: learned
	// from the first plain-HTTP request (the node's IP and the port the
	// request came in on).
	PeerAddress netip.AddrPort
	// SliceSize is the size of the slices an object larger than it is
	// fetched and kept in (slice_size; slices.go), MinSliceSize to
	// MaxSliceSize; 0 keeps every object whole. Default DefaultSliceSize.
	SliceSize int64
	// UserAgent names the proxy after the client's User-Agent in requests
	// to origins and peers. Default "CoralWebPrx/2.0".
	UserAgent string

	// Logger is where the proxy logs. Default: nowhere.
	Logger *zap.Logger
	// Metrics is told about every request and fetch. Default: nothing is
	// counted.
	Metrics Metrics
	// Fetched, if set, is told about every download committed to the
	// cache (for a list of recent fetches).
	Fetched func(Fetch)
	// Abuse decides which requests to refuse (blacklist, rate limit,
	// bandwidth budget). Nil: none is.
	Abuse Abuse
	// ClientAddr is the address of the client that sent a request, for
	// the abuse controls and the per-client download bound. Default
	// RemoteAddr; a server that knows better (trusted proxies) says so.
	ClientAddr func(*http.Request) netip.Addr
}

// Defaults of DefaultConfig.
const (
	defaultOriginTimeout = 15 * time.Second
	defaultPeerTimeout   = 3 * time.Second
	// defaultClientPrefixV4 and defaultClientPrefixV6: see
	// Config.ClientPrefixV4.
	defaultClientPrefixV4 = 32
	defaultClientPrefixV6 = 48
	proxyVersion          = "CoralWebPrx/2.0"
)

// DefaultConfig is a configuration with every default set; Zone and Store
// remain to be given.
func DefaultConfig() Config {
	return Config{
		Policy:                httpcache.DefaultPolicy(),
		OriginScheme:          "auto",
		HTTPSPort:             443,
		OriginTimeout:         defaultOriginTimeout,
		PeerTimeout:           defaultPeerTimeout,
		DownloadTimeout:       defaultDownloadTimeout,
		MaxDownloads:          defaultMaxDownloads,
		MaxDownloadsPerOrigin: defaultMaxDownloadsPerOrigin,
		MaxDownloadsPerClient: defaultMaxDownloadsPerClient,
		DownloadWait:          defaultDownloadWait,
		ClientPrefixV4:        defaultClientPrefixV4,
		ClientPrefixV6:        defaultClientPrefixV6,
		PeerRetryJitter:       peerRetryJitter,
		SliceSize:             DefaultSliceSize,
		UserAgent:             proxyVersion,
		Logger:                zap.NewNop(),
		ClientAddr:            RemoteAddr,
	}
}

// Validate checks c's settings and names the first field that is wrong.
// (New also needs Store, which a configuration being checked, not run,
// has not opened.)
func (c *Config) Validate() error {
	bad := func(field, why string, v any) error {
		return fmt.Errorf("coral proxy: Config.%s %v: %s", field, v, why)
	}
	switch {
	case c.Zone == "":
		return bad("Zone", "is required", `""`)
	case c.OriginScheme != "http" && c.OriginScheme != "https" && c.OriginScheme != "auto":
		return bad("OriginScheme", "want http, https or auto", fmt.Sprintf("%q", c.OriginScheme))
	case c.HTTPSPort < 1 || c.HTTPSPort > 65535:
		return bad("HTTPSPort", "want 1-65535", c.HTTPSPort)
	case c.OriginTimeout <= 0:
		return bad("OriginTimeout", "must be positive", c.OriginTimeout)
	case c.PeerTimeout <= 0:
		return bad("PeerTimeout", "must be positive", c.PeerTimeout)
	case c.DownloadTimeout <= 0:
		return bad("DownloadTimeout", "must be positive", c.DownloadTimeout)
	case c.DownloadWait <= 0:
		return bad("DownloadWait", "must be positive", c.DownloadWait)
	case c.MaxDownloads < 1:
		return bad("MaxDownloads", "must be positive", c.MaxDownloads)
	case c.MaxDownloadsPerOrigin < 1:
		return bad("MaxDownloadsPerOrigin", "must be positive", c.MaxDownloadsPerOrigin)
	case c.MaxDownloadsPerClient < 1:
		return bad("MaxDownloadsPerClient", "must be positive", c.MaxDownloadsPerClient)
	case c.MaxClientDownloads < 0:
		return bad("MaxClientDownloads", "must not be negative (0: an eighth of MaxDownloads)", c.MaxClientDownloads)
	case c.MaxDownloadsPerAddress < 0:
		return bad("MaxDownloadsPerAddress", "must not be negative (0: a quarter of MaxDownloads)", c.MaxDownloadsPerAddress)
	case c.ClientPrefixV4 < 8 || c.ClientPrefixV4 > 32:
		return bad("ClientPrefixV4", "want 8-32", c.ClientPrefixV4)
	case c.ClientPrefixV6 < 32 || c.ClientPrefixV6 > 128:
		return bad("ClientPrefixV6", "want 32-128", c.ClientPrefixV6)
	case c.PeerRetryJitter < 0:
		return bad("PeerRetryJitter", "must not be negative", c.PeerRetryJitter)
	case c.SliceSize != 0 && (c.SliceSize < MinSliceSize || c.SliceSize > MaxSliceSize):
		return bad("SliceSize", "want 1MiB-8MiB, or 0 for none", c.SliceSize)
	case c.UserAgent == "":
		return bad("UserAgent", "is required", `""`)
	case c.Logger == nil:
		return bad("Logger", "is required (zap.NewNop() for none)", nil)
	case c.ClientAddr == nil:
		return bad("ClientAddr", "is required (RemoteAddr by default)", nil)
	}
	if _, err := ForwardFields(c.ForwardFields); err != nil {
		return err
	}
	return nil
}

// DHT is what the proxy asks of its DSHT node: a *coraldht.Node.
type DHT interface {
	// Addr is the node's advertised UDP address, put in the proxy's
	// references so that purges can reach it.
	Addr() netip.AddrPort
	Put(ctx context.Context, key coraldht.ID, value []byte, ttl time.Duration, levels ...int) (coraldht.PutResult, error)
	PutGet(ctx context.Context, key coraldht.ID, value []byte, ttl time.Duration, levels ...int) (coraldht.PutGetResult, error)
}

// Metrics is told what the proxy does, for the counters the server around
// it keeps. Its methods run on the request path: they must be cheap and
// safe for concurrent use.
type Metrics interface {
	// Request counts one request: how it was answered, where its body
	// came from (SourceLocal, SourceOrigin, SourceNone or
	// PeerSource(level)) and the body bytes written to the client.
	Request(status CacheStatus, source string, bodyBytes int64)
	// OriginFetch counts one fetch from an origin server.
	OriginFetch(Outcome)
	// PeerFetch counts one fetch from a peer proxy, or a peer skipped or
	// asked again (OutcomeRefusedAddress, OutcomeRetry).
	PeerFetch(Outcome)
}

// Fetch is one download committed to the cache.
type Fetch struct {
	URL    string        // the URL fetched, as the origin knows it
	Source string        // SourceOrigin or PeerSource(level)
	Status int           // the response's status
	Bytes  int64         // body bytes received
	Took   time.Duration // from the response header to the last byte
}

// Abuse is what the proxy asks of its abuse controls (*abuse.Controls).
type Abuse interface {
	// Admit returns nil for a request to serve, else why not.
	Admit(origin string, client netip.Addr, fromPeer bool) *abuse.Refusal
	// Charger returns what adds the bytes of one response for origin (the
	// origin host) to the bandwidth budget, or nil.
	Charger(origin string) func(n int64)
}

// addressLearner is what an Abuse may also do: learn the address an
// origin host was reached at (*abuse.Controls does, for the fair shares
// of the bandwidth budget, which count an origin by its address).
type addressLearner interface {
	LearnAddress(origin string, addr netip.Addr)
}

// Error is how the proxy refuses a request, or answers one whose fetch
// failed: the HTTP status to answer with, and why. When ServeHTTP returns
// one it has written no response (only header fields such as Allow or
// Retry-After); the server around the proxy writes it, with its own error
// handling (Caddy's, in the adapter).
type Error struct {
	Status int
	Err    error
}

func (e *Error) Error() string { return fmt.Sprintf("HTTP %d: %v", e.Status, e.Err) }

func (e *Error) Unwrap() error { return e.Err }

// NotCoralized reports whether err is the proxy's refusal of a request for
// a host outside its zone (421, an Error): a request for another site,
// which the server around the proxy may hand to its next handler instead.
func NotCoralized(err error) bool { return errors.Is(err, coralname.ErrNotCoralized) }

// statusError is the Error answering with status because of err.
func statusError(status int, err error) error { return &Error{Status: status, Err: err} }

// RemoteAddr is the address of the connection r came in on: the default
// Config.ClientAddr.
func RemoteAddr(r *http.Request) netip.Addr {
	if ap, err := netip.ParseAddrPort(r.RemoteAddr); err == nil {
		return ap.Addr()
	}
	a, _ := netip.ParseAddr(r.RemoteAddr)
	return a
}

// nopMetrics counts nothing: the default Config.Metrics.
type nopMetrics struct{}

func (nopMetrics) Request(CacheStatus, string, int64) {}
func (nopMetrics) OriginFetch(Outcome)                {}
func (nopMetrics) PeerFetch(Outcome)                  {}
