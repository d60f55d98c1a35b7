package coraldht

import (
	"context"
	"testing"
	"testing/synctest"

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
