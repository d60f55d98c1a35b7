package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"os"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coralcdn/coral/module/caddy/diskcache"
)

func addrs(s ...string) func() []netip.Addr {
	return func() []netip.Addr {
		var out []netip.Addr
		for _, a := range s {
			out = append(out, netip.MustParseAddr(a))
		}
		return out
	}
}

// TestSelfAddressesRefused: the node's own addresses are refused as
// origins, a public one too, and whatever allow_origins prefix covers
// them; only an entry naming the address alone allows it. The node's
// public address used to be fetched from (11.70.70.1.9170.nyud.test/metrics
// reached a service private only by firewall).
func TestSelfAddressesRefused(t *testing.T) {
	self := newSelfAddresses(addrs("11.70.70.1", "127.0.0.5", "2001:4860::1"))
	wide := originGuard{allow: prefixes("127.0.0.0/8", "11.0.0.0/8"), self: self}
	exact := originGuard{allow: prefixes("127.0.0.0/8", "127.0.0.5/32", "11.70.70.1/32"), self: self}
	for _, c := range []struct {
		g    originGuard
		ip   string
		want bool
	}{
		{originGuard{self: self}, "11.70.70.1", false},        // the node's public address
		{originGuard{self: self}, "11.70.70.2", true},         // a public neighbour
		{originGuard{self: self}, "::ffff:11.70.70.1", false}, // mapped
		{originGuard{self: self}, "64:ff9b::b46:4601", false}, // NAT64 of 11.70.70.1
		{originGuard{self: self}, "2001:4860::1", false},
		{wide, "127.0.0.5", false}, // a listener's address, inside an allowed prefix
		{wide, "127.0.70.1", true}, // another loopback origin
		{wide, "11.70.70.1", false},
		{exact, "127.0.0.5", true},
		{exact, "11.70.70.1", true},
		{originGuard{}, "11.70.70.1", true}, // no self set: as before
	} {
		if got := c.g.permitted(netip.MustParseAddr(c.ip)); got != c.want {
			t.Errorf("allow %v: %s permitted %v, want %v", c.g.allow, c.ip, got, c.want)
		}
	}
}

// TestSelfAddressesRefreshed: the set is read again after selfRefresh (in
// virtual time).
func TestSelfAddressesRefreshed(t *testing.T) {
	synctest.Test(t, testSelfAddressesRefreshed)
}

func testSelfAddressesRefreshed(t *testing.T) {
	current := "192.0.2.1"
	s := newSelfAddresses(func() []netip.Addr { return []netip.Addr{netip.MustParseAddr(current)} })
	if !s.contains(netip.MustParseAddr("192.0.2.1")) {
		t.Fatal("first address missing")
	}
	current = "192.0.2.2"
	if s.contains(netip.MustParseAddr("192.0.2.2")) {
		t.Fatal("read again before selfRefresh")
	}
	time.Sleep(selfRefresh)
	if !s.contains(netip.MustParseAddr("192.0.2.2")) || s.contains(netip.MustParseAddr("192.0.2.1")) {
		t.Fatal("not read again after selfRefresh")
	}
}

// TestSelfOriginThroughProxy: a Coralized name naming the proxy's own
// listener gets 403 (a literal) or is refused when dialled (a name), and
// the listener is never asked; another loopback origin is served.
func TestSelfOriginThroughProxy(t *testing.T) {
	var selfHits int
	selfSrv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		selfHits++
		io.WriteString(w, "metrics: secret")
	}))
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	selfSrv.Listener = ln
	selfSrv.Start()
	defer selfSrv.Close()
	origin := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "public") }))
	oln, err := net.Listen("tcp", "127.0.0.2:0")
	if err != nil {
		t.Skipf("no 127.0.0.2: %v", err)
	}
	origin.Listener = oln
	origin.Start()
	defer origin.Close()

	// The proxy's own addresses: besides what it finds itself (its
	// interfaces', its process's listeners'), 127.0.0.1 and ::1.
	// 127.0.0.2, where the other origin listens (in this process too), is
	// allowed alone.
	p := startLocalProxy(t, 0, func(c *Config, _ *diskcache.Options) {
		c.OwnAddrs = addrs("127.0.0.1", "::1")
		c.AllowOrigins = prefixes("127.0.0.0/8", "127.0.0.2/32")
	})
	selfPort := netip.MustParseAddrPort(ln.Addr().String()).Port()
	for _, host := range []string{fmt.Sprintf("127.0.0.1.%d.nyud.test", selfPort)} {
		if resp, body := p.get(t, host, "/metrics"); resp.StatusCode != http.StatusForbidden {
			t.Errorf("%s: %d %q, want 403", host, resp.StatusCode, body)
		}
	}
	// A name that resolves to it is refused where the socket is dialled.
	if err := p.px.guard.control("tcp4", ln.Addr().String(), nil); !errors.Is(err, errOriginForbidden) {
		t.Errorf("dialling the node's own listener: %v, want errOriginForbidden", err)
	}
	if selfHits != 0 {
		t.Errorf("the node's own listener was asked %d times", selfHits)
	}
	op := netip.MustParseAddrPort(oln.Addr().String()).Port()
	if resp, body := p.get(t, fmt.Sprintf("127.0.0.2.%d.nyud.test", op), "/"); resp.StatusCode != http.StatusOK || body != "public" {
		t.Errorf("another loopback origin: %d %q", resp.StatusCode, body)
	}
}

// TestProcessListenerAddrs: this process's listening TCP and bound UDP
// sockets are found, and a connected one is not.
func TestProcessListenerAddrs(t *testing.T) {
	if _, err := os.Stat("/proc/self/net/tcp"); err != nil {
		t.Skip("no /proc/self/net")
	}
	tl, err := net.Listen("tcp", "127.0.0.91:0")
	if err != nil {
		t.Fatal(err)
	}
	defer tl.Close()
	ul, err := net.ListenPacket("udp", "127.0.0.92:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ul.Close()
	t6, err := net.Listen("tcp6", "[::1]:0")
	if err == nil {
		defer t6.Close()
	}
	got := processListenerAddrs()
	for _, want := range []string{"127.0.0.91", "127.0.0.92"} {
		if !slices.Contains(got, netip.MustParseAddr(want)) {
			t.Errorf("%s missing from %v", want, got)
		}
	}
	if t6 != nil && !slices.Contains(got, netip.IPv6Loopback()) {
		t.Errorf("::1 missing from %v", got)
	}
}

func prefixes(s ...string) []netip.Prefix {
	var out []netip.Prefix
	for _, p := range s {
		out = append(out, netip.MustParsePrefix(p))
	}
	return out
}
