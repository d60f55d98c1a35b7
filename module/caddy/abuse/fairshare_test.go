package abuse

import (
	"fmt"
	"net/http"
	"net/netip"
	"sync"
	"testing"
	"time"
)

func TestFairLevel(t *testing.T) {
	for _, tc := range []struct {
		used      []int64
		remaining int64
		want      int64
	}{
		{[]int64{0}, 1000, 1000},
		{[]int64{600}, 1000, 1000},            // alone: the whole budget
		{[]int64{0, 0}, 1000, 500},            // two idle: half each
		{[]int64{900, 10}, 1000, 100},         // the hot one spent 900: the small one may reach 100
		{[]int64{600, 0}, 1000, 400},          // hot at 600 is over its share of 400
		{[]int64{400, 300, 0}, 1000, 300},     // 400 + 300 + 300
		{[]int64{100, 100, 100}, 1000, 333},   // all below: equal thirds
		{[]int64{700, 400}, 1000, 0},          // used more than remains: nobody
		{[]int64{500, 500}, 1000, 500},        // exactly spent
		{[]int64{50, 950, 10, 20}, 2000, 350}, // 3·350 + 950
	} {
		used := append([]int64(nil), tc.used...)
		got := fairLevel(used, tc.remaining)
		// And the defining equation: Σ max(u, c) = remaining (to integer
		// rounding).
		var sum int64
		for _, u := range tc.used {
			sum += max(u, got)
		}
		if got > 0 && (sum > tc.remaining || sum+int64(len(tc.used)) < tc.remaining) {
			t.Errorf("fairLevel(%v, %d) = %d: Σ max(u, c) = %d, want %d", tc.used, tc.remaining, got, sum, tc.remaining)
		}
		if got != tc.want {
			t.Errorf("fairLevel(%v, %d) = %d, want %d", tc.used, tc.remaining, got, tc.want)
		}
	}
}

// fairTest is a fair budget behind Controls with a clock the test moves.
type fairTest struct {
	c   *Controls
	now time.Time
	got map[Decision]int
}

func newFairTest(limit int64) *fairTest {
	ft := &fairTest{now: t0, got: map[Decision]int{}}
	ft.c = &Controls{Budget: NewFairBudget(limit, time.Hour, 0, 0), Now: func() time.Time { return ft.now }, OnBudget: func(d Decision) { ft.got[d]++ }}
	return ft
}

// get admits one request for origin and, when admitted, charges size
// bytes; it returns whether the request was served.
func (ft *fairTest) get(origin string, size int64) (bool, *Refusal) {
	if r := ft.c.Admit(origin, netip.MustParseAddr("192.0.2.1"), false); r != nil {
		return false, r
	}
	ft.c.Charger(origin)(size)
	return true, nil
}

// TestFairSharesTwoOrigins: issue 41. One hot origin and one small one
// under a short budget: the hot one's clients are redirected once it has
// used its share, the small one keeps being served, and the per-node
// budget of before (NewBudget) serves the hot one until the whole budget
// is gone and then redirects both.
func TestFairSharesTwoOrigins(t *testing.T) {
	const limit, big, small = 100_000, 10_000, 1_000
	ft := newFairTest(limit)
	if ok, _ := ft.get("small.example", small); !ok {
		t.Fatal("the small site's first request was refused")
	}
	hotServed := 0
	for range 20 {
		if ok, r := ft.get("hot.example", big); ok {
			hotServed++
		} else if r.Status != http.StatusFound || r.Detail != "over-share" {
			t.Fatalf("hot origin refused with %d %q, want 302 over-share", r.Status, r.Detail)
		}
	}
	// Its share: 100 000 less the small site's claim to the same level,
	// c = 50 000: five objects.
	if hotServed != 5 {
		t.Errorf("hot origin served %d objects of %d bytes, want 5 (its half of %d)", hotServed, big, limit)
	}
	for i := range 40 {
		ft.now = ft.now.Add(time.Second)
		if ok, r := ft.get("small.example", small); !ok {
			t.Fatalf("small site's request %d refused (%v) while the hot one is redirected", i+1, r.Detail)
		}
	}
	if ft.got[WithinShare] != 46 || ft.got[OverShare] != 15 || ft.got[Exhausted] != 0 {
		t.Errorf("decisions %v, want 46 within_share, 15 over_share", ft.got)
	}
	level, accts := ft.c.Budget.Shares(ft.now)
	if len(accts) != 2 || accts[0].Account != "hot.example" || accts[0].Used != 50_000 || accts[1].Used != 41_000 || level != 50_000 {
		t.Errorf("shares: level %d, %+v", level, accts)
	}

	// The per-node budget: the hot origin takes it all.
	node := &Controls{Budget: NewBudget(limit, time.Hour), Now: func() time.Time { return t0 }}
	node.Admit("small.example", netip.Addr{}, false)
	node.Charger("small.example")(small)
	hotServed = 0
	for range 20 {
		if node.Admit("hot.example", netip.Addr{}, false) == nil {
			node.Charger("hot.example")(big)
			hotServed++
		}
	}
	if r := node.Admit("small.example", netip.Addr{}, false); hotServed != 10 || r == nil || r.Detail != "over-budget" {
		t.Errorf("per-node budget: hot served %d, small then %v; want 10 and over-budget", hotServed, r)
	}
}

// TestFairSharesExhausted: once the whole budget is used every origin is
// redirected, within its share or not, as over-budget.
func TestFairSharesExhausted(t *testing.T) {
	ft := newFairTest(10_000)
	ft.get("a.example", 4_000)
	ft.get("b.example", 4_000)
	ft.get("c.example", 2_500) // a new account: within (no usage yet), and then over the total
	for _, o := range []string{"a.example", "b.example", "c.example", "new.example"} {
		if ok, r := ft.get(o, 1); ok || r.Detail != "over-budget" {
			t.Errorf("%s after the budget is spent: served=%v %v, want over-budget", o, ok, r)
		}
	}
	// The next window starts afresh.
	ft.now = ft.now.Add(time.Hour)
	if ok, _ := ft.get("a.example", 1); !ok {
		t.Error("next window: refused")
	}
}

// TestFairSharesIdleClaimLapses: an origin not asked for in ActiveFor
// gives up its claim; the hot one may then use what it leaves, and when
// the small one comes back it is active again and served.
func TestFairSharesIdleClaimLapses(t *testing.T) {
	ft := newFairTest(100_000)
	ft.get("small.example", 1_000)
	for range 5 {
		ft.get("hot.example", 10_000)
	}
	if ok, _ := ft.get("hot.example", 10_000); ok {
		t.Fatal("hot origin served over its share while the small one is active")
	}
	ft.now = ft.now.Add(DefaultActiveFor + time.Second)
	for i := range 3 {
		if ok, _ := ft.get("hot.example", 10_000); !ok {
			t.Fatalf("hot origin's request %d refused after the small one went idle", i+1)
		}
	}
	// Back: active again, it claims the level (80 000 + c + … = 100 000,
	// c = 20 000), so it is served and the hot one is over its share.
	if ok, r := ft.get("small.example", 500); !ok {
		t.Errorf("small site back after idling: refused (%v)", r)
	}
	if ok, r := ft.get("hot.example", 10_000); ok || r.Detail != "over-share" {
		t.Errorf("hot origin once the small one is back: served=%v %v, want over-share", ok, r)
	}
}

// TestFairSharesByAddress: names of one origin address (a wildcard
// domain) are one account once the proxy has connected to them; before,
// each name is its own.
func TestFairSharesByAddress(t *testing.T) {
	ft := newFairTest(100_000)
	addr := netip.MustParseAddr("198.51.100.7")
	ft.get("small.example", 1_000)
	for i := range 20 {
		host := fmt.Sprintf("x%d.wild.example", i)
		ft.c.LearnAddress(host, addr)
		ft.get(host, 10_000)
	}
	_, accts := ft.c.Budget.Shares(ft.now)
	if len(accts) != 2 || accts[0].Account != "198.51.100.7" || accts[0].Used != 50_000 {
		t.Errorf("20 wildcard names on one address: accounts %+v, want 198.51.100.7 at its share of 50000 and small.example", accts)
	}
	// An origin named by its address counts there too, any form.
	if got := ft.c.Budget.addrs.account("::ffff:198.51.100.7"); got != "198.51.100.7" {
		t.Errorf("mapped address account %q", got)
	}
	if ok, _ := ft.get("198.51.100.7", 1); ok {
		t.Error("the address itself was served while its names are over their share")
	}
}

// TestFairSharesBounded: however many origin names clients invent, a
// window holds at most MaxAccounts accounts and the overflow one.
func TestFairSharesBounded(t *testing.T) {
	b := NewFairBudget(1<<40, time.Hour, 64, 0)
	for i := range 10_000 {
		o := fmt.Sprintf("h%d.evil.example", i)
		b.Admit(o, t0)
		b.Charge(o, func() time.Time { return t0 })(100)
	}
	_, accts := b.Shares(t0)
	if len(accts) != 65 || accts[0].Account != overflowAccount || accts[0].Used != (10_000-64)*100 {
		t.Errorf("%d accounts (first %+v), want 64 and the overflow holding the rest", len(accts), accts[0])
	}
	// The origin-address memory is a fixed table.
	m := newOriginAddrs()
	for i := range 100_000 {
		m.learn(fmt.Sprintf("h%d.example", i), netip.AddrFrom4([4]byte{198, 51, 100, byte(i)}))
	}
	n := 0
	for i := range m.slots {
		if m.slots[i].Load() != nil {
			n++
		}
	}
	if n > originAddrSlots {
		t.Errorf("%d addresses remembered", n)
	}
}

// TestFairSharesConcurrent: admissions, charges, window rollovers and
// level computations from many goroutines (run with -race) lose no byte.
func TestFairSharesConcurrent(t *testing.T) {
	b := NewFairBudget(1<<40, time.Second, 8, 0)
	var wg sync.WaitGroup
	for g := range 16 {
		wg.Go(func() {
			o := fmt.Sprintf("o%d.example", g)
			charge := b.Charge(o, func() time.Time { return t0 })
			for range 500 {
				b.Admit(o, t0)
				charge(3)
			}
			b.LearnAddress(o, netip.MustParseAddr("192.0.2.1"))
		})
	}
	wg.Wait()
	level, accts := b.Shares(t0)
	var sum int64
	for _, a := range accts {
		sum += a.Used
	}
	if sum != 16*500*3 || b.Used(t0) != sum || len(accts) > 9 || level <= 0 {
		t.Errorf("charged %d in %d accounts (total %d, level %d), want %d in at most 9", sum, len(accts), b.Used(t0), level, 16*500*3)
	}
}

// BenchmarkFairAdmit: the cost per request of a fair budget with many
// accounts (admission and one charge).
func BenchmarkFairAdmit(b *testing.B) {
	bud := NewFairBudget(1<<50, time.Hour, 0, 0)
	now := time.Now()
	clock := func() time.Time { return now }
	for i := range DefaultMaxAccounts {
		bud.Charge(fmt.Sprintf("o%d.example", i), clock)(1000)
	}
	b.ReportAllocs()
	b.ResetTimer()
	for i := 0; b.Loop(); i++ {
		o := "o7.example"
		if bud.Admit(o, now) == WithinShare {
			bud.Charge(o, clock)(1000)
		}
	}
}

// BenchmarkNodeAdmit: the same with one counter for the node, the budget
// of before, for comparison.
func BenchmarkNodeAdmit(b *testing.B) {
	bud := NewBudget(1<<50, time.Hour)
	now := time.Now()
	clock := func() time.Time { return now }
	b.ReportAllocs()
	for b.Loop() {
		if bud.Admit("o7.example", now) == WithinShare {
			bud.Charge("o7.example", clock)(1000)
		}
	}
}
