package coral

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

// fakeProbe answers after a per-address delay; a missing address never
// answers (the probe runs into its deadline).
type fakeProbe struct {
	rtt   map[netip.Addr]time.Duration
	calls atomic.Int32
}

func (f *fakeProbe) probe(ctx context.Context, a netip.Addr) (time.Duration, error) {
	f.calls.Add(1)
	d, ok := f.rtt[a]
	if !ok {
		<-ctx.Done()
		return 0, ctx.Err()
	}
	select {
	case <-time.After(d):
		return d, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

func newTestClassifier(ctx context.Context, p *fakeProbe) *classifier {
	return &classifier{
		thresholds: []time.Duration{60 * time.Millisecond, 20 * time.Millisecond},
		overrides:  []override{{netip.MustParsePrefix("192.0.2.0/24"), 1}},
		cache:      newRTTCache(4),
		gate:       newProbeGate(maxProbeRate, maxProbeRate, time.Now),
		probe:      p.probe,
		wait:       60 * time.Millisecond,
		fresh:      10 * time.Minute,
		failedFor:  time.Minute,
		now:        time.Now,
		ctx:        ctx,
	}
}

// strong is a query from a that proved its address (TCP, a cookie).
func strong(a netip.Addr) asker { return asker{addr: a, proof: proofStrong} }

func TestClassify(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		near, mid, far, silent := netip.MustParseAddr("198.51.100.1"), netip.MustParseAddr("198.51.101.1"),
			netip.MustParseAddr("198.51.102.1"), netip.MustParseAddr("198.51.103.1")
		p := &fakeProbe{rtt: map[netip.Addr]time.Duration{near: 5 * time.Millisecond, mid: 40 * time.Millisecond, far: 59 * time.Millisecond}}
		ctx, cancel := context.WithCancel(context.Background())
		c := newTestClassifier(ctx, p)
		for _, tc := range []struct {
			a     netip.Addr
			level int
			src   string
			took  time.Duration
		}{
			{near, 2, "probe", 5 * time.Millisecond},
			{mid, 1, "probe", 40 * time.Millisecond},
			{far, 1, "probe", 59 * time.Millisecond},
			{silent, 0, "timeout", 60 * time.Millisecond}, // never waits longer than the largest threshold
			{netip.MustParseAddr("192.0.2.7"), 1, "classify", 0},
			{netip.MustParseAddr("198.51.100.200"), 2, "cache", 0}, // same /24 as near
			{netip.MustParseAddr("::ffff:198.51.100.9"), 2, "cache", 0},
		} {
			start := time.Now()
			got := c.classify(context.Background(), tc.a, strong(tc.a))
			if got.level != tc.level || got.source != tc.src || time.Since(start) != tc.took {
				t.Errorf("%v: level %d from %s in %v; want %d from %s in %v", tc.a, got.level, got.source, time.Since(start), tc.level, tc.src, tc.took)
			}
		}
		// The silent resolver's failure is cached too: no second wait.
		start := time.Now()
		if got := c.classify(context.Background(), silent, strong(silent)); got.level != 0 || time.Since(start) != 0 {
			t.Errorf("silent again: %+v after %v", got, time.Since(start))
		}
		calls := p.calls.Load()
		// An old measurement is used at once and refreshed in the background.
		time.Sleep(11 * time.Minute)
		start = time.Now()
		if got := c.classify(context.Background(), mid, strong(mid)); got.level != 1 || got.source != "cache" || time.Since(start) != 0 {
			t.Errorf("stale entry: %+v after %v", got, time.Since(start))
		}
		synctest.Wait()
		time.Sleep(time.Second)
		if p.calls.Load() != calls+1 {
			t.Errorf("%d probes after a stale hit, want %d", p.calls.Load(), calls+1)
		}
		cancel()
		c.background.Wait()
	})
}

// TestClassifyOneProbePerPrefix: a burst of queries from one /24 shares a
// single probe.
func TestClassifyOneProbePerPrefix(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakeProbe{rtt: map[netip.Addr]time.Duration{}}
		for i := range 50 {
			p.rtt[netip.AddrFrom4([4]byte{203, 0, 113, byte(i)})] = 10 * time.Millisecond
		}
		c := newTestClassifier(context.Background(), p)
		var wg sync.WaitGroup
		for i := range 50 {
			wg.Go(func() {
				if got := c.classify(context.Background(), netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}), strong(netip.AddrFrom4([4]byte{203, 0, 113, byte(i)}))); got.level != 2 {
					t.Errorf("level %d", got.level)
				}
			})
		}
		wg.Wait()
		if n := p.calls.Load(); n != 1 {
			t.Errorf("%d probes for one prefix, want 1", n)
		}
		c.background.Wait()
	})
}

func TestClassifyCacheBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakeProbe{rtt: map[netip.Addr]time.Duration{}}
		c := newTestClassifier(context.Background(), p)
		for i := range 20 {
			a := netip.AddrFrom4([4]byte{198, 18, byte(i), 1})
			p.rtt[a] = time.Millisecond
			c.classify(context.Background(), a, strong(a))
		}
		c.background.Wait()
		if n := c.cache.len(); n > 4 {
			t.Errorf("cache holds %d prefixes, bound 4", n)
		}
	})
}

// TestTCPProbe measures a real loopback listener and a closed port (the RST
// answers just as fast).
func TestTCPProbe(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:53")
	if err != nil {
		t.Skipf("cannot listen on port 53: %v", err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	for _, a := range []string{"127.0.0.1", "127.0.0.254"} { // listening, closed
		rtt, err := tcpProbe(ctx, netip.MustParseAddr(a))
		if err != nil || rtt <= 0 || rtt > 500*time.Millisecond {
			t.Errorf("%s: rtt %v err %v", a, rtt, err)
		}
	}
	expired, cancel2 := context.WithCancel(context.Background())
	cancel2()
	if _, err := tcpProbe(expired, netip.MustParseAddr("127.0.0.1")); !errors.Is(err, context.Canceled) {
		t.Errorf("cancelled probe: %v", err)
	}
}

// TestPreferTCP: the TCP probe's RTT counts where the resolver answers
// it, even when the echo answered first; the echo's counts only when TCP
// fails, or has not answered within as long again as the echo took.
func TestPreferTCP(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		slow := func(d time.Duration, fail bool) probeFunc {
			return func(ctx context.Context, a netip.Addr) (time.Duration, error) {
				select {
				case <-time.After(d):
				case <-ctx.Done():
					return 0, ctx.Err()
				}
				if fail {
					return 0, errors.New("unreachable")
				}
				return d, nil
			}
		}
		a := netip.MustParseAddr("192.0.2.1")
		for _, tc := range []struct {
			name      string
			tcp, icmp probeFunc
			rtt       time.Duration
			took      time.Duration
			wantErr   bool
		}{
			{"TCP first", slow(10*time.Millisecond, false), slow(30*time.Millisecond, false), 10 * time.Millisecond, 10 * time.Millisecond, false},
			{"TCP soon after the echo", slow(15*time.Millisecond, false), slow(10*time.Millisecond, false), 15 * time.Millisecond, 15 * time.Millisecond, false},
			{"TCP too late: the echo", slow(50*time.Millisecond, false), slow(10*time.Millisecond, false), 10 * time.Millisecond, 20 * time.Millisecond, false},
			{"TCP fails: the echo", slow(time.Millisecond, true), slow(20*time.Millisecond, false), 20 * time.Millisecond, 20 * time.Millisecond, false},
			{"TCP fails after the echo", slow(12*time.Millisecond, true), slow(10*time.Millisecond, false), 10 * time.Millisecond, 12 * time.Millisecond, false},
			{"the echo fails: TCP", slow(20*time.Millisecond, false), slow(time.Millisecond, true), 20 * time.Millisecond, 20 * time.Millisecond, false},
			{"both fail", slow(time.Millisecond, true), slow(2*time.Millisecond, true), 0, 2 * time.Millisecond, true},
		} {
			start := time.Now()
			rtt, err := preferTCP(tc.tcp, tc.icmp)(context.Background(), a)
			if rtt != tc.rtt || (err != nil) != tc.wantErr || time.Since(start) != tc.took {
				t.Errorf("%s: %v %v after %v; want %v after %v", tc.name, rtt, err, time.Since(start), tc.rtt, tc.took)
			}
		}
	})
}

// TestClassifyProbeLimit: with probe_limit 3, three new prefixes are
// probed at once and the rest are level 0 without waiting; a stale entry's
// background refresh is not started either while the limit is reached.
func TestClassifyProbeLimit(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p := &fakeProbe{rtt: map[netip.Addr]time.Duration{}} // nobody answers
		c := newTestClassifier(context.Background(), p)
		c.limit = 3
		c.cache.max = 100
		known := netip.MustParseAddr("198.51.100.1")
		c.cache.entries[coraldht.SitePrefix(known)] = measured[time.Duration]{v: 5 * time.Millisecond, ok: true, at: time.Now().Add(-time.Hour)}
		var wg sync.WaitGroup
		var skipped atomic.Int32
		for i := range 10 {
			wg.Go(func() {
				got := c.classify(context.Background(), netip.AddrFrom4([4]byte{203, 0, byte(i), 1}), strong(netip.AddrFrom4([4]byte{203, 0, byte(i), 1})))
				if got.source == "skipped" && got.level == 0 {
					skipped.Add(1)
				}
			})
		}
		synctest.Wait() // every query has started its probe or been skipped
		if got := c.classify(context.Background(), known, strong(known)); got.level != 2 || got.source != "cache" {
			t.Errorf("stale known resolver during the flood: %+v, want its cached level 2", got)
		}
		wg.Wait()
		if n := p.calls.Load(); n != 3 {
			t.Errorf("%d probes, want 3 (the stale refresh skipped too)", n)
		}
		if n := skipped.Load(); n != 7 {
			t.Errorf("%d queries skipped, want 7", n)
		}
		c.background.Wait()
	})
}
