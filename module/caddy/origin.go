package coralcaddy

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
// reach: private, loopback, link-local, shared (CGNAT), unspecified,
// multicast and documentation-only ranges, unless allow_origins lists them.
var errOriginForbidden = errors.New("coral_proxy: origin address not allowed")

// originGuard decides which origin addresses may be contacted.
type originGuard struct {
	allow []netip.Prefix
}

var (
	cgnat      = netip.MustParsePrefix("100.64.0.0/10")
	benchmark  = netip.MustParsePrefix("198.18.0.0/15")
	reserved4  = netip.MustParsePrefix("240.0.0.0/4")
	thisNet    = netip.MustParsePrefix("0.0.0.0/8")
	nat64Local = netip.MustParsePrefix("64:ff9b:1::/48")
)

// permitted reports whether the proxy may connect to ip.
func (g originGuard) permitted(ip netip.Addr) bool {
	ip = ip.Unmap()
	for _, p := range g.allow {
		if p.Contains(ip) {
			return true
		}
	}
	switch {
	case !ip.IsValid(), ip.IsUnspecified(), ip.IsLoopback(), ip.IsPrivate(), ip.IsLinkLocalUnicast(),
		ip.IsLinkLocalMulticast(), ip.IsInterfaceLocalMulticast(), ip.IsMulticast():
		return false
	case cgnat.Contains(ip), benchmark.Contains(ip), reserved4.Contains(ip), thisNet.Contains(ip), nat64Local.Contains(ip):
		return false
	case ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}):
		return false
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
		MaxResponseHeaderBytes: 64 << 10,
		MaxIdleConns:           256,
		MaxIdleConnsPerHost:    8,
		IdleConnTimeout:        90 * time.Second,
		DisableCompression:     true, // bytes are cached as the origin sent them
		ForceAttemptHTTP2:      true,
	}
}

// originFailures remembers origins that keep failing at the DNS or TCP
// level, so a dead site does not cost every request a connect timeout.
// It is local to this proxy; such failures are never put in the DSHT.
type originFailures struct {
	mu        sync.Mutex
	hosts     map[string]*failState
	threshold int           // consecutive failures before the host is remembered
	hold      time.Duration // how long it is remembered
	max       int           // bound on remembered hosts
	now       func() time.Time
}

type failState struct {
	count int
	until time.Time
}

func newOriginFailures(threshold int, hold time.Duration) *originFailures {
	return &originFailures{hosts: make(map[string]*failState), threshold: threshold, hold: hold, max: 10000, now: time.Now}
}

// down reports whether host is remembered as failing, and until when.
func (f *originFailures) down(host string) (bool, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.hosts[host]
	if !ok || s.until.IsZero() {
		return false, time.Time{}
	}
	if f.now().After(s.until) {
		// Let one request through to try again; a new failure re-arms it.
		s.until = time.Time{}
		s.count = f.threshold - 1
		return false, time.Time{}
	}
	return true, s.until
}

// failed records a DNS or connection failure for host.
func (f *originFailures) failed(host string) {
	f.mu.Lock()
	defer f.mu.Unlock()
	s, ok := f.hosts[host]
	if !ok {
		if len(f.hosts) >= f.max {
			f.sweepLocked()
		}
		s = &failState{}
		f.hosts[host] = s
	}
	s.count++
	if s.count >= f.threshold {
		s.until = f.now().Add(f.hold)
	}
}

// succeeded forgets host's failures.
func (f *originFailures) succeeded(host string) {
	f.mu.Lock()
	delete(f.hosts, host)
	f.mu.Unlock()
}

// sweepLocked drops entries that are not holding a host down, or all of
// them if every one is.
func (f *originFailures) sweepLocked() {
	now := f.now()
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
