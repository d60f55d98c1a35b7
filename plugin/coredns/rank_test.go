package coral

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/miekg/dns"
)

// TestChooseRanksHintsByStrength: strong hints (the client's /24, the
// router nearest it) come first and make an NS set of their own; a node
// found only under a farther router's hint does not outrank a member this
// server measured nearer, where that measurement says something about the
// client (level 1 and above), and makes no NS set of its own.
func TestChooseRanksHintsByStrength(t *testing.T) {
	now := time.Now()
	both := coraldht.ServiceDNS | coraldht.ServiceHTTP
	at := func(addr string, rtt time.Duration) coraldht.NodeInfo { return measuredMember(addr, both, now, rtt) }
	// 127.0.5.1 at 5 ms, 127.0.6.1 at 40 ms, 127.0.7.1 at 3 ms, 127.0.8.1
	// never measured; the random rotation starts at the first.
	members := []coraldht.NodeInfo{at("127.0.5.1", 5*time.Millisecond), at("127.0.6.1", 40*time.Millisecond),
		at("127.0.7.1", 3*time.Millisecond), at("127.0.8.1", 0)}
	hint := func(addr string, hop, score int) nearNode {
		return nearNode{addr: netip.MustParseAddr(addr), score: score, hop: hop}
	}
	for _, tc := range []struct {
		name     string
		level    int
		count    int
		nearOnly bool
		ranked   []nearNode
		want     string
	}{
		{"a strong hint outranks members measured nearer", 1, 2, false,
			[]nearNode{hint("127.0.6.1", 1, 4*64+1)}, "127.0.6.1 127.0.5.1"},
		{"a weak hint does not outrank members measured nearer", 1, 3, false,
			[]nearNode{hint("127.0.6.1", 2, 2*64+1)}, "127.0.7.1 127.0.5.1 127.0.6.1"},
		{"a weak hint outranks members measured farther or not at all", 1, 3, false,
			[]nearNode{hint("127.0.5.1", 2, 2*64+1)}, "127.0.7.1 127.0.5.1 127.0.6.1"},
		{"strong before weak before the rest", 1, 4, false,
			[]nearNode{hint("127.0.6.1", 2, 2*64+2), hint("127.0.8.1", 0, 6*64+1)}, "127.0.8.1 127.0.7.1 127.0.5.1 127.0.6.1"},
		{"at level 0 a weak hint outranks unhinted members", 0, 2, false,
			[]nearNode{hint("127.0.6.1", 2, 2*64+1)}, "127.0.6.1 127.0.5.1"},
		{"NS set: strong hints make one of their own", 0, 3, true,
			[]nearNode{hint("127.0.8.1", 0, 6*64+1), hint("127.0.6.1", 1, 4*64+1)}, "127.0.8.1 127.0.6.1"},
		{"NS set: weak hints do not", 0, 3, true,
			[]nearNode{hint("127.0.8.1", 2, 2*64+2), hint("127.0.6.1", 2, 2*64+1)}, "127.0.8.1 127.0.6.1 127.0.5.1"},
		{"NS set: one strong and one weak hint do not", 1, 3, true,
			[]nearNode{hint("127.0.8.1", 0, 6*64+1), hint("127.0.6.1", 2, 2*64+1)}, "127.0.8.1 127.0.7.1 127.0.5.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker(&fakeNodes{}, 2, time.Second, 15*time.Second, time.Second)
			tr.intn = func(int) int { return 0 }
			got := tr.choose(members, pickOptions{level: tc.level, count: tc.count, nearOnly: tc.nearOnly, ranked: tc.ranked}, nil)
			var addrs []string
			for _, ni := range got {
				addrs = append(addrs, ni.Addr.Addr().String())
			}
			if s := strings.Join(addrs, " "); s != tc.want {
				t.Errorf("choose = %s, want %s", s, tc.want)
			}
		})
	}
}

// TestProximityNamesHintedNodesBeyondTheSweep: at level 0 a node that left
// a strong hint near the client is named, in the answer and in the NS set,
// once a sweep has found it live, though the sweep's nearest members do
// not include it; a hinted node that does not answer is not.
func TestProximityNamesHintedNodesBeyondTheSweep(t *testing.T) {
	for _, dead := range []bool{false, true} {
		w := nearWorld()
		far := member("127.0.9.9", coraldht.ServiceDNS|coraldht.ServiceHTTP, time.Now().Add(-time.Hour))
		w.contacts = []coraldht.NodeInfo{far}
		if dead {
			w.dead = map[netip.AddrPort]bool{far.Addr: true}
		}
		c := testCoral(t, w)
		p := withProximity(c, hopsTo, fakeHints{"10.0.9.0/24": {"127.0.9.9"}}.find, time.Second)
		first, _ := answerAndNS(c, "10.0.9.9")
		if strings.Join(first, " ") != "127.0.5.1 127.0.6.1" {
			t.Fatalf("before a sweep: answer %v, want today's choice", first)
		}
		c.tracker.sweep(context.Background())
		got, ns := answerAndNS(c, "10.0.9.9")
		want, wantNS := "127.0.9.9 127.0.5.1", nsHost("127.0.9.9")+" "+nsHost("127.0.0.2")
		if dead {
			want, wantNS = "127.0.5.1 127.0.6.1", nsHost("127.0.0.2")+" "+nsHost("127.0.5.1")
		}
		if strings.Join(got, " ") != want || strings.Join(ns, " ") != wantNS {
			t.Errorf("dead %v: answer %v NS %v, want %s and %s", dead, got, ns, want, wantNS)
		}
		p.wg.Wait()
	}
}

// TestFarServerNamesServersNearTheResolver is the case the wide-area lab
// (eval/wan's TestShort) found: a resolver in one metro, a member beside
// it (its strong hint), another member of its metro, and this server and
// one more in a metro 45 ms away. The router where the resolver's metro
// meets the rest is silent, so the other members left only weak hints,
// under the router all paths share, and they tie. Before, this server
// filled the NS set by RTT from itself: itself and its own neighbour
// beside the member near the resolver, so that the resolver spread its
// queries over two far servers, which placed it at level 1 and kept it
// from ever reaching its metro's level-2 zone. Now the triangle inequality
// over this server's RTTs (45 ms to the resolver, 3 ms to its neighbour)
// proves those two more than 20 ms from the resolver: the set and the
// answer name the two members of the resolver's metro. A probe that goes
// unanswered for the 60 ms classification waits (a loaded machine, a
// longer path) proves as much: the resolver is level 0, and the level-0
// referral and answer leave out the members within 40 ms of this server.
// Through ServeDNS, with the resolver classified by a probe, in virtual
// time.
func TestFarServerNamesServersNearTheResolver(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		now := time.Now()
		both := coraldht.ServiceDNS | coraldht.ServiceHTTP
		at := func(addr string, rtt time.Duration) coraldht.NodeInfo { return measuredMember(addr, both, now, rtt) }
		// 127.0.5.1 beside the resolver, 127.0.6.1 in its metro (43 ms
		// from this server), 127.0.7.1 beside this server.
		metro := []coraldht.NodeInfo{at("127.0.5.1", 45*time.Millisecond), at("127.0.6.1", 43*time.Millisecond), at("127.0.7.1", 3*time.Millisecond)}
		w := &fakeNodes{
			self:    coraldht.Contact{Addr: netip.MustParseAddrPort("127.0.0.2:4000"), Services: both},
			members: [][]coraldht.NodeInfo{metro, metro, {metro[2]}},
			dead:    map[netip.AddrPort]bool{},
		}
		for _, tc := range []struct {
			name       string
			mode       string
			probe      time.Duration // the resolver's RTT; 0: the probe goes unanswered
			zone       string        // the level zone the resolver is referred to
			answer, ns string
		}{
			{"proximity on", proximityOn, 45 * time.Millisecond, "l1.l0", "127.0.5.1 127.0.6.1", "127.0.5.1 127.0.6.1"},
			{"proximity on, probe unanswered", proximityOn, 0, "l0", "127.0.5.1 127.0.6.1", "127.0.5.1 127.0.6.1"},
			// subnet mode does not judge distance: its choice is the
			// rotation's, and the sets name this server's metro.
			{"proximity subnet", proximitySubnet, 45 * time.Millisecond, "l1.l0", "127.0.0.2 127.0.5.1", "127.0.0.2 127.0.5.1 127.0.6.1"},
		} {
			const resolver = "10.7.9.9"
			c := testCoral(t, w)
			c.set.nameservers = 3
			c.cfg.prox.mode = tc.mode
			probe := &fakeProbe{rtt: map[netip.Addr]time.Duration{}}
			if tc.probe > 0 {
				probe.rtt[netip.MustParseAddr(resolver)] = tc.probe
			}
			c.classifier.probe = probe.probe
			c.classifier.wait = 60 * time.Millisecond
			c.classifier.fresh = 10 * time.Minute
			c.classifier.failedFor = time.Minute
			var p *proximity
			if tc.mode == proximityOn {
				// The resolver's /24 names the member beside it; the
				// router farther out (the shared one) names everyone.
				p = withProximity(c, hopsTo, fakeHints{
					"10.7.9.0/24":    {"127.0.5.1"},
					"203.0.113.0/24": {"127.0.0.2", "127.0.6.1", "127.0.7.1"},
				}.find, time.Second)
			}
			var gotNS []string
			m, _ := query(c, resolver, tc.zone+".nyucd.test.", dns.TypeA, answers)
			for _, rr := range m.Ns {
				if ns, ok := rr.(*dns.NS); ok {
					gotNS = append(gotNS, strings.TrimSuffix(ns.Ns, ".nyucd.test."))
				}
			}
			var want []string
			for _, a := range strings.Fields(tc.ns) {
				want = append(want, nsLabel(netip.MustParseAddr(a)))
			}
			if m.Authoritative || strings.Join(gotNS, " ") != strings.Join(want, " ") {
				t.Errorf("%s: referral to %s (AA %v): NS %v, want %v", tc.name, tc.zone, m.Authoritative, gotNS, want)
			}
			_, got := query(c, resolver, "www.example.com.http."+tc.zone+".nyucd.test.", dns.TypeA, answers)
			if strings.Join(got, " ") != tc.answer {
				t.Errorf("%s: answer from the %s zone %v, want %s", tc.name, tc.zone, got, tc.answer)
			}
			if p != nil {
				p.wg.Wait()
			}
		}
	})
}

// TestChooseProvenFarLast: with this server 45 ms from the target, members
// the triangle inequality puts more than 20 ms from it come after all
// others, least bound first; an NS set names them only to make up two
// servers; a member never measured is not judged.
func TestChooseProvenFarLast(t *testing.T) {
	now := time.Now()
	both := coraldht.ServiceDNS | coraldht.ServiceHTTP
	at := func(addr string, rtt time.Duration) coraldht.NodeInfo { return measuredMember(addr, both, now, rtt) }
	// Bounds from 45 ms: 127.0.5.1 42 ms, 127.0.6.1 35 ms, 127.0.7.1
	// 5 ms, 127.0.8.1 not measured; the rotation starts at the first.
	members := []coraldht.NodeInfo{at("127.0.5.1", 3*time.Millisecond), at("127.0.6.1", 10*time.Millisecond),
		at("127.0.7.1", 40*time.Millisecond), at("127.0.8.1", 0)}
	for _, tc := range []struct {
		name     string
		count    int
		nearOnly bool
		rtt      time.Duration
		want     string
	}{
		{"answer: far ones last, least bound first", 4, false, 45 * time.Millisecond, "127.0.7.1 127.0.8.1 127.0.6.1 127.0.5.1"},
		{"NS set: far ones left out", 4, true, 45 * time.Millisecond, "127.0.7.1 127.0.8.1"},
		{"RTT to the target not measured: the rotation", 4, true, 0, "127.0.5.1 127.0.6.1 127.0.7.1 127.0.8.1"},
		{"server beside the target: its far member left out", 4, true, 5 * time.Millisecond, "127.0.5.1 127.0.6.1 127.0.8.1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			tr := newTracker(&fakeNodes{}, 2, time.Second, 15*time.Second, time.Second)
			tr.intn = func(int) int { return 0 }
			o := pickOptions{count: tc.count, nearOnly: tc.nearOnly, rtt: tc.rtt, nearWithin: 20 * time.Millisecond}
			var addrs []string
			for _, ni := range tr.choose(members, o, nil) {
				addrs = append(addrs, ni.Addr.Addr().String())
			}
			if s := strings.Join(addrs, " "); s != tc.want {
				t.Errorf("choose = %s, want %s", s, tc.want)
			}
		})
	}
	// With only far members, an NS set still gets two servers.
	tr := newTracker(&fakeNodes{}, 2, time.Second, 15*time.Second, time.Second)
	tr.intn = func(int) int { return 0 }
	got := tr.choose(members[:2], pickOptions{count: 3, nearOnly: true, rtt: 45 * time.Millisecond, nearWithin: 20 * time.Millisecond}, nil)
	if len(got) != 2 || got[0].Addr.Addr().String() != "127.0.6.1" {
		t.Errorf("only far members: NS set %v, want 127.0.6.1 127.0.5.1", got)
	}
}

// measuredMember is member with the RTT this server measured to it.
func measuredMember(addr string, s coraldht.Services, heard time.Time, rtt time.Duration) coraldht.NodeInfo {
	ni := member(addr, s, heard)
	ni.RTT = rtt
	return ni
}
