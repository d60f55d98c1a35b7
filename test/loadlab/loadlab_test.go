//go:build linux

package loadlab

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/loadlab"
)

// binaries skips (or, under CI=true, fails) without bin/caddy and
// bin/coredns.
func binaries(t *testing.T) {
	t.Helper()
	for _, name := range []string{"caddy", "coredns"} {
		if _, err := labconf.Binary(name); err != nil {
			if os.Getenv("CI") == "true" {
				t.Fatal(err)
			}
			t.Skip(err)
		}
	}
}

// TestLoadAwareCrowd: issue 41's load-aware redirection with the real
// servers. Five proxies, each with a bandwidth budget of 4 MiB: two in
// the DNS server's site (e1), two in another site of its region (e2), one
// in the other region (w1). A crowd of clients classified at level 2
// resolves the origin's Coralized name and fetches from what it is
// given. As the site's proxies spend their budgets past load_threshold
// (60 % here) the DNS server stops naming them, within the answer TTL and
// the load's staleness, and names the region's; then the other region's;
// and once every proxy is loaded it still answers, and no query or
// request fails.
func TestLoadAwareCrowd(t *testing.T) {
	binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 6*time.Minute)
	defer cancel()
	spec := loadlab.Spec{Net: "127.0.156", Dir: t.TempDir(), Budget: "4MiB", LoadThreshold: "60", AnswerTTL: 2,
		Sites: []loadlab.Site{{Name: "e1", Region: "east", Proxies: 2}, {Name: "e2", Region: "east", Proxies: 2}, {Name: "w1", Region: "west", Proxies: 1}},
		Logf:  t.Logf}
	lab, err := loadlab.Start(ctx, spec)
	defer lab.Stop()
	if err != nil {
		t.Fatal(err)
	}
	origin, err := loadlab.StartOrigin(netip.AddrPortFrom(spec.IP(0, 2), loadlab.HTTPPort), 16<<10, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer origin.Close()
	site := map[netip.Addr]string{}
	for _, p := range lab.Proxies {
		site[p.Addr] = p.Site
	}

	// The crowd: 2 clients, each resolving (honouring the TTL) and
	// fetching one of 16 objects of 16 KiB every 50 ms, until stopped:
	// about 640 KB/s, so the site's proxies reach 80 % of their budgets
	// in about 10 s, and the load's staleness (a few seconds) is well
	// within the fifth of the budgets left.
	var mu sync.Mutex
	var redirected, served, failures int
	var lastErr error
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for i := range 2 {
		wg.Go(func() {
			from := spec.IP(1, 1+i)
			c := loadlab.Client(from)
			var proxies []netip.Addr
			var expires time.Time
			for {
				select {
				case <-stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				if time.Now().After(expires) {
					got, ttl, err := lab.Resolve(ctx, from, origin.Host())
					if err != nil {
						mu.Lock()
						failures, lastErr = failures+1, err
						mu.Unlock()
						continue
					}
					proxies, expires = got, time.Now().Add(ttl)
				}
				f, err := loadlab.Get(ctx, c, proxies[rand.IntN(len(proxies))], origin, fmt.Sprintf("/obj/%d", rand.IntN(16)))
				mu.Lock()
				switch {
				case err != nil:
					failures, lastErr = failures+1, err
				case f.Redirected:
					redirected++
				default:
					served++
				}
				mu.Unlock()
			}
		})
	}
	defer func() { close(stop); wg.Wait() }()

	// sites is the set of sites the DNS server answers with now.
	sites := func() []string {
		got, _, err := lab.Resolve(ctx, spec.IP(1, 99), origin.Host())
		if err != nil {
			t.Fatalf("resolving: %v", err)
		}
		var out []string
		for _, a := range got {
			if !slices.Contains(out, site[a]) {
				out = append(out, site[a])
			}
		}
		slices.Sort(out)
		return out
	}
	await := func(what string, want ...string) time.Time {
		t.Helper()
		for ctx.Err() == nil {
			if got := sites(); slices.Equal(got, want) {
				t.Logf("%s: answers from %v", what, got)
				return time.Now()
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Fatalf("%s: the DNS server never answered from %v only", what, want)
		return time.Time{}
	}
	start := time.Now()
	await("the crowd starts", "e1")
	e2 := await("the site's proxies loaded", "e2")
	mu.Lock()
	// How many were redirected before the move depends on how quickly
	// the load travels on this machine: logged, not judged here
	// (eval/loadaware measures it).
	t.Logf("before the move: %d requests served by proxies, %d redirected to the origin", served, redirected)
	mu.Unlock()
	w1 := await("the region's proxies loaded", "w1")
	await("every proxy loaded: still answered, from the site", "e1")
	mu.Lock()
	defer mu.Unlock()
	t.Logf("moved to the region after %v, to the other region after %v; %d requests served by proxies, %d redirected, %d failures (last: %v)",
		e2.Sub(start).Round(time.Second), w1.Sub(start).Round(time.Second), served, redirected, failures, lastErr)
	if failures > 0 {
		t.Errorf("%d failed requests or queries; the last: %v", failures, lastErr)
	}
	if err := lab.Exited(); err != nil {
		t.Fatal(err)
	}
}

// TestFairSharesOneProxy: issue 41's fair shares with the real bin/caddy.
// One proxy with a budget of 1 MiB an hour and two origins: a hot one
// asked for ten 32 KiB objects a round, a small one for one 4 KiB object.
// The small site is served every time while the hot one is redirected
// once it has used its share, and the proxy's metrics say so by decision.
func TestFairSharesOneProxy(t *testing.T) {
	binaries(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	spec := loadlab.Spec{Net: "127.0.158", Dir: t.TempDir(), NoDNS: true, Budget: "1MiB",
		Sites: []loadlab.Site{{Name: "s", Region: "r", Proxies: 1}}, Logf: t.Logf}
	lab, err := loadlab.Start(ctx, spec)
	defer lab.Stop()
	if err != nil {
		t.Fatal(err)
	}
	hot, err := loadlab.StartOrigin(netip.AddrPortFrom(spec.IP(0, 2), loadlab.HTTPPort), 32<<10, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer hot.Close()
	small, err := loadlab.StartOrigin(netip.AddrPortFrom(spec.IP(0, 3), loadlab.HTTPPort), 4<<10, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer small.Close()
	proxy := lab.Proxies[0]
	c := loadlab.Client(spec.IP(1, 1))
	hotServed, hotRedirected, smallServed := 0, 0, 0
	for r := range 40 {
		for i := range 10 {
			f, err := loadlab.Get(ctx, c, proxy.Addr, hot, fmt.Sprintf("/hot/%d", (r*10+i)%64))
			if err != nil {
				t.Fatal(err)
			}
			if f.Redirected {
				hotRedirected++
			} else {
				hotServed++
			}
		}
		f, err := loadlab.Get(ctx, c, proxy.Addr, small, fmt.Sprintf("/small/%d", r%8))
		if err != nil {
			t.Fatal(err)
		}
		if !f.Redirected {
			smallServed++
		}
	}
	decisions := map[string]float64{}
	for _, d := range []string{"within_share", "over_share", "exhausted"} {
		if decisions[d], err = proxy.Metric(ctx, "caddy_coral_budget_decisions_total", fmt.Sprintf(`decision="%s"`, d)); err != nil {
			t.Fatal(err)
		}
	}
	t.Logf("hot: %d served, %d redirected; small: %d of 40 served; decisions %v", hotServed, hotRedirected, smallServed, decisions)
	if smallServed != 40 || hotRedirected == 0 || hotServed > 17 {
		t.Errorf("hot served %d and redirected %d, small served %d of 40; want the small site served every time and the hot one redirected after at most half the budget (16 objects and the one under way)",
			hotServed, hotRedirected, smallServed)
	}
	if decisions["over_share"] != float64(hotRedirected) || decisions["within_share"] != float64(hotServed+smallServed) || decisions["exhausted"] != 0 {
		t.Errorf("caddy_coral_budget_decisions_total %v, want within_share %d, over_share %d, exhausted 0", decisions, hotServed+smallServed, hotRedirected)
	}
}
