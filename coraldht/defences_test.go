package coraldht

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
	"github.com/coralcdn/coral/coraldht/memnet"
)

// Unit tests of the defences of issue 35, one mechanism each; the attacks
// themselves are in member_test.go.

// TestCookies: a cookie is valid from the address it was granted to, in
// its epoch and the next, and from no other address or port.
func TestCookies(t *testing.T) {
	j := newCookieJar()
	a := netip.MustParseAddrPort("192.0.2.1:4000")
	now := time.Unix(1_750_000_000, 0)
	c := j.grant(a, now)
	for _, tc := range []struct {
		name string
		echo uint64
		from netip.AddrPort
		at   time.Time
		ok   bool
	}{
		{"same address", c, a, now, true},
		{"next epoch", c, a, now.Add(cookieLifetime), true},
		{"two epochs on", c, a, now.Add(2 * cookieLifetime), false},
		{"other port", c, netip.MustParseAddrPort("192.0.2.1:4001"), now, false},
		{"other address", c, netip.MustParseAddrPort("192.0.2.2:4000"), now, false},
		{"no cookie", 0, a, now, false},
		{"off by one", c ^ 1, a, now, false},
	} {
		if got := j.valid(tc.echo, tc.from, tc.at); got != tc.ok {
			t.Errorf("%s: valid = %v, want %v", tc.name, got, tc.ok)
		}
	}
	if newCookieJar().grant(a, now) == c {
		t.Error("two nodes grant the same cookie: the secret is not per node")
	}
}

// TestFirstContact: the first request to a node that needs a larger
// reply is padded, so it is answered in full at once; once the padding
// budget for the node's /24 is spent, the reply comes truncated and the
// request goes again with the cookie it brought; from then on, replies
// come whole.
func TestFirstContact(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTestNet(t, 3, memnet.Config{Latency: pairLatency(time.Millisecond, 5*time.Millisecond)}, nil)
		b, c := tn.nodes[1], tn.nodes[2]
		fresh := tn.add(3, nil)
		ctx := context.Background()
		// fresh knows b's and c's contacts as others hand them out: it
		// knows they read extensions, but holds no cookie of theirs.
		known := func(n *Node) Contact {
			k := n.Contact()
			k.Services |= wire.CapExtensions
			return k
		}
		find := func(to *Node, target string) {
			t.Helper()
			if r, err := fresh.call(ctx, known(to), &wire.Message{Type: wire.FindNode, Target: KeyFor(target)}); err != nil || len(r.Nodes) == 0 {
				t.Fatalf("find_node: %+v, %v", r, err)
			}
		}
		find(b, "x")
		if s := b.Stats(); s.Truncated != 0 || fresh.Stats().Resent != 0 {
			t.Fatalf("padded first contact: %d truncated, %d resent; want none", s.Truncated, fresh.Stats().Resent)
		}
		for fresh.pads.allow(c.Addr(), time.Now()) {
		}
		find(c, "x")
		if s := c.Stats(); s.Truncated != 1 || fresh.Stats().Resent != 1 {
			t.Fatalf("first contact beyond the padding budget: %d truncated, %d resent; want 1 and 1", s.Truncated, fresh.Stats().Resent)
		}
		for range 3 {
			find(b, "y")
			find(c, "y")
		}
		if b.Stats().Truncated+c.Stats().Truncated != 1 || fresh.Stats().Resent != 1 {
			t.Fatal("later contacts were truncated")
		}
	})
}

// TestLegacyPeers: a request from a node released before address
// cookies (it reads no extensions) whose reply would be larger than
// itself gets none, unless LegacyPeers is set; a store from it is not
// executed either.
func TestLegacyPeers(t *testing.T) {
	for _, legacy := range []bool{false, true} {
		t.Run(fmt.Sprint("LegacyPeers=", legacy), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				e := newAuthEnvWith(t, func(i int, c *Config) { c.LegacyPeers = legacy })
				e.self.Services, e.echo = 0, 0 // an old node: no extensions, no cookie
				find := e.message(wire.FindNode, false)
				find.Ext, find.Echo, find.Target = false, 0, KeyFor("x")
				store := e.message(wire.Store, false)
				store.Ext, store.Echo, store.Key, store.TTL, store.Value = false, 0, KeyFor("k"), 60000, []byte("v")
				replies := 0
				for _, p := range e.send(e.seal(find, testKey), e.seal(store, testKey)) {
					body, _ := testKey.open(p)
					if m, err := wire.Decode(body); err == nil && m.Response {
						replies++
						if m.Ext {
							t.Error("a node that reads no extensions got a reply with extensions")
						}
					}
				}
				stored := len(e.target.store.get(levelKey{key: KeyFor("k")}, time.Now())) == 1
				if want := map[bool]int{false: 0, true: 2}[legacy]; replies != want || stored != legacy {
					t.Fatalf("%d replies (want %d), stored %v", replies, want, stored)
				}
				if d := e.target.Stats().Drops.Unproven; legacy != (d == 0) {
					t.Fatalf("%d dropped as unproven", d)
				}
			})
		})
	}
}

// TestRoutingTableCaps: a table takes at most half the per-IP cap from one
// address into a bucket and the cap into the table, the same for a /24
// (but for the node's own); a replacement that would break a cap is not
// promoted.
func TestRoutingTableCaps(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	self := randID(rng)
	limits := tableLimits{perIP: 4, perNet: 6, own: netip.MustParsePrefix("10.0.0.0/24"), rankKey: &[32]byte{1}}
	on := func(ip string, port uint16, prefix int) Contact {
		c := contactInBucket(self, prefix, rng, 0)
		c.Addr = netip.AddrPortFrom(netip.MustParseAddr(ip), port)
		return c
	}
	count := func(rt *routingTable, match func(netip.Addr) bool) int {
		n := 0
		for _, e := range rt.all() {
			if match(e.Addr.Addr()) {
				n++
			}
		}
		return n
	}
	t.Run("one IP", func(t *testing.T) {
		rt := newRoutingTable(self, 8, 2, 15*time.Minute, limits, t0)
		refusals := 0
		for prefix := range 4 {
			for i := range 4 {
				if _, refused := rt.heardAs(on("192.0.2.9", uint16(4000+10*prefix+i), prefix), t0, true); refused {
					refusals++
				}
			}
		}
		if n := count(rt, func(a netip.Addr) bool { return a == netip.MustParseAddr("192.0.2.9") }); n != 4 || refusals != 12 {
			t.Fatalf("%d entries from one IP, %d refused; want 4 (2 per bucket, 4 per table) and 12", n, refusals)
		}
	})
	t.Run("one /24", func(t *testing.T) {
		rt := newRoutingTable(self, 8, 2, 15*time.Minute, limits, t0)
		for i := range 40 {
			rt.heardAs(on(fmt.Sprintf("198.51.100.%d", i+1), 4000, i%5), t0, true)
		}
		if n := count(rt, func(a netip.Addr) bool { return netip.MustParsePrefix("198.51.100.0/24").Contains(a) }); n != 6 {
			t.Fatalf("%d entries from one /24, cap 6", n)
		}
	})
	t.Run("own /24 exempt", func(t *testing.T) {
		rt := newRoutingTable(self, 8, 2, 15*time.Minute, limits, t0)
		for i := range 40 {
			rt.heardAs(on(fmt.Sprintf("10.0.0.%d", i+1), 4000, i%5), t0, true)
		}
		if n := count(rt, func(netip.Addr) bool { return true }); n < 20 {
			t.Fatalf("%d site-mates in the table; the own /24 has no cap", n)
		}
	})
	t.Run("replacements within the caps", func(t *testing.T) {
		rt := newRoutingTable(self, 2, 1, 15*time.Minute, limits, t0)
		a, b := on("192.0.2.1", 1, 0), on("198.51.100.2", 1, 0)
		rt.heard(a, t0)
		rt.heard(b, t0)
		c, d := on("198.51.100.2", 2, 0), on("203.0.113.3", 1, 0)
		rt.heardAs(c, t0.Add(time.Second), false) // b's IP: waits
		rt.heardAs(d, t0, false)                  // an older one of another IP
		rt.failed(a.ID)
		// c is the freshest, but b's IP is then at its bucket cap (1).
		got := rt.closest(self, 2, ID{})
		if len(got) != 2 || (got[0].ID != d.ID && got[1].ID != d.ID) {
			t.Fatalf("after a failed: %v; want d promoted, not c", got)
		}
	})
	t.Run("secret rank", func(t *testing.T) {
		other := limits
		other.rankKey = &[32]byte{2}
		r1 := newRoutingTable(self, 8, 2, time.Minute, limits, t0)
		r2 := newRoutingTable(self, 8, 2, time.Minute, other, t0)
		public := newRoutingTable(self, 8, 2, time.Minute, tableLimits{}, t0)
		same, samePublic := 0, 0
		for i := range 64 {
			x, y := KeyFor(fmt.Sprint(i)), KeyFor(fmt.Sprint(i+1000))
			if (r1.rank(x) < r1.rank(y)) == (r2.rank(x) < r2.rank(y)) {
				same++
			}
			if (r1.rank(x) < r1.rank(y)) == (public.rank(x) < public.rank(y)) {
				samePublic++
			}
		}
		if same > 48 || samePublic > 48 {
			t.Fatalf("two secrets order %d of 64 pairs alike, secret and public %d: the secret does not decide", same, samePublic)
		}
	})
}

// TestSuspectsBounded: the suspects table keeps at most maxSuspects
// prefixes, a persistent one survives a crowd of one-off ones, and the
// totals count everything.
func TestSuspectsBounded(t *testing.T) {
	l := newAbuseLog()
	heavy := netip.MustParseAddrPort("203.0.113.7:4000")
	for i := range 50 {
		l.note(AbuseClaimMismatch, heavy, netip.AddrPortFrom(heavy.Addr(), uint16(5000+i)), 0, t0)
	}
	for i := range 1000 {
		l.note(AbuseVerifyFailed, netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i >> 8), byte(i), 1}), 4000), netip.AddrPort{}, 0, t0)
	}
	top := l.top(-1)
	if len(top) != maxSuspects {
		t.Fatalf("%d suspects, bound %d", len(top), maxSuspects)
	}
	if top[0].Prefix != netip.MustParsePrefix("203.0.113.0/24") || top[0].Events.Count(AbuseClaimMismatch) != 50 ||
		len(top[0].Claimed) != suspectAddrs || top[0].Sources[0] != heavy {
		t.Fatalf("first suspect %+v", top[0])
	}
	if c := l.counts(); c.Count(AbuseClaimMismatch) != 50 || c.Count(AbuseVerifyFailed) != 1000 || c.Total() != 1050 {
		t.Fatalf("totals %v", c)
	}
	for _, k := range AbuseKinds() {
		if k.String() == "" {
			t.Errorf("kind %d has no name", k)
		}
	}
}

// TestVerifierBounds: verification pings in flight are bounded in all and
// per prefix, and an address is not pinged again within its holdoff.
func TestVerifierBounds(t *testing.T) {
	v := newVerifier()
	addr := func(i int) netip.AddrPort {
		return netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, byte(i / 4), byte(i % 4), 1}), 4000)
	}
	if !v.start(addr(0), t0) || v.start(addr(0), t0) {
		t.Fatal("one ping per address in flight")
	}
	same := netip.AddrPortFrom(addr(0).Addr(), 4001)
	third := netip.AddrPortFrom(addr(0).Addr(), 4002)
	if !v.start(same, t0) || v.start(third, t0) {
		t.Fatalf("per-prefix bound %d", maxVerifyingPerPrefix)
	}
	started := 2
	for i := 4; i < 400; i += 4 {
		if v.start(addr(i), t0) {
			started++
		}
	}
	if started != maxVerifying {
		t.Fatalf("%d in flight, bound %d", started, maxVerifying)
	}
	v.done(addr(0), false, t0)
	if v.start(addr(0), t0.Add(verifyFailedHoldoff-time.Second)) {
		t.Fatal("an address that failed was pinged again within its holdoff")
	}
	if !v.start(addr(0), t0.Add(verifyFailedHoldoff)) {
		t.Fatal("an address that failed was not pinged again after its holdoff")
	}
}

// TestVerifierForgetsAnsweredHoldoff: an address that answered its
// verification is not pinged again within the holdoff, unless it has
// since stopped answering this node's calls (a node restarted there must
// be verifiable at once); the longer holdoff of a failed verification
// stays.
func TestVerifierForgetsAnsweredHoldoff(t *testing.T) {
	v := newVerifier()
	now := time.Unix(1_000_000, 0)
	answered := netip.MustParseAddrPort("192.0.2.1:4000")
	failed := netip.MustParseAddrPort("192.0.2.2:4000")
	for _, a := range []netip.AddrPort{answered, failed} {
		if !v.start(a, now) {
			t.Fatalf("%v: first verification refused", a)
		}
		v.done(a, a == answered, now)
	}
	later := now.Add(10 * time.Second)
	if v.start(answered, later) || v.start(failed, later) {
		t.Fatal("a verification within the holdoff")
	}
	v.forgetAnswered(answered, later)
	v.forgetAnswered(failed, later)
	if !v.start(answered, later) {
		t.Error("the answered address's holdoff outlived its failure to answer")
	}
	if v.start(failed, later) {
		t.Error("the failed verification's holdoff was forgotten")
	}
}
