package coral

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// TestNSHostBeforeJoining: until a sweep has run with the node joined, the
// node may not have heard of a name server yet: its name is SERVFAIL (not
// cached for long; the resolver asks another server), not NXDOMAIN. Names
// it does know, its own included, are answered.
func TestNSHostBeforeJoining(t *testing.T) {
	w := testWorld()
	c := testCoral(t, w)
	joined := false
	c.tracker = newTracker(w, 3, time.Second, 15*time.Second, 100*time.Millisecond)
	c.tracker.joined = func() bool { return joined }
	c.tracker.sweep(context.Background())
	for _, tc := range []struct {
		name  string
		rcode int
	}{
		{"ns-127-0-0-1.nyucd.test.", dns.RcodeServerFailure},
		{"ns-127-0-0-2.nyucd.test.", dns.RcodeSuccess},
		{"ns-127-0-2-1.nyucd.test.", dns.RcodeSuccess},
	} {
		if m, _ := query(c, "10.2.0.1", tc.name, dns.TypeA, answers); m.Rcode != tc.rcode || m.Authoritative != (tc.rcode == dns.RcodeSuccess) {
			t.Errorf("before joining, %s: %s (AA %v), want %s", tc.name, dns.RcodeToString[m.Rcode], m.Authoritative, dns.RcodeToString[tc.rcode])
		}
	}
	joined = true
	c.tracker.sweep(context.Background())
	if m, _ := query(c, "10.2.0.1", "ns-127-0-0-1.nyucd.test.", dns.TypeA, answers); m.Rcode != dns.RcodeNameError {
		t.Errorf("after joining: %s, want NXDOMAIN", dns.RcodeToString[m.Rcode])
	}
}

// TestNSBookBounded: the book forgets what is older than its window and,
// past its size, the name servers heard from longest ago.
func TestNSBookBounded(t *testing.T) {
	b := newNSBook(3)
	b.warm.Store(true)
	now := time.Now()
	heard := map[netip.Addr]time.Time{}
	for i := range 6 {
		heard[netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})] = now.Add(-time.Duration(i) * time.Hour)
	}
	b.update(heard, now, 4*time.Hour+30*time.Minute) // .5 is too old
	if n := b.len(); n != 3 {
		t.Errorf("%d name servers remembered, want 3", n)
	}
	for i := range 6 {
		want := nsUnknown
		if i < 3 {
			want = nsKnown
		}
		if got := b.lookup(netip.AddrFrom4([4]byte{192, 0, 2, byte(i)}), now, 24*time.Hour); got != want {
			t.Errorf("192.0.2.%d heard %dh ago: %v, want %v", i, i, got, want)
		}
	}
	// Not warm yet: nobody has said the node joined.
	b = newNSBook(3)
	if got := b.lookup(netip.MustParseAddr("192.0.2.1"), now, time.Hour); got != nsNotYet {
		t.Errorf("a cold book: %v, want nsNotYet", got)
	}
	// An older sighting does not replace a newer one.
	a := netip.MustParseAddr("192.0.2.1")
	b.update(map[netip.Addr]time.Time{a: now}, now, time.Hour)
	b.update(map[netip.Addr]time.Time{a: now.Add(-2 * time.Hour)}, now, time.Hour)
	if got := b.lookup(a, now.Add(30*time.Minute), time.Hour); got != nsKnown {
		t.Errorf("after an older sighting: %v", got)
	}
}

// TestNSWindow: ns_ttl longer than nsRemember lengthens the window, since
// resolvers may hold the NS records that long.
func TestNSWindow(t *testing.T) {
	if got := nsWindow(3600); got != nsRemember {
		t.Errorf("ns_ttl 1h: window %v, want %v", got, nsRemember)
	}
	if got := nsWindow(86400); got != 24*time.Hour {
		t.Errorf("ns_ttl 1d: window %v, want 24h", got)
	}
}
