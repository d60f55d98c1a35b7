package coral

import (
	"context"
	"encoding/hex"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

// fakeClock is the limiter's virtual time.
type fakeClock struct{ t time.Time }

func (c *fakeClock) now() time.Time          { return c.t }
func (c *fakeClock) advance(d time.Duration) { c.t = c.t.Add(d) }

func testLimiter(rate float64, slip int, table int) (*rateLimiter, *fakeClock) {
	clock := &fakeClock{t: time.Unix(1_700_000_000, 0)}
	cfg := rrlConfig{rates: [rrlCategories]float64{rate, rate, rate}, slip: slip, window: 15 * time.Second, table: table}
	return newRateLimiter(cfg, clock.now), clock
}

// tally sends n responses to client, spaced by every, and counts what
// became of them.
func tally(r *rateLimiter, clock *fakeClock, client string, cat rrlCategory, n int, every time.Duration) (sent, dropped, slipped int) {
	a := netip.MustParseAddr(client)
	for range n {
		switch r.decide(a, cat) {
		case rrlSend:
			sent++
		case rrlDrop:
			dropped++
		case rrlSlip:
			slipped++
		}
		clock.advance(every)
	}
	return sent, dropped, slipped
}

// TestRRLRate: a network gets a second's worth of responses at once, then
// the rate; a network that keeps within the rate is never limited; one
// that floods stays limited while it floods and for window seconds after.
func TestRRLRate(t *testing.T) {
	r, clock := testLimiter(10, 0, 1024)
	if sent, dropped, _ := tally(r, clock, "192.0.2.1", rrlResponses, 25, 0); sent != 10 || dropped != 15 {
		t.Errorf("burst of 25: sent %d, dropped %d; want 10 and 15", sent, dropped)
	}

	r, clock = testLimiter(10, 0, 1024)
	if sent, dropped, _ := tally(r, clock, "192.0.2.1", rrlResponses, 600, 100*time.Millisecond); sent != 600 || dropped != 0 {
		t.Errorf("10/s for a minute at rate 10: sent %d, dropped %d; want all sent", sent, dropped)
	}

	r, clock = testLimiter(10, 0, 1024)
	// 100/s for 20 s: the burst and a few more, then nothing while the
	// flood goes on (its average stays over the rate).
	sent, _, _ := tally(r, clock, "192.0.2.1", rrlResponses, 2000, 10*time.Millisecond)
	if sent < 10 || sent > 12 {
		t.Errorf("100/s for 20 s at rate 10: sent %d, want the first 10 or so", sent)
	}
	clock.advance(14 * time.Second)
	if got := r.decide(netip.MustParseAddr("192.0.2.1"), rrlResponses); got != rrlDrop {
		t.Errorf("14 s after the flood: %v, want still dropped (window 15 s)", got)
	}
	clock.advance(2 * time.Second)
	if got := r.decide(netip.MustParseAddr("192.0.2.1"), rrlResponses); got != rrlSend {
		t.Errorf("16 s after the flood: %v, want sent", got)
	}
}

// TestRRLSlip: every slip-th limited response slips (is sent truncated);
// slip 0 drops them all, slip 1 slips them all.
func TestRRLSlip(t *testing.T) {
	for _, tc := range []struct{ slip, wantDropped, wantSlipped int }{
		{0, 100, 0}, {1, 0, 100}, {2, 50, 50}, {3, 67, 33},
	} {
		t.Run(fmt.Sprint("slip ", tc.slip), func(t *testing.T) {
			r, clock := testLimiter(5, tc.slip, 1024)
			sent, dropped, slipped := tally(r, clock, "192.0.2.1", rrlResponses, 105, 0)
			if sent != 5 || dropped != tc.wantDropped || slipped != tc.wantSlipped {
				t.Errorf("sent %d, dropped %d, slipped %d; want 5, %d, %d", sent, dropped, slipped, tc.wantDropped, tc.wantSlipped)
			}
		})
	}
}

// TestRRLNetworks: responses count per IPv4 /24 and IPv6 /56, and per
// category.
func TestRRLNetworks(t *testing.T) {
	for _, tc := range []struct {
		name, first, second string
		same                bool
	}{
		{"same /24", "192.0.2.1", "192.0.2.254", true},
		{"next /24", "192.0.2.1", "192.0.3.1", false},
		{"same /56", "2001:db8:0:ff::1", "2001:db8:0:ff:ffff::2", true},
		{"same /56, other /64", "2001:db8:0:1::1", "2001:db8:0:fe::1", true},
		{"next /56", "2001:db8:0:ff::1", "2001:db8:0:100::1", false},
		{"v4 and v4-in-v6 prefix", "10.0.0.1", "::ffff:0:0", false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			r, clock := testLimiter(10, 0, 1024)
			tally(r, clock, tc.first, rrlResponses, 10, 0)
			got := r.decide(netip.MustParseAddr(tc.second), rrlResponses)
			if want := map[bool]rrlAction{true: rrlDrop, false: rrlSend}[tc.same]; got != want {
				t.Errorf("after 10 responses to %s, %s: %v, want %v", tc.first, tc.second, got, want)
			}
		})
	}
	r, clock := testLimiter(10, 0, 1024)
	tally(r, clock, "192.0.2.1", rrlNXDomains, 50, 0)
	if got := r.decide(netip.MustParseAddr("192.0.2.1"), rrlResponses); got != rrlSend {
		t.Errorf("an NXDOMAIN flood limited the network's answers: %v", got)
	}
}

// TestRRLBounded: the table never grows. Deciding for a flood of distinct
// sources allocates nothing, and a network being flooded stays limited
// while a flood of other sources, ten times as fast, passes through the
// table.
func TestRRLBounded(t *testing.T) {
	r, clock := testLimiter(10, 0, defaultRRLTable)
	victim := netip.MustParseAddr("192.0.2.1")
	i := uint32(0)
	next := func() netip.Addr {
		i++
		return netip.AddrFrom4([4]byte{byte(i >> 16), byte(i >> 8), byte(i), 1})
	}
	if allocs := testing.AllocsPerRun(10_000, func() { r.decide(next(), rrlResponses) }); allocs != 0 {
		t.Errorf("%v allocations per response from a new source, want 0", allocs)
	}
	sets := len(r.buckets.sets)
	victimSent := 0
	for range 10_000 {
		if r.decide(victim, rrlResponses) == rrlSend {
			victimSent++
		}
		for range 10 {
			r.decide(next(), rrlResponses)
		}
		clock.advance(10 * time.Millisecond) // the victim's flood: 100/s for 100 s
	}
	// The burst, then the flood keeps the victim's bucket in debt; an
	// eviction would give it a fresh burst of 10.
	if victimSent > 20 {
		t.Errorf("the flooded network got %d responses over 100 s among 100,000 other sources, want about 10", victimSent)
	}
	if len(r.buckets.sets) != sets || cap(r.buckets.sets) != sets {
		t.Errorf("table grew from %d to %d sets", sets, len(r.buckets.sets))
	}
	used := 0
	for s := range r.buckets.sets {
		for _, b := range r.buckets.sets[s].slots {
			if b.last != 0 {
				used++
			}
		}
	}
	if used > defaultRRLTable {
		t.Errorf("%d buckets in use, table of %d", used, defaultRRLTable)
	}
}

// TestRRLServeDNS: through the handler, over UDP the rate holds with
// slips as configured and metrics counting; TCP and requests with a valid
// server cookie are never limited.
func TestRRLServeDNS(t *testing.T) {
	c := testCoral(t, testWorld())
	var clock *fakeClock
	c.rrl, clock = testLimiter(2, 2, 1024)
	_ = clock
	server := "" // metrics.WithServer of a bare context
	dropped0 := counterValue(rrlDropped.WithLabelValues(server, "nyucd.test.", "", "responses"))
	slipped0 := counterValue(rrlSlipped.WithLabelValues(server, "nyucd.test.", "", "responses"))

	ask := func(tcp bool, cookie string) *dns.Msg {
		m := new(dns.Msg)
		m.SetQuestion(full2, dns.TypeA)
		m.SetEdns0(1232, false)
		if cookie != "" {
			m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: cookie})
		}
		rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: "10.2.0.1", TCP: tcp})
		if _, err := c.ServeDNS(context.Background(), rec, m); err != nil {
			t.Fatal(err)
		}
		return rec.Msg
	}
	var full, none, trunc int
	var slip *dns.Msg
	for range 10 {
		switch m := ask(false, ""); {
		case m == nil:
			none++
		case m.Truncated:
			trunc++
			slip = m
		case len(m.Answer) > 0:
			full++
		}
	}
	if full != 2 || trunc != 4 || none != 4 {
		t.Errorf("10 UDP queries at rate 2, slip 2: %d answered, %d truncated, %d dropped; want 2, 4, 4", full, trunc, none)
	}
	if slip != nil && (len(slip.Answer)+len(slip.Ns) != 0 || len(slip.Question) != 1 || slip.Question[0].Name != full2 || slip.IsEdns0() == nil) {
		t.Errorf("a slip is the question, TC and the OPT, nothing else: %v", slip)
	}
	if d := counterValue(rrlDropped.WithLabelValues(server, "nyucd.test.", "", "responses")) - dropped0; d != 4 {
		t.Errorf("rrl_dropped_total rose by %v, want 4", d)
	}
	if d := counterValue(rrlSlipped.WithLabelValues(server, "nyucd.test.", "", "responses")) - slipped0; d != 4 {
		t.Errorf("rrl_slipped_total rose by %v, want 4", d)
	}
	for i := range 10 {
		if m := ask(true, ""); m == nil || m.Truncated || len(m.Answer) == 0 {
			t.Fatalf("TCP query %d while the network is limited: %v", i, m)
		}
	}
	// A slip carries a server cookie; with it the client is answered in
	// full over UDP.
	var slipped *dns.Msg
	for range 4 { // at most slip responses to the next slip
		if m := ask(false, "0102030405060708"); m != nil && m.Truncated {
			slipped = m
			break
		}
	}
	if slipped == nil {
		t.Fatal("no truncated response to a cookie query while the network is limited")
	}
	cookie := hex.EncodeToString(cookieFromReply(t, slipped))
	if len(cookie) <= 16 {
		t.Fatalf("the slip has no server cookie: %v", slipped)
	}
	for i := range 10 {
		if m := ask(false, cookie); m == nil || m.Truncated || len(m.Answer) == 0 {
			t.Fatalf("UDP query %d with a valid server cookie: %v", i, m)
		}
	}
}
