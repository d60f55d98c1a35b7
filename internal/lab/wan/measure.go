//go:build linux

package wan

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/coralcdn/coral/coraldht/icmpprobe"
	"github.com/coralcdn/coral/internal/lab/netns"
)

// echoPort is the UDP port MeasureRTT's echo listens on.
const echoPort = 7

// MeasureRTT sends n UDP datagrams from host from to an echo on host to
// (at to.Addr, port 7), one after the other, and returns their round-trip
// times, sorted. A datagram not back within a second counts as lost and
// is left out; all lost is an error.
func MeasureRTT(ctx context.Context, from, to *netns.Host, n int) ([]time.Duration, error) {
	srv, err := to.ListenPacket("udp", netip.AddrPortFrom(to.Addr, echoPort).String())
	if err != nil {
		return nil, err
	}
	defer srv.Close()
	go func() {
		buf := make([]byte, 64)
		for {
			k, a, err := srv.ReadFrom(buf)
			if err != nil {
				return
			}
			_, _ = srv.WriteTo(buf[:k], a)
		}
	}()
	var c net.Conn
	err = from.Do(func() (err error) {
		c, err = net.Dial("udp", netip.AddrPortFrom(to.Addr, echoPort).String())
		return err
	})
	if err != nil {
		return nil, err
	}
	defer c.Close()
	var out []time.Duration
	buf := make([]byte, 64)
	for i := range n {
		if ctx.Err() != nil {
			return out, ctx.Err()
		}
		msg := fmt.Appendf(nil, "probe %d", i)
		start := time.Now()
		if _, err := c.Write(msg); err != nil {
			return nil, err
		}
		_ = c.SetReadDeadline(start.Add(time.Second))
		for {
			k, err := c.Read(buf)
			if err != nil {
				break // lost
			}
			if string(buf[:k]) == string(msg) {
				out = append(out, time.Since(start))
				break
			}
		}
	}
	if len(out) == 0 {
		return nil, fmt.Errorf("wan: no echo from %s (%v) to %s", from.Name, to.Addr, from.Addr)
	}
	slices.Sort(out)
	return out, nil
}

// Trace runs the project's own trace (coraldht/icmpprobe.TraceRouters:
// one burst of ICMP echoes, TTL 1..hops) from inside host h toward dst
// and returns the routers that answered, in hop order.
func Trace(h *netns.Host, dst netip.Addr, hops int, timeout time.Duration) ([]netip.Addr, error) {
	var routers []netip.Addr
	err := h.Do(func() (err error) {
		routers, err = icmpprobe.TraceRouters(context.Background(), dst, hops, timeout)
		return err
	})
	if err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return routers, err
	}
	return routers, nil
}
