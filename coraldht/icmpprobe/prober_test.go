//go:build linux

package icmpprobe

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
	"golang.org/x/sys/unix"
)

// These tests only ever send ICMP to loopback addresses: 127.0.0.0/8 and
// ::1, in this network namespace or in one the test makes for itself.

// newTestICMPProber returns a prober of the given kinds (all kinds, in
// NewProber's order, when none are given), or skips the test when no
// ICMP socket can be had here.
func newTestICMPProber(t *testing.T, kinds ...sockKind) *Prober {
	t.Helper()
	var p *Prober
	var err error
	if len(kinds) == 0 {
		p, err = NewProber()
	} else {
		p, err = newKinds(kinds...)
	}
	if errors.Is(err, ErrUnavailable) {
		t.Skipf("no ICMP socket: %v", err)
	}
	if err != nil {
		t.Fatalf("NewProber: %v (does not wrap ErrUnavailable)", err)
	}
	t.Cleanup(func() { p.Close() })
	t.Logf("prober: %v", p)
	return p
}

// icmpTestTargets returns the loopback addresses to probe: 127.0.0.1,
// 127.0.0.2 and, when this host has it and p has an IPv6 socket, ::1.
func icmpTestTargets(t *testing.T, p *Prober) []netip.Addr {
	t.Helper()
	targets := []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.2")}
	if p.v4 == nil {
		targets = nil
	}
	if p.v6 != nil {
		if c, err := net.ListenPacket("udp6", "[::1]:0"); err == nil {
			c.Close()
			targets = append(targets, netip.IPv6Loopback())
		} else {
			t.Logf("no ::1 here (%v): IPv6 not probed", err)
		}
	}
	if len(targets) == 0 {
		t.Skip("nothing to probe")
	}
	return targets
}

func icmpProbeOK(t *testing.T, p *Prober, addr netip.Addr) time.Duration {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rtt, err := p.Probe(ctx, addr)
	if err != nil {
		t.Fatalf("probe %v: %v", addr, err)
	}
	if rtt <= 0 || rtt > 2*time.Second {
		t.Fatalf("probe %v: rtt %v", addr, rtt)
	}
	return rtt
}

func TestICMPProbeLoopback(t *testing.T) {
	p := newTestICMPProber(t)
	for _, addr := range icmpTestTargets(t, p) {
		rtt := icmpProbeOK(t, p, addr)
		t.Logf("%v: %v", addr, rtt)
	}
	// IPv4-mapped IPv6 goes out as IPv4.
	if p.v4 != nil {
		icmpProbeOK(t, p, netip.MustParseAddr("::ffff:127.0.0.1"))
	}
	// A context without a deadline gets the default one and works.
	if p.v4 != nil {
		if _, err := p.Probe(context.Background(), netip.MustParseAddr("127.0.0.1")); err != nil {
			t.Errorf("probe without deadline: %v", err)
		}
	}
}

// TestICMPProbeConcurrent runs 50 goroutines probing the same and different
// hosts at once over the shared sockets: every probe must get its own reply.
func TestICMPProbeConcurrent(t *testing.T) {
	p := newTestICMPProber(t)
	icmpConcurrent(t, p, icmpTestTargets(t, p), 50, 20)
}

func icmpConcurrent(t *testing.T, p *Prober, targets []netip.Addr, workers, each int) {
	t.Helper()
	var wg sync.WaitGroup
	errs := make(chan error, workers*each)
	for g := range workers {
		wg.Go(func() {
			for i := range each {
				addr := targets[(g+i)%len(targets)]
				ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
				rtt, err := p.Probe(ctx, addr)
				cancel()
				if err == nil && rtt <= 0 {
					err = fmt.Errorf("rtt %v", rtt)
				}
				if err != nil {
					errs <- fmt.Errorf("worker %d probe %d to %v: %w", g, i, addr, err)
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	n := 0
	for err := range errs {
		if n++; n <= 10 {
			t.Error(err)
		}
	}
	if n > 0 {
		t.Errorf("%d of %d probes failed", n, workers*each)
	}
	for _, c := range []*socket{p.v4, p.v6} {
		if c == nil {
			continue
		}
		c.mu.Lock()
		left := len(c.waiters)
		c.mu.Unlock()
		if left != 0 {
			t.Errorf("%d waiters left behind", left)
		}
	}
}

func TestICMPProbeContext(t *testing.T) {
	p := newTestICMPProber(t)
	addr := icmpTestTargets(t, p)[0]

	t.Run("cancelled", func(t *testing.T) {
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		if _, err := p.Probe(ctx, addr); !errors.Is(err, context.Canceled) {
			t.Errorf("err = %v, want context.Canceled", err)
		}
	})
	t.Run("deadline passed", func(t *testing.T) {
		ctx, cancel := context.WithDeadline(context.Background(), time.Now().Add(-time.Second))
		defer cancel()
		start := time.Now()
		if _, err := p.Probe(ctx, addr); !errors.Is(err, context.DeadlineExceeded) {
			t.Errorf("err = %v, want context.DeadlineExceeded", err)
		}
		if d := time.Since(start); d > 100*time.Millisecond {
			t.Errorf("took %v with an expired context", d)
		}
	})
	t.Run("1ms deadline", func(t *testing.T) {
		// Loopback may well answer within a millisecond: either outcome is
		// right, but a failure must be the deadline and come promptly.
		for range 20 {
			ctx, cancel := context.WithTimeout(context.Background(), time.Millisecond)
			start := time.Now()
			_, err := p.Probe(ctx, addr)
			d := time.Since(start)
			cancel()
			if err != nil && !errors.Is(err, context.DeadlineExceeded) {
				t.Errorf("err = %v, want nil or context.DeadlineExceeded", err)
			}
			if d > 500*time.Millisecond {
				t.Errorf("a 1ms probe took %v", d)
			}
		}
		// Replies that came after their probe gave up are dropped, and
		// probing goes on working.
		icmpProbeOK(t, p, addr)
	})
}

func TestICMPProbeClose(t *testing.T) {
	p := newTestICMPProber(t)
	addr := icmpTestTargets(t, p)[0]
	icmpProbeOK(t, p, addr)
	if err := p.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := p.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Second)
	defer cancel()
	if _, err := p.Probe(ctx, addr); !errors.Is(err, net.ErrClosed) {
		t.Errorf("probe after Close: %v, want net.ErrClosed", err)
	}
}

// TestICMPProbeCloseWakesWaiters checks that Close stops the reader, which
// is what wakes probes still waiting (see also the blackhole test in
// TestICMPNetns, which closes the prober under a real waiting probe). The
// waiter here is registered directly and nothing is sent.
func TestICMPProbeCloseWakesWaiters(t *testing.T) {
	p := newTestICMPProber(t)
	c := p.v4
	if c == nil {
		t.Skip("no IPv4 socket")
	}
	w := &waiter{from: netip.MustParseAddr("127.0.0.9"), reply: make(chan arrivedReply, 1)}
	if _, err := c.register(w); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		select {
		case <-w.reply:
			done <- errors.New("got a reply")
		case <-c.done:
			done <- nil
		}
	}()
	time.Sleep(20 * time.Millisecond)
	p.Close()
	select {
	case err := <-done:
		if err != nil {
			t.Error(err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("reader did not stop on Close")
	}
}

func TestICMPUnavailable(t *testing.T) {
	if _, err := newKinds(); !errors.Is(err, ErrUnavailable) {
		t.Errorf("no kinds to try: err = %v, want ErrUnavailable", err)
	}
	p := &Prober{}
	for _, a := range []string{"127.0.0.1", "::1"} {
		if _, err := p.Probe(context.Background(), netip.MustParseAddr(a)); !errors.Is(err, ErrUnavailable) {
			t.Errorf("probe %s without sockets: err = %v, want ErrUnavailable", a, err)
		}
	}
	if _, err := p.Probe(context.Background(), netip.Addr{}); err == nil {
		t.Error("probe of the zero Addr succeeded")
	}
	if err := p.Close(); err != nil {
		t.Errorf("Close without sockets: %v", err)
	}
}

// TestICMPDeliver checks the reply matching without any socket: only the
// reply with the right type, identifier (raw), token, sequence number,
// probe counter and source reaches the waiting probe.
func TestICMPDeliver(t *testing.T) {
	for _, tc := range []struct {
		name string
		kind sockKind
		v6   bool
	}{
		{"raw IPv4", kindRaw, false},
		{"datagram IPv4", kindDatagram, false},
		{"raw IPv6", kindRaw, true},
		{"datagram IPv6", kindDatagram, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := &socket{
				kind: tc.kind, ipv6: tc.v6, id: 0x4242,
				waiters: make(map[uint16]*waiter),
				done:    make(chan struct{}),
			}
			target := netip.MustParseAddr("127.0.0.2")
			other := netip.MustParseAddr("127.0.0.3")
			c.reqType, c.repType, c.proto = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply, 1
			if tc.v6 {
				target = netip.MustParseAddr("2001:db8::2")
				other = netip.MustParseAddr("2001:db8::3")
				c.reqType, c.repType, c.proto = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply, 58
			}
			w := &waiter{from: target, nonce: [payloadLen]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}, reply: make(chan arrivedReply, 1)}
			seq, err := c.register(w)
			if err != nil {
				t.Fatal(err)
			}
			// A second probe, to the other host, waiting at the same time.
			w2 := &waiter{from: other, nonce: [payloadLen]byte{9}, reply: make(chan arrivedReply, 1)}
			seq2, err := c.register(w2)
			if err != nil {
				t.Fatal(err)
			}
			if seq2 == seq {
				t.Fatal("two waiters share a sequence number")
			}

			type reply struct {
				typ   icmp.Type
				id    uint16
				seq   uint16
				nonce [payloadLen]byte
				from  netip.Addr
				short bool
			}
			good := reply{c.repType, c.id, seq, w.nonce, target, false}
			wire := func(r reply) ([]byte, net.Addr) {
				data := r.nonce[:]
				if r.short {
					data = data[:8]
				}
				m := icmp.Message{Type: r.typ, Body: &icmp.Echo{ID: int(r.id), Seq: int(r.seq), Data: data}}
				b, err := m.Marshal(nil)
				if err != nil {
					t.Fatal(err)
				}
				if c.kind == kindDatagram {
					return b, &net.UDPAddr{IP: r.from.AsSlice()}
				}
				return b, &net.IPAddr{IP: r.from.AsSlice()}
			}
			otherNonce := w.nonce
			otherNonce[15] ^= 1
			reqType := c.reqType
			bad := map[string]reply{
				"echo request":      {reqType, good.id, good.seq, good.nonce, good.from, false},
				"other sequence":    {good.typ, good.id, good.seq + 100, good.nonce, good.from, false},
				"other nonce":       {good.typ, good.id, good.seq, otherNonce, good.from, false},
				"other source":      {good.typ, good.id, good.seq, good.nonce, other, false},
				"the other probe's": {good.typ, good.id, seq2, w2.nonce, target, false},
				"short payload":     {good.typ, good.id, good.seq, good.nonce, good.from, true},
			}
			if tc.kind == kindRaw {
				bad["other identifier"] = reply{good.typ, good.id + 1, good.seq, good.nonce, good.from, false}
			}
			for name, r := range bad {
				b, from := wire(r)
				c.deliver(b, from, arrivedReply{at: time.Now()})
				select {
				case <-w.reply:
					t.Fatalf("%s: delivered", name)
				case <-w2.reply:
					t.Fatalf("%s: delivered to the other probe", name)
				default:
				}
			}
			c.deliver([]byte{0, 1, 2}, &net.IPAddr{IP: target.AsSlice()}, arrivedReply{at: time.Now()}) // garbage

			// On a datagram socket the kernel sets the identifier: any
			// will do.
			if tc.kind == kindDatagram {
				good.id = 7
			}
			at := time.Now()
			b, from := wire(good)
			c.deliver(b, from, arrivedReply{at: at, ttl: 61})
			select {
			case got := <-w.reply:
				if !got.at.Equal(at) || got.ttl != 61 {
					t.Errorf("arrival %v, TTL %d; want %v, 61", got.at, got.ttl, at)
				}
			default:
				t.Fatal("good reply not delivered")
			}
			// A duplicate is dropped (the waiter is gone).
			c.deliver(b, from, arrivedReply{at: at})
			select {
			case <-w.reply:
				t.Error("duplicate delivered")
			default:
			}
			c.mu.Lock()
			_, still := c.waiters[seq]
			c.mu.Unlock()
			if still {
				t.Error("waiter still registered after its reply")
			}
			c.unregister(seq, w) // harmless
			c.unregister(seq2, w2)
		})
	}
}

// TestICMPProbeUnpredictable is the regression test of the off-path
// forgery (issue 34, finding 3): one probe seen from the attacker's own
// address used to reveal what a forged reply to the next probe, to
// another address, needed (a token fixed for the process's life, a
// counter, the next sequence number). Now consecutive probes share
// neither sequence numbers in order nor any part of the payload, and a
// reply built from a seen probe is not delivered to the next one.
func TestICMPProbeUnpredictable(t *testing.T) {
	c := &socket{kind: kindRaw, id: 0x4242, waiters: make(map[uint16]*waiter), done: make(chan struct{}),
		reqType: ipv4.ICMPTypeEcho, repType: ipv4.ICMPTypeEchoReply, proto: 1}
	attacker, victim := netip.MustParseAddr("192.0.2.66"), netip.MustParseAddr("198.51.100.53")
	var seen, next *waiter
	var seenSeq, nextSeq uint16
	runs, consecutive := 0, 0
	for range 64 {
		seen = &waiter{from: attacker, reply: make(chan arrivedReply, 1)}
		next = &waiter{from: victim, reply: make(chan arrivedReply, 1)}
		_, _ = rand.Read(seen.nonce[:])
		_, _ = rand.Read(next.nonce[:])
		var err error
		if seenSeq, err = c.register(seen); err != nil {
			t.Fatal(err)
		}
		if nextSeq, err = c.register(next); err != nil {
			t.Fatal(err)
		}
		runs++
		if nextSeq == seenSeq+1 {
			consecutive++
		}
		// The attacker answers the victim's probe with everything its own
		// probe showed, at each sequence number near its own.
		for d := -2; d <= 2; d++ {
			b, err := (&icmp.Message{Type: ipv4.ICMPTypeEchoReply, Body: &icmp.Echo{ID: int(c.id), Seq: int(seenSeq + uint16(d)), Data: seen.nonce[:]}}).Marshal(nil)
			if err != nil {
				t.Fatal(err)
			}
			c.deliver(b, &net.IPAddr{IP: victim.AsSlice()}, arrivedReply{at: time.Now()})
		}
		select {
		case <-next.reply:
			t.Fatal("a reply forged from the attacker's own probe was delivered to the victim's")
		default:
		}
		c.unregister(seenSeq, seen)
		c.unregister(nextSeq, next)
	}
	if consecutive > runs/4 {
		t.Errorf("%d of %d probe pairs had consecutive sequence numbers: they are predictable", consecutive, runs)
	}
}

// TestICMPNetns runs icmpNetnsChild in a network namespace of its own
// (a child process of this test binary), where it can make a host that does
// not answer and allow unprivileged ICMP sockets without touching this
// namespace's settings. It is skipped where namespaces can't be made.
func TestICMPNetns(t *testing.T) {
	if os.Getenv("CORAL_ICMP_NETNS_CHILD") == "1" {
		icmpNetnsChild(t)
		return
	}
	if testing.Short() {
		t.Skip("short")
	}
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Skipf("no network namespaces here: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestICMPNetns$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "CORAL_ICMP_NETNS_CHILD=1", "CORAL_ICMP_NETNS_PARENT="+ns)
	cmd.SysProcAttr = &syscall.SysProcAttr{Cloneflags: syscall.CLONE_NEWNET}
	out, err := cmd.CombinedOutput()
	if err != nil && (errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EINVAL) || errors.Is(err, syscall.ENOSYS)) {
		t.Skipf("cannot make a network namespace: %v", err)
	}
	t.Logf("in a new network namespace:\n%s", out)
	if err != nil {
		t.Fatalf("child: %v", err)
	}
}

// icmpNetnsChild runs in a fresh network namespace: nothing in it but a
// loopback interface, which it brings up.
func icmpNetnsChild(t *testing.T) {
	// Never change the settings of a namespace we didn't make.
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil || ns == os.Getenv("CORAL_ICMP_NETNS_PARENT") {
		t.Fatalf("not in a network namespace of our own (%q, %v)", ns, err)
	}
	setLoopbackUp(t)
	writeSysctl(t, "net/ipv4/ping_group_range", "0 2147483647")

	for _, kind := range []sockKind{kindDatagram, kindRaw} {
		t.Run(kind.String(), func(t *testing.T) {
			p := newTestICMPProber(t, kind)
			for _, c := range []*socket{p.v4, p.v6} {
				if c != nil && c.kind != kind {
					t.Fatalf("socket kind %v, want %v", c.kind, kind)
				}
			}
			targets := icmpTestTargets(t, p)
			for _, addr := range targets {
				icmpProbeOK(t, p, addr)
			}
			icmpConcurrent(t, p, targets, 50, 10)

			t.Run("blackhole", func(t *testing.T) {
				setEchoIgnore(t, targets, "1")
				defer setEchoIgnore(t, targets, "0")
				for _, addr := range targets {
					const timeout = 200 * time.Millisecond
					ctx, cancel := context.WithTimeout(context.Background(), timeout)
					start := time.Now()
					_, err := p.Probe(ctx, addr)
					d := time.Since(start)
					cancel()
					if !errors.Is(err, context.DeadlineExceeded) {
						t.Errorf("probe %v of a host that doesn't answer: err = %v, want context.DeadlineExceeded", addr, err)
					}
					if d < timeout-10*time.Millisecond || d > timeout+time.Second {
						t.Errorf("probe %v gave up after %v, want about %v", addr, d, timeout)
					}
				}

				// Close wakes a probe that is still waiting.
				p2 := newTestICMPProber(t, kind)
				res := make(chan error, 1)
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
					defer cancel()
					_, err := p2.Probe(ctx, targets[0])
					res <- err
				}()
				time.Sleep(50 * time.Millisecond)
				p2.Close()
				select {
				case err := <-res:
					if !errors.Is(err, net.ErrClosed) {
						t.Errorf("probe waiting during Close: err = %v, want net.ErrClosed", err)
					}
				case <-time.After(2 * time.Second):
					t.Error("probe waiting during Close did not return")
				}

				// Answering again, the same prober works (the probes that
				// timed out left nothing behind).
				setEchoIgnore(t, targets, "0")
				for _, addr := range targets {
					icmpProbeOK(t, p, addr)
				}
			})
		})
	}

	t.Run("datagram preferred", func(t *testing.T) {
		p := newTestICMPProber(t)
		if p.v4 == nil || p.v4.kind != kindDatagram {
			t.Errorf("prober %v, want datagram sockets when ping_group_range allows", p)
		}
	})
}

// setLoopbackUp brings lo up in the current network namespace.
func setLoopbackUp(t *testing.T) {
	t.Helper()
	fd, err := unix.Socket(unix.AF_INET, unix.SOCK_DGRAM|unix.SOCK_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	ifr, err := unix.NewIfreq("lo")
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.IoctlIfreq(fd, unix.SIOCGIFFLAGS, ifr); err != nil {
		t.Fatalf("SIOCGIFFLAGS lo: %v", err)
	}
	ifr.SetUint16(ifr.Uint16() | unix.IFF_UP)
	if err := unix.IoctlIfreq(fd, unix.SIOCSIFFLAGS, ifr); err != nil {
		t.Fatalf("SIOCSIFFLAGS lo: %v", err)
	}
}

// setEchoIgnore sets whether this namespace's kernel ignores echo requests,
// for the families in targets.
func setEchoIgnore(t *testing.T, targets []netip.Addr, v string) {
	t.Helper()
	writeSysctl(t, "net/ipv4/icmp_echo_ignore_all", v)
	for _, a := range targets {
		if a.Is6() {
			writeSysctl(t, "net/ipv6/icmp/echo_ignore_all", v)
			break
		}
	}
}

// writeSysctl sets a sysctl of the current network namespace (only ever
// called in the test's own namespace), skipping the test where that can't
// be done (a read-only /proc/sys, say).
func writeSysctl(t *testing.T, name, value string) {
	t.Helper()
	if err := os.WriteFile("/proc/sys/"+name, []byte(value), 0o644); err != nil {
		t.Skipf("cannot set sysctl %s=%s: %v", name, value, err)
	}
}
