//go:build linux

package icmpprobe

import (
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// TestICMPOffPathForgery is the regression test of issue 34's finding 3
// (an RTT probe answered off the path): in a network namespace of its own
// (a child process of this test binary), where no host answers echo
// requests, the prober probes the attacker's address and, right after, a
// silent "resolver". The attacker reads only the probe sent to its own
// address (as it would on the Internet) and sends forged echo replies
// "from" the resolver built from it: every sequence number near the one
// it saw, the payload its probe had and that payload with a following
// counter. No forged reply may count: the resolver's probe must time out.
func TestICMPOffPathForgery(t *testing.T) {
	if os.Getenv("CORAL_ICMP_FORGERY_CHILD") == "1" {
		icmpForgeryChild(t)
		return
	}
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil {
		t.Skipf("no network namespaces here: %v", err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestICMPOffPathForgery$", "-test.v", "-test.count=1")
	cmd.Env = append(os.Environ(), "CORAL_ICMP_FORGERY_CHILD=1", "CORAL_ICMP_NETNS_PARENT="+ns)
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

func icmpForgeryChild(t *testing.T) {
	ns, err := os.Readlink("/proc/self/ns/net")
	if err != nil || ns == os.Getenv("CORAL_ICMP_NETNS_PARENT") {
		t.Fatalf("not in a network namespace of our own (%q, %v)", ns, err)
	}
	setLoopbackUp(t)
	writeSysctl(t, "net/ipv4/ping_group_range", "0 2147483647")
	writeSysctl(t, "net/ipv4/icmp_echo_ignore_all", "1")
	attacker, resolver := netip.MustParseAddr("127.0.0.66"), netip.MustParseAddr("127.0.0.53")

	for _, kind := range []sockKind{kindDatagram, kindRaw} {
		t.Run(kind.String(), func(t *testing.T) {
			p := newTestICMPProber(t, kind)
			sniff, err := icmp.ListenPacket("ip4:icmp", "0.0.0.0")
			if err != nil {
				t.Skipf("no raw socket for the attacker: %v", err)
			}
			defer sniff.Close()
			raw, err := net.ListenPacket("ip4:icmp", "0.0.0.0")
			if err != nil {
				t.Skipf("no raw socket for the attacker: %v", err)
			}
			defer raw.Close()
			forger, err := ipv4.NewRawConn(raw)
			if err != nil {
				t.Fatal(err)
			}
			for round := range 3 {
				// The probe the attacker sees: to its own address.
				seenc := make(chan *icmp.Echo, 1)
				go func() {
					_ = sniff.SetReadDeadline(time.Now().Add(2 * time.Second))
					buf := make([]byte, 1500)
					for {
						n, from, err := sniff.ReadFrom(buf)
						if err != nil {
							seenc <- nil
							return
						}
						m, err := icmp.ParseMessage(1, buf[:n])
						if err != nil || m.Type != ipv4.ICMPTypeEcho || peerAddr(from) != netip.MustParseAddr("127.0.0.1") {
							continue
						}
						// A probe to the attacker: the request's own
						// destination is not in what a raw socket reads,
						// so take the first echo request after the probe
						// started (nothing else runs here).
						seenc <- m.Body.(*icmp.Echo)
						return
					}
				}()
				time.Sleep(20 * time.Millisecond)
				ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
				_, _ = p.Probe(ctx, attacker) // nobody answers
				cancel()
				seen := <-seenc
				if seen == nil {
					t.Fatal("the attacker saw no probe")
				}
				// The resolver's probe, and the forgeries racing it.
				res := make(chan error, 1)
				go func() {
					ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
					defer cancel()
					_, err := p.Probe(ctx, resolver)
					res <- err
				}()
				time.Sleep(5 * time.Millisecond)
				for _, payload := range forgedPayloads(seen.Data) {
					for d := -3; d <= 8; d++ {
						forge(t, forger, resolver, &icmp.Echo{ID: seen.ID, Seq: int(uint16(seen.Seq + d)), Data: payload})
					}
				}
				if err := <-res; err == nil {
					t.Fatalf("round %d: the silent resolver's probe was answered by a forged reply", round)
				} else if !errors.Is(err, context.DeadlineExceeded) {
					t.Fatalf("round %d: resolver probe: %v, want a timeout", round, err)
				}
			}
		})
	}
}

// forgedPayloads are the payloads an attacker would try from the one it
// saw: the same, and with each following count in its last 8 octets
// (the old prober's token and probe counter).
func forgedPayloads(seen []byte) [][]byte {
	out := [][]byte{append([]byte(nil), seen...)}
	if len(seen) == 16 {
		for d := uint64(1); d <= 4; d++ {
			b := append([]byte(nil), seen...)
			binary.BigEndian.PutUint64(b[8:], binary.BigEndian.Uint64(seen[8:])+d)
			out = append(out, b)
		}
	}
	return out
}

// forge sends an echo reply that claims to come from from, to 127.0.0.1.
func forge(t *testing.T, c *ipv4.RawConn, from netip.Addr, e *icmp.Echo) {
	t.Helper()
	b, err := (&icmp.Message{Type: ipv4.ICMPTypeEchoReply, Body: e}).Marshal(nil)
	if err != nil {
		t.Fatal(err)
	}
	h := &ipv4.Header{Version: 4, Len: ipv4.HeaderLen, TotalLen: ipv4.HeaderLen + len(b), TTL: 64, Protocol: 1,
		Src: from.AsSlice(), Dst: net.IPv4(127, 0, 0, 1)}
	if err := c.WriteTo(h, b, nil); err != nil {
		t.Fatalf("forging: %v", err)
	}
}
