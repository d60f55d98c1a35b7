package proxy

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

// Origins are fetched by a proxy that anyone on the Internet can ask to
// fetch anything, so where it may connect is checked on the address it
// actually connects to, after name resolution: a name that resolves to a
// private address (DNS rebinding) is refused like the literal would be.

// errOriginForbidden is returned for origins on addresses the proxy may not
// reach (see originGuard.permitted), unless allow_origins lists them.
var errOriginForbidden = errors.New("coral_proxy: origin address not allowed")

// originGuard decides which addresses may be contacted: origins (with
// allow_origins), and peers named by DSHT references (with allow_peers).
type originGuard struct {
	allow []netip.Prefix
	// self, if set, is the node's own addresses, refused unless allow
	// lists the very address (selfaddr.go).
	self *selfAddresses
}

// listsExactly reports whether allow has an entry that is ip alone.
func (g originGuard) listsExactly(ip netip.Addr) bool {
	for _, p := range g.allow {
		if p.IsSingleIP() && p.Addr() == ip {
			return true
		}
	}
	return false
}

// notGlobal are the special-purpose ranges of the IANA IPv4 and IPv6
// registries (RFC 6890 and its updates) whose addresses are not globally
// reachable, beyond what netip's predicates (loopback, private, link-local,
// multicast, unspecified) cover.
var notGlobal = []netip.Prefix{
	netip.MustParsePrefix("0.0.0.0/8"),       // "this network" (RFC 791)
	netip.MustParsePrefix("100.64.0.0/10"),   // shared address space, CGNAT (RFC 6598)
	netip.MustParsePrefix("192.0.0.0/24"),    // IETF protocol assignments (RFC 6890)
	netip.MustParsePrefix("192.0.2.0/24"),    // documentation, TEST-NET-1 (RFC 5737)
	netip.MustParsePrefix("192.88.99.0/24"),  // deprecated 6to4 relay anycast (RFC 7526)
	netip.MustParsePrefix("198.18.0.0/15"),   // benchmarking (RFC 2544)
	netip.MustParsePrefix("198.51.100.0/24"), // documentation, TEST-NET-2 (RFC 5737)
	netip.MustParsePrefix("203.0.113.0/24"),  // documentation, TEST-NET-3 (RFC 5737)
	netip.MustParsePrefix("240.0.0.0/4"),     // reserved, and the limited broadcast address (RFC 1112, RFC 919)
	netip.MustParsePrefix("::/8"),            // reserved: IPv4-compatible and SIIT-translated forms (RFC 4291, RFC 6052)
	netip.MustParsePrefix("64:ff9b:1::/48"),  // local-use IPv4/IPv6 translation (RFC 8215)
	netip.MustParsePrefix("100::/64"),        // discard-only (RFC 6666)
	netip.MustParsePrefix("2001::/32"),       // Teredo: embeds (obfuscated) IPv4 addresses (RFC 4380)
	netip.MustParsePrefix("2001:2::/48"),     // benchmarking (RFC 5180)
	netip.MustParsePrefix("2001:10::/28"),    // deprecated ORCHID (RFC 4843)
	netip.MustParsePrefix("2001:db8::/32"),   // documentation (RFC 3849)
	netip.MustParsePrefix("3fff::/20"),       // documentation (RFC 9637)
	netip.MustParsePrefix("5f00::/16"),       // SRv6 SIDs (RFC 9602)
	netip.MustParsePrefix("fec0::/10"),       // deprecated site-local (RFC 3879)
}

// IPv6 ranges that carry an IPv4 address: such an address is as reachable
// as the IPv4 address inside, which is checked instead.
var (
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96") // the IPv4 address is the last 32 bits (RFC 6052)
	sixToFour      = netip.MustParsePrefix("2002::/16")    // the IPv4 address is bits 16–47 (RFC 3056)
)

// embeddedIPv4 returns the IPv4 address inside a NAT64 or 6to4 address.
func embeddedIPv4(ip netip.Addr) (netip.Addr, bool) {
	b := ip.As16()
	switch {
	case nat64WellKnown.Contains(ip):
		return netip.AddrFrom4([4]byte(b[12:16])), true
	case sixToFour.Contains(ip):
		return netip.AddrFrom4([4]byte(b[2:6])), true
	}
	return netip.Addr{}, false
}

// permitted reports whether the proxy may connect to ip: an address
// allow lists, or a globally reachable one, but never one of the node's
// own addresses unless allow lists that address alone. Private, loopback,
// link-local, multicast, unspecified and every range in notGlobal are
// refused, and so are NAT64 and 6to4 addresses whose IPv4 address would
// be (a NAT64 gateway or 6to4 relay would otherwise carry the request to
// it).
func (g originGuard) permitted(ip netip.Addr) bool {
	ip = ip.Unmap().WithZone("")
	if g.self.contains(ip) {
		return g.listsExactly(ip)
	}
	for _, p := range g.allow {
		if p.Contains(ip) {
			return true
		}
	}
	if v4, ok := embeddedIPv4(ip); ok {
		return g.permitted(v4)
	}
	if !ip.IsValid() || ip.IsUnspecified() || ip.IsLoopback() || ip.IsPrivate() || ip.IsLinkLocalUnicast() ||
		ip.IsLinkLocalMulticast() || ip.IsInterfaceLocalMulticast() || ip.IsMulticast() {
		return false
	}
	for _, p := range notGlobal {
		if p.Contains(ip) {
			return false
		}
	}
	return true
}

// control runs on every socket the origin transport opens, with the
// resolved address, before connect.
func (g originGuard) control(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("%w: %s", errOriginForbidden, address)
	}
	if !g.permitted(ap.Addr()) {
		return fmt.Errorf("%w: %s", errOriginForbidden, ap.Addr())
	}
	return nil
}

// originTransport is the HTTP transport for origin fetches: guarded
// dialing, certificate verification on, no proxy from the environment,
// bounded headers and timeouts. Redirects are the caller's business.
func originTransport(g originGuard, connectTimeout, headerTimeout time.Duration) *http.Transport {
	d := &net.Dialer{Timeout: connectTimeout, KeepAlive: 30 * time.Second, Control: g.control}
	return &http.Transport{
		Proxy:                  nil,
		DialContext:            d.DialContext,
		TLSHandshakeTimeout:    connectTimeout,
		ResponseHeaderTimeout:  headerTimeout,
		MaxResponseHeaderBytes: maxHeadBytes,
		MaxIdleConns:           256,
		MaxIdleConnsPerHost:    8,
		IdleConnTimeout:        90 * time.Second,
		DisableCompression:     true, // bytes are cached as the origin sent them
		ForceAttemptHTTP2:      true,
	}
}

// originFailures remembers origins (host and port: one port refusing says
// nothing of the others) that keep failing at the DNS or TCP level, so a
// dead site does not cost every request a connect timeout. It is local to
// this proxy; such failures are never put in the DSHT.
type originFailures struct {
	mu        sync.Mutex
	hosts     map[string]*failState
	threshold int           // consecutive failures before the host is remembered
	hold      time.Duration // how long it is remembered
	max       int           // bound on remembered hosts
}

type failState struct {
	count int
	until time.Time
}

func newOriginFailures(threshold int, hold time.Duration) *originFailures {
	return &originFailures{hosts: make(map[string]*failState), threshold: threshold, hold: hold, max: 10000}
}

// down reports whether endpoint (host:port) is remembered as failing, and until when.
func (f *originFailures) down(endpoint string) (bool, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.hosts[endpoint]
	if !ok || s.until.IsZero() {
		return false, time.Time{}
	}
	if time.Now().After(s.until) {
		// Let one request through to try again; a new failure re-arms it.
		s.until = time.Time{}
		s.count = f.threshold - 1
		return false, time.Time{}
	}
	return true, s.until
}

// failed records a DNS or connection failure for endpoint (host:port).
func (f *originFailures) failed(endpoint string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.hosts[endpoint]
	if !ok {
		if len(f.hosts) >= f.max {
			f.sweepLocked()
		}
		s = &failState{}
		f.hosts[endpoint] = s
	}
	s.count++
	if s.count >= f.threshold {
		s.until = time.Now().Add(f.hold)
	}
}

// succeeded forgets endpoint's failures.
func (f *originFailures) succeeded(endpoint string) {
	f.mu.Lock()
	delete(f.hosts, endpoint)
	f.mu.Unlock()
}

// sweepLocked drops entries that are not holding a host down, or all of
// them if every one is.
func (f *originFailures) sweepLocked() {
	now := time.Now()
	for h, s := range f.hosts {
		if s.until.IsZero() || now.After(s.until) {
			delete(f.hosts, h)
		}
	}
	if len(f.hosts) >= f.max {
		clear(f.hosts)
	}
}

// isConnectFailure tells DNS and TCP-level failures (worth remembering)
// from HTTP-level ones (the origin answered).
func isConnectFailure(err error) bool {
	var dnsErr *net.DNSError
	var opErr *net.OpError
	return errors.As(err, &dnsErr) || (errors.As(err, &opErr) && opErr.Op == "dial") || errors.Is(err, context.DeadlineExceeded)
}

// boundedMap is a map safe for concurrent use with a bound on its size:
// at the bound, an arbitrary entry makes room for a new one. It is for
// what the proxy remembers about origins and objects that anyone can make
// it remember, where forgetting one entry costs at most a repeated fetch.
type boundedMap[V any] struct {
	mu         sync.Mutex
	m          map[string]V
	maxEntries int
}

func newBoundedMap[V any](maxEntries int) *boundedMap[V] {
	return &boundedMap[V]{m: make(map[string]V), maxEntries: maxEntries}
}

func (b *boundedMap[V]) get(k string) (v V, ok bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok = b.m[k]
	return v, ok
}

func (b *boundedMap[V]) put(k string, v V) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if _, ok := b.m[k]; !ok && len(b.m) >= b.maxEntries {
		for old := range b.m {
			delete(b.m, old)
			break
		}
	}
	b.m[k] = v
}

// update sets k to what f makes of its current value (ok: there is one),
// in one step.
func (b *boundedMap[V]) update(k string, f func(v V, ok bool) V) {
	b.mu.Lock()
	defer b.mu.Unlock()
	v, ok := b.m[k]
	if !ok && len(b.m) >= b.maxEntries {
		for old := range b.m {
			delete(b.m, old)
			break
		}
	}
	b.m[k] = f(v, ok)
}

func (b *boundedMap[V]) delete(k string) {
	b.mu.Lock()
	delete(b.m, k)
	b.mu.Unlock()
}

func (b *boundedMap[V]) len() int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return len(b.m)
}
