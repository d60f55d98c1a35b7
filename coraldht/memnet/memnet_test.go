package memnet

import (
	"errors"
	"net"
	"net/netip"
	"testing"
	"testing/synctest"
	"time"
)

func listen(t *testing.T, n *Network, addr string) *Transport {
	t.Helper()
	tr, err := n.Listen(netip.MustParseAddrPort(addr))
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// receive returns the datagram queued at tr, or "" when none is.
func receive(tr *Transport) string {
	buf := make([]byte, 64)
	n, _, ok := tr.TryReadFrom(buf)
	if !ok {
		return ""
	}
	return string(buf[:n])
}

func TestNetworkDelivers(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{Latency: func(_, _ netip.AddrPort) time.Duration { return 10 * time.Millisecond }})
		a, b := listen(t, n, "10.0.0.1:4000"), listen(t, n, "10.0.0.2:4000")
		if err := a.WriteTo([]byte("hello"), b.LocalAddr()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if got := receive(b); got != "" {
			t.Fatalf("delivered %q before the latency passed", got)
		}
		time.Sleep(10 * time.Millisecond)
		synctest.Wait()
		buf := make([]byte, 3)
		sz, from, err := b.ReadFrom(buf)
		if err != nil || string(buf[:sz]) != "hel" || from != a.LocalAddr() {
			t.Fatalf("ReadFrom = %q from %v, %v; want the datagram cut to the buffer, from %v", buf[:sz], from, err, a.LocalAddr())
		}
		if s := n.Stats(); s.Sent != 1 || s.Delivered != 1 {
			t.Fatalf("stats %+v", s)
		}
	})
}

func TestNetworkRefusesAddresses(t *testing.T) {
	n := New(Config{})
	listen(t, n, "10.0.0.1:4000")
	for _, addr := range []string{"10.0.0.1:4000", "0.0.0.0:4000", "10.0.0.2:0", "[ff02::1]:4000"} {
		if _, err := n.Listen(netip.MustParseAddrPort(addr)); err == nil {
			t.Errorf("Listen(%s) succeeded", addr)
		}
	}
}

func TestNetworkPartitionKillRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		n := New(Config{})
		a, b := listen(t, n, "10.0.0.1:4000"), listen(t, n, "10.0.0.2:4000")
		n.Partition([]netip.AddrPort{a.LocalAddr()}, []netip.AddrPort{b.LocalAddr()})
		a.WriteTo([]byte("x"), b.LocalAddr())
		if got := receive(b); got != "" || n.Stats().Blocked != 1 {
			t.Fatalf("partitioned datagram %q arrived; stats %+v", got, n.Stats())
		}
		n.Heal()
		a.WriteTo([]byte("y"), b.LocalAddr())
		if got := receive(b); got != "y" {
			t.Fatalf("after Heal got %q", got)
		}

		if _, err := n.Restart(b.LocalAddr()); err == nil {
			t.Fatal("restarted a live endpoint")
		}
		done := make(chan error)
		go func() {
			_, _, err := b.ReadFrom(make([]byte, 8))
			done <- err
		}()
		synctest.Wait()
		n.Kill(b.LocalAddr())
		if err := <-done; !errors.Is(err, ErrClosed) || !errors.Is(err, net.ErrClosed) {
			t.Fatalf("a killed endpoint's ReadFrom returned %v; want ErrClosed wrapping net.ErrClosed", err)
		}
		a.WriteTo([]byte("z"), b.LocalAddr())
		if s := n.Stats(); s.NoRoute != 1 {
			t.Fatalf("datagram to a dead endpoint: stats %+v", s)
		}
		b2, err := n.Restart(b.LocalAddr())
		if err != nil {
			t.Fatal(err)
		}
		a.WriteTo([]byte("again"), b2.LocalAddr())
		if got := receive(b2); got != "again" {
			t.Fatalf("restarted endpoint got %q", got)
		}
		b2.Close()
		if err := b2.WriteTo([]byte("w"), a.LocalAddr()); !errors.Is(err, ErrClosed) {
			t.Fatalf("WriteTo after Close = %v", err)
		}
	})
}

// TestWriteToFrom: a spoofed datagram arrives with the spoofed source, and
// a closed sender sends nothing.
func TestWriteToFrom(t *testing.T) {
	n := New(Config{})
	a, _ := n.Listen(netip.MustParseAddrPort("10.0.0.1:1"))
	b, _ := n.Listen(netip.MustParseAddrPort("10.0.0.2:1"))
	victim := netip.MustParseAddrPort("10.0.0.3:1")
	if err := a.WriteToFrom([]byte("x"), b.LocalAddr(), victim); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 8)
	if _, from, ok := b.TryReadFrom(buf); !ok || from != victim {
		t.Fatalf("got from %v, %v; want %v", from, ok, victim)
	}
	a.Close()
	if err := a.WriteToFrom([]byte("x"), b.LocalAddr(), victim); err == nil {
		t.Fatal("a closed endpoint sent")
	}
}
