package coral

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

// TestChooseRanksHintsByStrength: strong hints (the client's /24, the
// router nearest it) come first and make an NS set of their own; a node
// found only under a farther router's hint does not outrank a member this
// server measured nearer, where that measurement says something about the
// client (level 1 and above), and makes no NS set of its own.
func TestChooseRanksHintsByStrength(t *testing.T) {
	now := time.Now()
	both := coraldht.ServiceDNS | coraldht.ServiceHTTP
	at := func(addr string, rtt time.Duration) coraldht.NodeInfo {
		ni := member(addr, both, now)
		ni.RTT = rtt
		return ni
	}
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
