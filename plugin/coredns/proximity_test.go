package coral

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/miekg/dns"
	dto "github.com/prometheus/client_model/go"
)

// nearWorld: this server (127.0.0.2, DNS only) and four nodes running both
// a proxy and a name server, all in one level-0 cluster. Resolvers in 10.0/16
// are level 0; without a target the sweep's order (rotation at 0) picks
// 127.0.5.1 and 127.0.6.1 first.
func nearWorld() *fakeNodes {
	now := time.Now()
	both := coraldht.ServiceDNS | coraldht.ServiceHTTP
	w := testWorld()
	w.members[0] = []coraldht.NodeInfo{member("127.0.5.1", both, now), member("127.0.6.1", both, now),
		member("127.0.7.1", both, now), member("127.0.8.1", both, now)}
	return w
}

// fakeHints is a DSHT's hints: prefix → node addresses.
type fakeHints map[string][]string

func (h fakeHints) find(ctx context.Context, p netip.Prefix) ([]netip.AddrPort, error) {
	var out []netip.AddrPort
	for _, a := range h[p.String()] {
		out = append(out, netip.AddrPortFrom(netip.MustParseAddr(a), 4000))
	}
	if len(out) == 0 {
		return nil, coraldht.ErrNotFound
	}
	return out, nil
}

// hopsTo traces every target to the same last hops: 203.0.113.1, then
// 198.51.100.1 nearest the target.
func hopsTo(ctx context.Context, target netip.Addr, _ int) (traced, error) {
	return traced{routers: []netip.Addr{netip.MustParseAddr("203.0.113.1"), netip.MustParseAddr("198.51.100.1")}}, nil
}

func withProximity(c *Coral, trace hopTracer, hints hintFinder, budget time.Duration) *proximity {
	pc := proximityConfig{wait: budget, timeout: time.Second, cache: time.Minute, hops: 5, limit: 4, entries: 64}
	c.prox = newProximity(context.Background(), trace, hints, pc, c.gate)
	return c.prox
}

// answerAndNS asks for a Coralized name and returns the proxies in the
// answer and the name servers of the authority section, in order.
func answerAndNS(c *Coral, resolver string) (proxies, servers []string) {
	m, got := query(c, resolver, "www.example.com.http.l2.l1.l0.nyucd.test.", dns.TypeA, answers)
	for _, rr := range m.Ns {
		if ns, ok := rr.(*dns.NS); ok {
			servers = append(servers, ns.Ns)
		}
	}
	return got, servers
}

// proximitySeen reads coredns_coral_proximity_total{source}.
func proximitySeen(source string) float64 {
	var m dto.Metric
	if err := proximityCount.WithLabelValues("", "nyucd.test.", "", source).Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func nsHost(a string) string { return nsLabel(netip.MustParseAddr(a)) + ".nyucd.test." }

// TestProximityRanksHintedNodesFirst: a node that left hints near the
// client comes first in the answer and in the NS set, nearer hints before
// farther ones; without hints or without a tracer the choice is today's.
func TestProximityRanksHintedNodesFirst(t *testing.T) {
	for _, tc := range []struct {
		name   string
		hints  fakeHints
		trace  hopTracer
		answer []string
		ns     []string
		source string
	}{
		{"hint under the last hop's /24", fakeHints{"198.51.100.0/24": {"127.0.7.1"}}, hopsTo,
			[]string{"127.0.7.1", "127.0.5.1"}, []string{nsHost("127.0.7.1"), nsHost("127.0.0.2")}, nearHints},
		{"the client's own /24 beats a hop", fakeHints{"198.51.100.0/24": {"127.0.7.1"}, "10.0.9.0/24": {"127.0.8.1"}}, hopsTo,
			[]string{"127.0.8.1", "127.0.7.1"}, []string{nsHost("127.0.8.1"), nsHost("127.0.7.1")}, nearHints},
		{"a nearer hop beats a farther one", fakeHints{"203.0.113.1/32": {"127.0.6.1"}, "198.51.100.0/24": {"127.0.7.1"}}, hopsTo,
			[]string{"127.0.7.1", "127.0.6.1"}, []string{nsHost("127.0.7.1"), nsHost("127.0.6.1")}, nearHints},
		{"a hop's own address beats its /24", fakeHints{"198.51.100.1/32": {"127.0.6.1"}, "198.51.100.0/24": {"127.0.7.1"}}, hopsTo,
			[]string{"127.0.6.1", "127.0.7.1"}, []string{nsHost("127.0.6.1"), nsHost("127.0.7.1")}, nearHints},
		{"hints from non-members are ignored", fakeHints{"198.51.100.0/24": {"127.0.99.1"}}, hopsTo,
			[]string{"127.0.5.1", "127.0.6.1"}, []string{nsHost("127.0.0.2"), nsHost("127.0.5.1")}, nearHints},
		{"no hints: today's choice", fakeHints{}, hopsTo,
			[]string{"127.0.5.1", "127.0.6.1"}, []string{nsHost("127.0.0.2"), nsHost("127.0.5.1")}, nearNoHints},
		{"no raw socket: today's choice", fakeHints{"198.51.100.0/24": {"127.0.7.1"}}, nil,
			[]string{"127.0.5.1", "127.0.6.1"}, []string{nsHost("127.0.0.2"), nsHost("127.0.5.1")}, nearUnavailable},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testCoral(t, nearWorld())
			p := withProximity(c, tc.trace, tc.hints.find, time.Second)
			before := proximitySeen(tc.source)
			got, ns := answerAndNS(c, "10.0.9.9")
			if strings.Join(got, " ") != strings.Join(tc.answer, " ") {
				t.Errorf("answer %v, want %v", got, tc.answer)
			}
			if strings.Join(ns, " ") != strings.Join(tc.ns, " ") {
				t.Errorf("NS set %v, want %v", ns, tc.ns)
			}
			if d := proximitySeen(tc.source) - before; d != 1 {
				t.Errorf("coredns_coral_proximity_total{source=%q} rose by %v, want 1", tc.source, d)
			}
			p.wg.Wait()
		})
	}
}

// TestProximityBudget: a mapping that outlasts the first-query budget does
// not hold the answer past it; the answer is today's choice, and a later
// query from the same /24 gets the hinted node.
func TestProximityBudget(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := testCoral(t, nearWorld())
		slow := func(ctx context.Context, target netip.Addr, _ int) (traced, error) {
			time.Sleep(300 * time.Millisecond)
			return hopsTo(ctx, target, 0)
		}
		p := withProximity(c, slow, fakeHints{"198.51.100.0/24": {"127.0.7.1"}}.find, 50*time.Millisecond)
		start := time.Now()
		got, _ := answerAndNS(c, "10.0.9.9")
		if d := time.Since(start); d != 50*time.Millisecond {
			t.Fatalf("first query took %v, want the 50ms budget", d)
		}
		if got[0] != "127.0.5.1" {
			t.Fatalf("first answer %v: want today's choice while the mapping runs", got)
		}
		// The NS set chosen without the mapping must not lock the
		// resolver for ns_ttl: it comes back after retry_ttl.
		m, _ := query(c, "10.0.8.9", "www.example.com.http.l2.l1.l0.nyucd.test.", dns.TypeA, answers)
		for _, rr := range m.Ns {
			if rr.Header().Ttl != c.set.retryTTL {
				t.Fatalf("NS set chosen while the mapping ran: %v, want TTL retry_ttl %d", rr, c.set.retryTTL)
			}
		}
		time.Sleep(time.Second)
		m, _ = query(c, "10.0.8.9", "www.example.com.http.l2.l1.l0.nyucd.test.", dns.TypeA, answers)
		if m.Ns[0].Header().Ttl != c.set.nsTTL {
			t.Fatalf("NS set once mapped: %v, want TTL ns_ttl %d", m.Ns[0], c.set.nsTTL)
		}
		time.Sleep(time.Second)
		start = time.Now()
		got, ns := answerAndNS(c, "10.0.9.200")
		if time.Since(start) != 0 || got[0] != "127.0.7.1" || ns[0] != nsHost("127.0.7.1") {
			t.Fatalf("later query from the /24: %v, NS %v after %v; want 127.0.7.1 first at once", got, ns, time.Since(start))
		}
		p.wg.Wait()
	})
}

// TestProximityFloodOfNewPrefixes: queries from many new /24s at once start
// at most proximity_limit mappings, and none waits longer than the budget.
func TestProximityFloodOfNewPrefixes(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := testCoral(t, nearWorld())
		var mu sync.Mutex
		running, most, nTraced := 0, 0, 0
		release := make(chan struct{})
		blocking := func(ctx context.Context, target netip.Addr, _ int) (traced, error) {
			mu.Lock()
			running++
			nTraced++
			most = max(most, running)
			mu.Unlock()
			select {
			case <-release:
			case <-ctx.Done():
			}
			mu.Lock()
			running--
			mu.Unlock()
			return traced{}, ctx.Err()
		}
		const budget = 20 * time.Millisecond
		p := withProximity(c, blocking, fakeHints{}.find, budget)
		skipped := proximitySeen(nearSkipped)
		var wg sync.WaitGroup
		var slowest time.Duration
		for i := range 200 {
			wg.Go(func() {
				start := time.Now()
				answerAndNS(c, fmt.Sprintf("10.0.%d.%d", i%250, 1+i/250))
				mu.Lock()
				slowest = max(slowest, time.Since(start))
				mu.Unlock()
			})
		}
		wg.Wait()
		close(release)
		p.wg.Wait()
		if most > p.limit || nTraced != p.limit {
			t.Errorf("%d traces, at most %d at once; want %d, the limit", nTraced, most, p.limit)
		}
		if slowest > budget {
			t.Errorf("a query waited %v, over the %v budget", slowest, budget)
		}
		if d := proximitySeen(nearSkipped) - skipped; d != 200-4 {
			t.Errorf("%v answers counted as skipped, want %d", d, 200-4)
		}
	})
}

// TestProximitySkippedSetShortLived: a query that finds proximity_limit
// mappings in flight gets the choice without a target, and its NS set
// retry_ttl, not ns_ttl: its own mapping starts with the resolver's next
// query, which then locks the resolver onto the mapped set.
func TestProximitySkippedSetShortLived(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := testCoral(t, nearWorld())
		release := make(chan struct{})
		blocking := func(ctx context.Context, target netip.Addr, hops int) (traced, error) {
			select {
			case <-release:
			case <-ctx.Done():
			}
			return hopsTo(ctx, target, hops)
		}
		p := withProximity(c, blocking, fakeHints{}.find, 20*time.Millisecond)
		var wg sync.WaitGroup
		for i := range p.limit {
			wg.Go(func() { answerAndNS(c, fmt.Sprintf("10.0.%d.1", 100+i)) })
		}
		synctest.Wait() // every mapping slot taken
		nsTTLs := func(resolver string) []uint32 {
			m, _ := query(c, resolver, full2, dns.TypeA, answers)
			var ttls []uint32
			for _, rr := range m.Ns {
				ttls = append(ttls, rr.Header().Ttl)
			}
			return ttls
		}
		skipped := proximitySeen(nearSkipped)
		got := nsTTLs("10.0.9.9")
		if proximitySeen(nearSkipped)-skipped != 1 {
			t.Fatalf("the query past proximity_limit was not skipped")
		}
		if len(got) == 0 || slices.ContainsFunc(got, func(ttl uint32) bool { return ttl != c.set.retryTTL }) {
			t.Errorf("NS set of a skipped mapping: TTLs %v, want retry_ttl %d", got, c.set.retryTTL)
		}
		close(release)
		wg.Wait()
		p.wg.Wait()
		if got := nsTTLs("10.0.9.9"); len(got) == 0 || got[0] != c.set.nsTTL {
			t.Errorf("NS set once mapped: TTLs %v, want ns_ttl %d", got, c.set.nsTTL)
		}
		p.wg.Wait()
	})
}

// TestProximityFailedTraceCachedBriefly: a trace that fails is a failed
// mapping, retried only after the failure time.
func TestProximityFailedTraceCachedBriefly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := testCoral(t, nearWorld())
		calls := 0
		failing := func(ctx context.Context, target netip.Addr, _ int) (traced, error) {
			calls++
			return traced{}, errors.New("no route")
		}
		p := withProximity(c, failing, fakeHints{}.find, time.Second)
		answerAndNS(c, "10.0.9.9")
		answerAndNS(c, "10.0.9.9")
		p.wg.Wait()
		if calls != 1 {
			t.Fatalf("%d traces, want 1 (the failure is cached)", calls)
		}
		time.Sleep(p.failed + time.Second)
		answerAndNS(c, "10.0.9.9")
		p.wg.Wait()
		if calls != 2 {
			t.Fatalf("%d traces after the failure time, want 2", calls)
		}
	})
}

func TestHintKeys(t *testing.T) {
	a := netip.MustParseAddr
	got := hintKeys(a("198.51.100.77"), []netip.Addr{a("192.168.1.1"), a("203.0.113.1"), a("198.51.100.1")})
	want := []hintKeyWeight{
		{netip.MustParsePrefix("198.51.100.0/24"), 8, 0},
		{netip.MustParsePrefix("198.51.100.1/32"), 6, 1}, {netip.MustParsePrefix("198.51.100.0/24"), 5, 1},
		{netip.MustParsePrefix("203.0.113.1/32"), 4, 2}, {netip.MustParsePrefix("203.0.113.0/24"), 3, 2},
	}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("hintKeys = %v, want %v (private hop left out for a public target)", got, want)
	}
}
