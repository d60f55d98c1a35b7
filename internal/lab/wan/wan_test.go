//go:build linux

package wan

import (
	"context"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/netns"
)

// A small world: three sites of one region (a metro and a town 15 ms
// off), one two regions away, one across an ocean.
var testSites = []Site{
	{"metro-a", "east"}, {"metro-b", "east"}, {"town", "east"},
	{"inland", "central"}, {"overseas", "west"},
}

var testRTTms = [][]float64{
	{0, 4, 15, 38, 140},
	{4, 0, 12, 35, 150},
	{15, 12, 0, 30, 160},
	{38, 35, 30, 0, 110},
	{140, 150, 160, 110, 0},
}

func testRTT(a, b int) time.Duration {
	return time.Duration(testRTTms[a][b] * float64(time.Millisecond))
}

func newTestLab(t *testing.T, o Options) *Lab {
	t.Helper()
	if err := Available(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("skipping: %v", err)
	}
	o.Dir = t.TempDir()
	o.Logf = t.Logf
	l, err := New(context.Background(), o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
		if left := l.NS.Namespaces(); len(left) > 0 {
			t.Errorf("namespaces left after Close: %v", left)
		}
	})
	t.Log("\n" + l.Describe())
	return l
}

func TestPlanMatchesTheMatrix(t *testing.T) {
	p, err := makePlan(testSites, testRTT)
	if err != nil {
		t.Fatal(err)
	}
	for a := range testSites {
		for b := range testSites {
			if a == b {
				continue
			}
			got := p.oneWay(a, b) + p.oneWay(b, a)
			if d := got - testRTT(a, b); d < -2*time.Microsecond || d > 2*time.Microsecond {
				t.Errorf("sites %d–%d: planned RTT %v, matrix %v", a, b, got, testRTT(a, b))
			}
			if p.turn[a][b] < 0 {
				t.Errorf("sites %d–%d: negative turn %v", a, b, p.turn[a][b])
			}
		}
	}
	// Access links are a quarter of the nearest neighbour's RTT: metro-a's
	// nearest is 4 ms away, so its first hop is 1 ms each way.
	if p.access[0] != time.Millisecond {
		t.Errorf("metro-a's access link: %v, want 1ms", p.access[0])
	}
	if _, err := makePlan(testSites, func(a, b int) time.Duration { return 0 }); err == nil {
		t.Error("a zero RTT was accepted")
	}
}

// Hosts at every site measure each other's RTT with a UDP echo: each pair
// within 10 % of the matrix or 2 ms; and a trace from one site toward
// another lists its routers in order, the silent region router missing.
func TestRTTsAndTraces(t *testing.T) {
	l := newTestLab(t, Options{Sites: testSites, RTT: testRTT, Silent: func(name string) bool {
		return strings.HasPrefix(name, "region1")
	}})
	var hosts []*netns.Host
	for s := range testSites {
		h, err := l.AddHost(s, fmt.Sprintf("h%d", s), HostAddr(s, 10))
		if err != nil {
			t.Fatal(err)
		}
		hosts = append(hosts, h)
	}
	ctx := context.Background()
	for a := range hosts {
		for b := a + 1; b < len(hosts); b++ {
			rtts, err := MeasureRTT(ctx, hosts[a], hosts[b], 5)
			if err != nil {
				t.Fatal(err)
			}
			want := testRTT(a, b)
			tol := max(want/10, 2*time.Millisecond)
			t.Logf("RTT %s–%s: min %v median %v, matrix %v", testSites[a].Name, testSites[b].Name, rtts[0], rtts[len(rtts)/2], want)
			if d := rtts[0] - want; d < -tol || d > tol {
				t.Errorf("RTT %s–%s: measured min %v, matrix %v (± %v)", testSites[a].Name, testSites[b].Name, rtts[0], want, tol)
			}
		}
	}
	// metro-a → inland: gw0, region0 (east), core, region1 (central,
	// silent), gw3.
	got, err := Trace(hosts[0], hosts[3].Addr, 8, 2*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	want := l.Heard(0, 3)
	if len(l.Path(0, 3)) != 5 || len(want) != 4 {
		t.Fatalf("path %v, heard %v", l.Path(0, 3), want)
	}
	if !slices.Equal(got, want) {
		t.Errorf("trace from metro-a to inland: %v, want %v", got, want)
	}
	// Within a region: gw0, region0, gw1.
	if got, err := Trace(hosts[0], hosts[1].Addr, 8, 2*time.Second); err != nil || !slices.Equal(got, l.Heard(0, 1)) {
		t.Errorf("trace metro-a → metro-b: %v %v, want %v", got, err, l.Heard(0, 1))
	}
	// Debian's traceroute sees the same routers, with the region router
	// as a row of stars.
	if tr, err := exec.LookPath("traceroute"); err == nil {
		out, err := hosts[0].Run(ctx, tr, "-n", "-q", "1", "-w", "1", "-m", "8", hosts[3].Addr.String())
		if err != nil {
			t.Fatal(err)
		}
		text := string(out)
		for _, r := range want {
			if !strings.Contains(text, " "+r.String()+" ") {
				t.Errorf("traceroute does not list %v:\n%s", r, text)
			}
		}
		if !strings.Contains(text, "*") {
			t.Errorf("traceroute shows no silent hop:\n%s", text)
		}
	}
	st, err := l.DelayStats()
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range st {
		t.Logf("delayer %s: %d packets, late %v (bounds %v µs), max %d µs; queue wait %v, max %d µs, %d unstamped", name, s.Packets, s.Late, LateBoundsUs, s.MaxUs, s.Wait, s.MaxWaitUs, s.Unstamped)
	}
	if st["core"] == nil || st["core"].Packets == 0 {
		t.Errorf("the core delayed nothing: %+v", st["core"])
	}
	// The pings and traces are ICMP and UDP, stamped on arrival: the
	// delays count from the stamps, not from when the delayer read them.
	var packets, unstamped uint64
	for _, s := range st {
		packets, unstamped = packets+s.Packets, unstamped+s.Unstamped
	}
	if unstamped*4 > packets {
		t.Errorf("%d of %d packets reached the delayer without an arrival stamp", unstamped, packets)
	}
}

// Hosts on a site's client LAN reach the world through the same gateway;
// a thin link limits what a site sends.
func TestClientLANAndThrottle(t *testing.T) {
	l := newTestLab(t, Options{Sites: testSites[:2], RTT: testRTT})
	srv, err := l.AddHost(0, "srv", HostAddr(0, 10))
	if err != nil {
		t.Fatal(err)
	}
	cli, err := l.AddHost(1, "cli", ClientAddr(1, 20), ClientAddr(1, 21))
	if err != nil {
		t.Fatal(err)
	}
	rtts, err := MeasureRTT(context.Background(), cli, srv, 3)
	if err != nil {
		t.Fatal(err)
	}
	if d := rtts[0] - testRTT(0, 1); d < -2*time.Millisecond || d > 2*time.Millisecond {
		t.Errorf("client LAN to the other site: %v, want %v", rtts[0], testRTT(0, 1))
	}
	if got, err := Trace(cli, srv.Addr, 6, 2*time.Second); err != nil || !slices.Equal(got, []netip.Addr{ClientAddr(1, 1), RegionRouterAddr(0), GatewayAddr(0)}) {
		t.Errorf("trace from the client LAN: %v %v", got, err)
	}
	if err := l.Throttle(0, "800kbit", 64<<10); err != nil {
		t.Fatal(err)
	}
	// 200 KB from the throttled site takes about 2 s at 800 kbit/s.
	ln, err := srv.Listen("tcp", netip.AddrPortFrom(srv.Addr, 80).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err != nil {
			return
		}
		defer c.Close()
		_, _ = c.Write(make([]byte, 200_000))
	}()
	c, err := cli.DialContext(context.Background(), "tcp", netip.AddrPortFrom(srv.Addr, 80).String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	start := time.Now()
	buf := make([]byte, 64<<10)
	total := 0
	_ = c.SetReadDeadline(time.Now().Add(20 * time.Second))
	for total < 200_000 {
		k, err := c.Read(buf)
		if err != nil {
			t.Fatalf("after %d bytes: %v", total, err)
		}
		total += k
	}
	if took := time.Since(start); took < 1500*time.Millisecond || took > 6*time.Second {
		t.Errorf("200 KB through 800 kbit/s took %v, want about 2 s", took)
	}
}

// The delayer's estimate of a release's cost follows the typical cost and
// ignores rare spikes: a mean moved by one 8 ms release made every router
// release early for a while, and paths came out short of the matrix.
func TestEarlyTracksTheMedianCost(t *testing.T) {
	var early int64
	typical, spike := int64(120*time.Microsecond), int64(8*time.Millisecond)
	for i := range 400 {
		cost := typical + int64(i%7)*int64(10*time.Microsecond) - int64(30*time.Microsecond)
		if i%20 == 0 {
			cost = spike
		}
		early = nextEarly(early, cost)
	}
	if d := time.Duration(early - typical); d < -40*time.Microsecond || d > 40*time.Microsecond {
		t.Errorf("estimate %v after releases costing about %v with a spike of %v in 20: want within 40µs", time.Duration(early), time.Duration(typical), time.Duration(spike))
	}
	for range 1000 {
		early = nextEarly(early, spike)
	}
	if early != maxEarly {
		t.Errorf("estimate %v under a load that makes every release cost %v: want the bound %v", time.Duration(early), time.Duration(spike), time.Duration(maxEarly))
	}
}

// TestOneLabAtATime: a second lab waits for the first one's lock, and
// gets it once the first lets go.
func TestOneLabAtATime(t *testing.T) {
	was := machineLock
	machineLock = filepath.Join(t.TempDir(), "coral-wan-lab.lock")
	t.Cleanup(func() { machineLock = was })
	first, err := lockMachine(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	if second, err := lockMachine(ctx); err == nil {
		second.Close()
		t.Fatal("a second lab got the lock while the first held it")
	}
	got := make(chan error, 1)
	go func() {
		second, err := lockMachine(context.Background())
		if err == nil {
			second.Close()
		}
		got <- err
	}()
	first.Close()
	if err := <-got; err != nil {
		t.Fatalf("the second lab, once the first let go: %v", err)
	}
}
