package coral

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

// TestFamiliarity: an address is familiar once answered in familiarAfter
// different seconds (a burst in one second is one), and for familiarFor
// after a strong proof; never before.
func TestFamiliarity(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newProbeGate(defaultSourceRate, defaultDestinationRate, time.Now)
		a, b := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("203.0.113.9")
		for range 10 {
			g.answered(a, proofNone)
		}
		if p := g.proofOf(a, false); p != proofNone {
			t.Fatalf("ten answers in one second: %v, want none", p)
		}
		for range familiarAfter - 1 {
			time.Sleep(time.Second)
			g.answered(a, proofNone)
		}
		if p := g.proofOf(a, false); p != proofFamiliar {
			t.Fatalf("answered in %d seconds: %v, want familiar", familiarAfter, p)
		}
		if p := g.proofOf(a, true); p != proofStrong {
			t.Fatalf("over TCP: %v, want strong", p)
		}
		g.answered(b, proofStrong)
		if p := g.proofOf(b, false); p != proofFamiliar {
			t.Fatalf("after a strong proof: %v, want familiar", p)
		}
		time.Sleep(familiarFor + time.Second)
		if p := g.proofOf(b, false); p != proofNone {
			t.Fatalf("an hour after its one strong proof: %v, want none", p)
		}
	})
}

// TestProbeGateShares: no proof, no probe; a familiar source may use half
// of the budget, a strongly proven one all of it; ECS targets need a
// strong proof of the resolver.
func TestProbeGateShares(t *testing.T) {
	g := newProbeGate(maxProbeRate, maxProbeRate, time.Now)
	res, client := netip.MustParseAddr("198.51.100.7"), netip.MustParseAddr("203.0.113.9")
	for _, tc := range []struct {
		name     string
		who      asker
		target   netip.Addr
		inflight int
		want     gateVerdict
	}{
		{"unproven", asker{res, proofNone}, res, 0, gateUnproven},
		{"familiar, below half", asker{res, proofFamiliar}, res, 31, gateAllowed},
		{"familiar, half in flight", asker{res, proofFamiliar}, res, 32, gateBusy},
		{"strong, half in flight", asker{res, proofStrong}, res, 32, gateAllowed},
		{"strong, all in flight", asker{res, proofStrong}, res, 64, gateBusy},
		{"familiar resolver, ECS client", asker{res, proofFamiliar}, client, 0, gateUnproven},
		{"strong resolver, ECS client", asker{res, proofStrong}, client, 0, gateAllowed},
	} {
		if got := g.admit(tc.who, tc.target, tc.inflight, 64); got != tc.want {
			t.Errorf("%s: %v, want %v", tc.name, got, tc.want)
		}
	}
}

// TestProbeRates: a source prefix starts at most its burst at once and
// then its rate; a destination prefix is probed at most destinationBurst
// times at once, whoever asks, and then its rate.
func TestProbeRates(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		g := newProbeGate(60, 6, time.Now) // 1/s per source, 0.1/s per destination
		admitted := func(who asker, target func(i int) netip.Addr, n int) int {
			ok := 0
			for i := range n {
				if g.admit(who, target(i), 0, 64) == gateAllowed {
					ok++
				}
			}
			return ok
		}
		src := asker{netip.MustParseAddr("198.51.100.7"), proofStrong}
		many := func(i int) netip.Addr { return netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1}) }
		if n := admitted(src, many, 10); n != 2 {
			t.Errorf("a source's first 10 starts: %d admitted, want its burst of 2", n)
		}
		time.Sleep(3 * time.Second)
		if n := admitted(src, func(i int) netip.Addr { return many(100 + i) }, 10); n != 2 {
			t.Errorf("3 s later at 1/s: %d admitted, want 2 (the burst is the most)", n)
		}
		victim := netip.MustParseAddr("192.0.2.1")
		fromMany := 0
		for i := range 20 {
			who := asker{netip.AddrFrom4([4]byte{203, 0, byte(i), 1}), proofStrong}
			if g.admit(who, victim, 0, 64) == gateAllowed {
				fromMany++
			}
		}
		if fromMany != destinationBurst {
			t.Errorf("20 sources aiming at one /24: %d admitted, want %d", fromMany, destinationBurst)
		}
		time.Sleep(10 * time.Second)
		if g.admit(asker{netip.MustParseAddr("203.0.200.1"), proofStrong}, victim, 0, 64) != gateAllowed {
			t.Error("10 s later the destination is not admitted again")
		}
	})
}

// TestMappingKeptForProvenClients (issue 34, finding 2's "a flood of forged
// /24s must not deny a real client its mapping"): a flood of UDP queries
// from new /24s without a cookie starts no mapping (each gets an empty
// truncated response); a flood from familiar sources holds at most half of
// proximity_limit; a client that proves itself over TCP during both still
// gets a mapping.
func TestMappingKeptForProvenClients(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := testCoral(t, nearWorld())
		var mu sync.Mutex
		mapped := map[netip.Addr]bool{}
		release := make(chan struct{})
		blocking := func(ctx context.Context, target netip.Addr, _ int) (traced, error) {
			mu.Lock()
			mapped[target] = true
			mu.Unlock()
			select {
			case <-release:
			case <-ctx.Done():
			}
			return traced{}, nil
		}
		p := withProximity(c, blocking, fakeHints{}.find, 20*time.Millisecond)
		p.limit = 8
		udp := func(ip string) *dns.Msg {
			m := new(dns.Msg)
			m.SetQuestion(full2, dns.TypeA)
			rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: ip})
			c.ServeDNS(context.Background(), rec, m)
			return rec.Msg
		}
		var wg sync.WaitGroup
		for i := range 200 {
			wg.Go(func() {
				if m := udp(fmt.Sprintf("10.0.%d.%d", i%250, 1+i/250)); !m.Truncated || len(m.Answer) > 0 {
					t.Errorf("forged-looking query: %v, want an empty truncated response", m)
				}
			})
		}
		wg.Wait()
		synctest.Wait()
		mu.Lock()
		n := len(mapped)
		mu.Unlock()
		if n != 0 {
			t.Fatalf("%d mappings for sources that proved nothing, want none", n)
		}
		// Familiar sources: answered in three different seconds.
		familiar := func(i int) string { return fmt.Sprintf("10.1.%d.1", i) }
		for range familiarAfter {
			for i := range 20 {
				c.gate.answered(netip.MustParseAddr(familiar(i)), proofNone)
			}
			time.Sleep(time.Second)
		}
		for i := range 20 {
			wg.Go(func() { udp(familiar(i)) })
		}
		wg.Wait()
		synctest.Wait()
		mu.Lock()
		n = len(mapped)
		mu.Unlock()
		if n != p.limit/2 {
			t.Fatalf("familiar flood: %d mappings, want half of proximity_limit (%d)", n, p.limit/2)
		}
		// The real client, over TCP: a mapping of its own.
		query(c, "10.2.99.1", full2, dns.TypeA, answers)
		mu.Lock()
		got := mapped[netip.MustParseAddr("10.2.99.1")]
		mu.Unlock()
		if !got {
			t.Fatal("the client proven over TCP got no mapping during the flood")
		}
		close(release)
		p.wg.Wait()
	})
}

// TestUnprovenECS: a trusted resolver's client subnet is used only when
// the resolver proved itself; over UDP without a valid cookie the query
// gets an empty truncated response (and no probe toward the subnet), over
// TCP the answer for the subnet.
func TestUnprovenECS(t *testing.T) {
	c := testCoral(t, nearWorld())
	c.ecs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}
	p := withProximity(c, hopsTo, fakeHints{"10.0.9.0/24": {"127.0.8.1"}}.find, time.Second)
	defer p.wg.Wait()
	m, got, echo := ecsQueryOver(c, false, "10.0.0.1", full2, "10.0.9.0/24", 0)
	if !m.Truncated || len(got) != 0 || echo != nil {
		t.Errorf("UDP, no cookie: %v, want an empty truncated response", m)
	}
	m, got, echo = ecsQueryOver(c, true, "10.0.0.1", full2, "10.0.9.0/24", 0)
	if m.Truncated || len(got) == 0 || got[0] != "127.0.8.1" || echo == nil {
		t.Errorf("TCP: %v, want the subnet's hinted node first", m)
	}
}
