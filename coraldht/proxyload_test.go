package coraldht

import (
	"context"
	"testing"
	"testing/synctest"

	"github.com/coralcdn/coral/coraldht/internal/wire"
	"github.com/coralcdn/coral/coraldht/memnet"
)

// TestProxyLoadPublished: a proxy's load travels with its liveness. A
// node that pings it, or hears any datagram from it, knows its latest
// load (PeerLoad, Nodes, PingNode); a change is seen at the next
// datagram; a node that publishes none is Known false.
func TestProxyLoadPublished(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTestNet(t, 3, memnet.Config{}, func(i int, c *Config) {
			if i == 1 {
				c.Services = ServiceHTTP
			} else {
				c.Services = ServiceDNS
			}
		})
		dns, proxy, other := tn.nodes[0], tn.nodes[1], tn.nodes[2]
		ctx := context.Background()
		if got := dns.PeerLoad(proxy.Addr()); got.Known {
			t.Fatalf("load %+v before the proxy published any", got)
		}
		proxy.SetLoad(Load{Known: true, Bandwidth: 40, Requests: 95, Disk: 0})
		if got := proxy.PublishedLoad(); got.Percent() != 95 {
			t.Fatalf("published %+v", got)
		}
		ni, err := dns.PingNode(ctx, proxy.Addr())
		if err != nil {
			t.Fatal(err)
		}
		want := Load{Known: true, Bandwidth: 40, Requests: 95}
		if ni.Load != want || dns.PeerLoad(proxy.Addr()) != want {
			t.Fatalf("after a ping: NodeInfo load %+v, PeerLoad %+v; want %+v", ni.Load, dns.PeerLoad(proxy.Addr()), want)
		}
		var listed bool
		for _, n := range dns.Nodes(ctx, 0, 8, proxy.Addr().Addr(), ServiceHTTP) {
			if n.Addr == proxy.Addr() {
				listed = n.Load == want
			}
		}
		if !listed {
			t.Error("Nodes does not list the proxy with its load")
		}
		// A change is seen with the next datagram; a DNS node's own
		// datagrams carry none.
		proxy.SetLoad(Load{Known: true, Bandwidth: 100})
		if _, err := dns.Ping(ctx, proxy.Addr()); err != nil {
			t.Fatal(err)
		}
		if got := dns.PeerLoad(proxy.Addr()); got.Percent() != 100 || got.Requests != 0 {
			t.Errorf("after the change: %+v", got)
		}
		if _, err := proxy.Ping(ctx, other.Addr()); err != nil {
			t.Fatal(err)
		}
		if got := other.PeerLoad(proxy.Addr()); got.Percent() != 100 {
			t.Errorf("the proxy's own request did not carry its load: %+v", got)
		}
		if got := proxy.PeerLoad(dns.Addr()); got.Known {
			t.Errorf("a DNS node published %+v", got)
		}
		// Unpublished: the last load heard is kept, new ones carry none.
		proxy.SetLoad(Load{})
		if got := proxy.PublishedLoad(); got.Known {
			t.Errorf("SetLoad(Load{}) left %+v", got)
		}
	})
}

func TestLoadPercent(t *testing.T) {
	nan := 0.0
	nan /= nan
	for _, tc := range []struct {
		in   float64
		want uint8
	}{{-5, 0}, {0, 0}, {nan, 0}, {49.4, 49}, {49.5, 50}, {100, 100}, {254.6, 255}, {1e9, 255}} {
		if got := LoadPercent(tc.in); got != tc.want {
			t.Errorf("LoadPercent(%v) = %d, want %d", tc.in, got, tc.want)
		}
	}
}

// TestProxyLoadNotAmplified: the load entry never makes a node send an
// unproven source more than it sent. Pings without a cookie, padded from
// small to large, get replies (and verification pings) no larger than
// themselves: truncated when even the bare reply does not fit, whole
// without the load when only that fits, whole with it when it fits; a
// proven source's ping gets the load.
func TestProxyLoadNotAmplified(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newAuthEnvWith(t, nil)
		want := wire.Load{Present: true, Bandwidth: 50, Requests: 7}
		e.target.SetLoad(loadOf(want))
		seen := map[string]bool{}
		for pad := 1; pad <= 120; pad++ {
			m := e.message(wire.Ping, false)
			m.Echo, m.Pad = 0, pad
			req := e.seal(m, testKey)
			for _, p := range e.send(req) {
				body, _ := testKey.open(p)
				r, err := wire.Decode(body)
				if err != nil {
					t.Fatal(err)
				}
				if len(p) > len(req) {
					t.Fatalf("pad %d: sent %d bytes (response %v, load %+v) for an unproven ping of %d", pad, len(p), r.Response, r.Load, len(req))
				}
				switch {
				case !r.Response:
				case r.Truncated:
					seen["truncated"] = true
				case r.Load.Present:
					seen["whole with the load"] = true
				default:
					seen["whole without the load"] = true
				}
			}
		}
		if len(seen) != 3 {
			t.Errorf("replies to unproven pings padded 1 to 120 bytes: %v; want truncated, whole without the load, whole with it", seen)
		}
		for _, p := range e.send(e.ping()) {
			body, _ := testKey.open(p)
			if m, err := wire.Decode(body); err != nil || !m.Response || m.Load != want {
				t.Errorf("reply to a proven ping: %+v, %v; want the load", m, err)
			}
		}
	})
}
