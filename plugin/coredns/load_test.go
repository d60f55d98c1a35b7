package coral

import (
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
)

// TestLoadAwareAnswers: issue 41, through CoreDNS's own server and real
// DSHT nodes on loopback UDP. The server's clusters: site-a (its level 2)
// with proxies .11 and .12, site-b (level 2) with .21 and .22 in its region
// east (level 1), and .31 in region west. A resolver at level 2 gets the
// proxies of site-a; as they publish loads over load_threshold it gets the
// one with room, then those of its region, then the other region's, and
// when every proxy is loaded still an answer (site-a's); a proxy whose
// load falls gets clients again.
func TestLoadAwareAnswers(t *testing.T) {
	if testing.Short() {
		t.Skip("starts CoreDNS and six DSHT nodes on loopback")
	}
	if !slices.Contains(dnsserver.Directives, "coral") {
		dnsserver.Directives = append(slices.Clone(dnsserver.Directives), "coral")
	}
	server := netip.MustParseAddrPort("127.0.144.1:5392")
	dht := netip.AddrPortFrom(server.Addr(), 4300)
	resolver := netip.MustParseAddr("127.0.144.200")
	inst, err := caddy.Start(caddy.CaddyfileInput{ServerTypeName: "dns", Contents: []byte(fmt.Sprintf(`nyucd.test:%d {
	bind %s
	coral nyucd.test {
		listen %s
		cluster 1 east
		cluster 2 site-a
		classify %s/32 2
		check_interval 100ms
		live_within 1s
		load_threshold 80
	}
}`, server.Port(), server.Addr(), dht, resolver))})
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Stop()
	defer inst.ShutdownCallbacks()

	proxies := map[string]*coraldht.Node{}
	for _, p := range []struct{ addr, region, site string }{
		{"127.0.144.11", "east", "site-a"}, {"127.0.144.12", "east", "site-a"},
		{"127.0.144.21", "east", "site-b"}, {"127.0.144.22", "east", "site-b"},
		{"127.0.144.31", "west", "site-c"},
	} {
		cfg := coraldht.DefaultConfig()
		cfg.Services = coraldht.ServiceHTTP
		cfg.Pins = map[int]string{1: p.region, 2: p.site}
		cfg.HintHops = 0
		tr, err := coraldht.ListenUDP(p.addr + ":4300")
		if err != nil {
			t.Fatal(err)
		}
		n, err := coraldht.NewNode(cfg, tr)
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		proxies[p.addr] = n
		n.SetLoad(coraldht.Load{Known: true, Requests: 10})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	for _, n := range proxies {
		if err := n.Bootstrap(ctx, dht); err != nil {
			t.Fatal(err)
		}
	}

	client := &dns.Client{Net: "udp", Timeout: 2 * time.Second, Dialer: &net.Dialer{LocalAddr: &net.UDPAddr{IP: resolver.AsSlice()}}}
	ask := func() []string {
		q := new(dns.Msg)
		q.SetQuestion(full2, dns.TypeA)
		resp, _, err := client.Exchange(q, server.String())
		if err != nil {
			t.Fatalf("query: %v", err)
		}
		var got []string
		for _, rr := range resp.Answer {
			if a, ok := rr.(*dns.A); ok {
				got = append(got, a.A.String())
			}
		}
		slices.Sort(got)
		return got
	}
	// await asks until the answer is want, three times in a row (an
	// answer rotates among equals), or the deadline.
	await := func(step string, want ...string) {
		t.Helper()
		slices.Sort(want)
		same := 0
		var got []string
		for same < 3 {
			if ctx.Err() != nil {
				t.Fatalf("%s: answers %v, want %v", step, got, want)
			}
			if got = ask(); slices.Equal(got, want) {
				same++
			} else {
				same = 0
				time.Sleep(50 * time.Millisecond)
			}
		}
		t.Logf("%s: %s", step, strings.Join(got, " "))
	}
	load := func(addr string, percent uint8) {
		proxies[addr].SetLoad(coraldht.Load{Known: true, Bandwidth: percent, Requests: 10})
	}
	moved0 := loadAnswersMoved(t)

	await("no load: the site's proxies", "127.0.144.11", "127.0.144.12")
	start := time.Now()
	load("127.0.144.11", 95)
	await("one loaded: the site's other proxy", "127.0.144.12")
	t.Logf("a saturated proxy left the answers %v after publishing its load", time.Since(start).Round(time.Millisecond))
	load("127.0.144.12", 80) // at the threshold: loaded
	await("the site loaded: its region", "127.0.144.21", "127.0.144.22")
	load("127.0.144.21", 100)
	load("127.0.144.22", 255)
	await("the region loaded: everyone", "127.0.144.31")
	load("127.0.144.31", 99)
	await("every proxy loaded: still an answer, the site's", "127.0.144.11", "127.0.144.12")
	load("127.0.144.12", 79)
	await("room again", "127.0.144.12")
	if moved := loadAnswersMoved(t) - moved0; moved < 6 {
		t.Errorf("load_answers_total{outcome=moved} rose by %v, want at least 6 (the answers from the region and from everyone)", moved)
	}
}

// loadAnswersMoved sums load_answers_total{outcome="moved"} over its
// other labels, as the prometheus plugin would serve it.
func loadAnswersMoved(t *testing.T) float64 {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != "coredns_coral_load_answers_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "outcome" && l.GetValue() == loadMoved {
					sum += m.GetCounter().GetValue()
				}
			}
		}
	}
	return sum
}
