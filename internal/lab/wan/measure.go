//go:build linux

package wan

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"os/exec"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/coralcdn/coral/coraldht/icmpprobe"
	"github.com/coralcdn/coral/internal/lab/netns"
)

// MeasureRTT pings host to from host from, n times 200 ms apart (iputils
// ping, ICMP echo), and returns the round-trip times, sorted. The kernel
// answers echo requests and ping reads the kernel's receive timestamps,
// so on a loaded machine neither end's scheduling is counted, only the
// network's (and the delayer's). A lost echo is left out; all lost is an
// error.
func MeasureRTT(ctx context.Context, from, to *netns.Host, n int) ([]time.Duration, error) {
	ping, err := exec.LookPath("ping")
	if err != nil {
		return nil, fmt.Errorf("wan: %w (run internal/lab/wan/install-deps.sh)", err)
	}
	out, err := from.Run(ctx, ping, "-n", "-c", strconv.Itoa(n), "-i", "0.2", "-W", "1", to.Addr.String())
	rtts := parsePing(string(out))
	if len(rtts) == 0 {
		return nil, fmt.Errorf("wan: no echo from %s (%v) to %s: %v", to.Name, to.Addr, from.Name, err)
	}
	slices.Sort(rtts)
	return rtts, nil
}

// parsePing reads the round-trip times of ping's reply lines
// ("64 bytes from 198.18.3.10: icmp_seq=1 ttl=61 time=44.1 ms").
func parsePing(out string) []time.Duration {
	var rtts []time.Duration
	for _, line := range strings.Split(out, "\n") {
		_, rest, ok := strings.Cut(line, " time=")
		if !ok {
			continue
		}
		v, unit, _ := strings.Cut(rest, " ")
		ms, err := strconv.ParseFloat(v, 64)
		if err != nil || unit != "ms" {
			continue
		}
		rtts = append(rtts, time.Duration(ms*float64(time.Millisecond)))
	}
	return rtts
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
