//go:build linux

package hostilelab

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"time"

	"github.com/coralcdn/coral/internal/lab/evilorigin"
)

// Bounds are the invariants a class must keep (README.md explains each).
type Bounds struct {
	// RSSOverIdle bounds the attacked proxy's peak resident memory above
	// what it used before the class.
	RSSOverIdle int64
	// DiskSlack is what the cache may use beyond cache_size: metadata
	// files, directories, and charging granularity.
	DiskSlack int64
	// CanaryP99 bounds the 99th percentile latency of the honest probes.
	CanaryP99 time.Duration
	// LeakGoroutines and LeakFDs bound goroutines and open files above
	// idle once the class has ended and Settle has passed.
	LeakGoroutines, LeakFDs int
	// Settle is the longest wait after a class for the proxy to let go
	// of it.
	Settle time.Duration
}

// DefaultBounds are the documented bounds (README.md) for a cache of
// cacheSize bytes.
func DefaultBounds(cacheSize int64) Bounds {
	return Bounds{
		RSSOverIdle:    256 << 20,
		DiskSlack:      4<<20 + cacheSize/16,
		CanaryP99:      2 * time.Second,
		LeakGoroutines: 100,
		LeakFDs:        32,
		Settle:         20 * time.Second,
	}
}

// Result is one class's run.
type Result struct {
	Class    string        `json:"class"`
	Seed     uint64        `json:"seed"`
	Duration time.Duration `json:"duration_ns"`
	// Requests and Errors are the hostile clients' requests and those
	// that failed on their side (expected: the proxy cuts them off).
	Requests int64 `json:"attack_requests"`
	Errors   int64 `json:"attack_errors"`
	// OriginRequests is how many requests the evil origin got.
	OriginRequests int64 `json:"origin_requests"`

	Idle  Sample `json:"idle"`
	Peak  Peaks  `json:"peak"`
	After Sample `json:"after"`
	// PeerPeakRSS is the peer's peak resident memory.
	PeerPeakRSS int64 `json:"peer_peak_rss"`
	CacheSize   int64 `json:"cache_size"`

	// Canary is per probe kind (honest, victim, same-host).
	Canary map[string]CanaryStats `json:"canary"`
	// SameOrigin is the class's SameOrigin: whether the evil origin's
	// other objects had to stay available.
	SameOrigin bool `json:"same_origin_checked"`
	// PeakHeld is the most answers the attacking client read at once
	// (each a download slot held for it), for a class that bounds it:
	// HeldBound, its share of the slots.
	PeakHeld  int64 `json:"peak_held,omitempty"`
	HeldBound int   `json:"held_bound,omitempty"`
	// Exited is set when the proxy or its peer died.
	Exited string `json:"exited,omitempty"`
	// Violations are the broken invariants, each a sentence.
	Violations []string `json:"violations"`
}

// Warm fetches every object the canary checks once through both proxies
// (so victims are cached before anyone attacks them); it returns the
// failures.
func (l *Lab) Warm() []string {
	c := &canary{lab: l, client: newCanaryClient()}
	defer c.client.CloseIdleConnections()
	var errs []string
	for i := range 32 {
		if p := c.honest(i); p.err != "" {
			errs = append(errs, p.err)
		}
	}
	for i := range 2 * len(Victims) {
		if p := c.victim(i); p.err != "" {
			errs = append(errs, p.err)
		}
	}
	return errs
}

// newEvil replaces the evil origin with a fresh one on a port of its own,
// so what the proxies remember of one class's origin (an https redirect,
// a port marked down, its download slots) does not carry over into the
// next class, and warms the new one's victims.
func (l *Lab) newEvil() error {
	if l.Evil != nil {
		_ = l.Evil.Close()
	}
	ip := l.Proxy.IP.As4()
	ip[3] = 3
	var err error
	if l.Evil, err = evilorigin.Listen(netip.AddrFrom4(ip), 0); err != nil {
		return err
	}
	if errs := l.Warm(); len(errs) > 0 {
		return fmt.Errorf("warming up before the attack: %d failures, first: %s", len(errs), errs[0])
	}
	return nil
}

// Run attacks with class for d and checks bounds; seed picks the random
// choices. It fails only when the lab itself cannot go on (a proxy died
// is a Result, not an error).
func (l *Lab) Run(ctx context.Context, class Class, d time.Duration, seed uint64, b Bounds) (Result, error) {
	res := Result{Class: class.Name, Seed: seed, Duration: d, CacheSize: l.cfg.CacheSize, SameOrigin: class.SameOrigin}
	if err := l.newEvil(); err != nil {
		return res, err
	}
	idle, err := l.Proxy.Sample()
	if err != nil {
		return res, err
	}
	res.Idle = idle
	originBefore := l.Evil.Requests()
	smp := startSampler(l.Proxy, l.Peer)
	can := l.startCanary()
	a := &attack{lab: l, seed: seed}
	actx, cancel := context.WithTimeout(ctx, d)
	class.run(actx, a)
	cancel()
	a.closeAll()
	// End what the attack left at the origin, but not the canary's own
	// fetches of the victims.
	l.Evil.DropIf(func(r *evilorigin.Request) bool { return r != nil && !strings.HasPrefix(r.Path, "/victim/") })
	res.Requests, res.Errors = a.requests.Load(), a.errors.Load()
	res.PeakHeld, res.HeldBound = a.peakHeld.Load(), a.heldBound
	res.OriginRequests = l.Evil.Requests() - originBefore

	// Settle: the proxy should let go of the attack's goroutines and
	// files; the canary goes on meanwhile.
	deadline := time.Now().Add(b.Settle)
	for {
		after, err := l.Proxy.Sample()
		if err == nil {
			res.After = after
			if after.Goroutines <= idle.Goroutines+b.LeakGoroutines && after.FDs <= idle.FDs+b.LeakFDs {
				break
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			break
		}
		time.Sleep(SampleEvery)
	}
	res.Canary = can.finish()
	peaks := smp.finish()
	res.Peak, res.PeerPeakRSS = peaks[l.Proxy], peaks[l.Peer].RSS
	for _, p := range []*Proxy{l.Proxy, l.Peer} {
		if err := p.Exited(); err != nil {
			res.Exited += err.Error()
		}
	}
	res.Violations = res.check(b)
	return res, nil
}

func (r *Result) check(b Bounds) []string {
	var v []string
	if r.Exited != "" {
		v = append(v, "a proxy died: "+firstLine(r.Exited))
	}
	if over := r.Peak.RSS - r.Idle.RSS; over > b.RSSOverIdle {
		v = append(v, fmt.Sprintf("peak RSS %s over idle, bound %s", MiB(over), MiB(b.RSSOverIdle)))
	}
	if r.Peak.Disk > r.CacheSize+b.DiskSlack {
		v = append(v, fmt.Sprintf("peak disk %s (%s in unlinked open files), bound cache_size %s + %s",
			MiB(r.Peak.Disk), MiB(r.Peak.Unlinked), MiB(r.CacheSize), MiB(b.DiskSlack)))
	}
	if r.HeldBound > 0 && r.PeakHeld > int64(r.HeldBound) {
		v = append(v, fmt.Sprintf("one client held %d downloads at once, bound %d", r.PeakHeld, r.HeldBound))
	}
	if h := r.Canary[ProbeHonest]; h.Failures > 0 {
		v = append(v, fmt.Sprintf("canary failures: %d of %d, first: %s", h.Failures, h.Requests, strings.Join(h.FirstErrors, " | ")))
	} else if h.Requests == 0 {
		v = append(v, "the canary made no request")
	}
	if vs := r.Canary[ProbeVictim]; vs.Changed > 0 {
		v = append(v, fmt.Sprintf("victims changed: %d of %d, first: %s", vs.Changed, vs.Requests, strings.Join(vs.FirstErrors, " | ")))
	}
	if r.SameOrigin {
		if n, of, first := r.sameOriginUnavailable(); n > 0 {
			v = append(v, fmt.Sprintf("same-origin objects unavailable: %d of %d, first: %s", n, of, strings.Join(first, " | ")))
		}
	}
	if p99 := r.Canary[ProbeHonest].P99; p99 > b.CanaryP99 {
		v = append(v, fmt.Sprintf("canary p99 %v, bound %v", p99.Round(time.Millisecond), b.CanaryP99))
	}
	if r.After.Goroutines > r.Idle.Goroutines+b.LeakGoroutines {
		v = append(v, fmt.Sprintf("%d goroutines %v after the attack (idle %d), bound idle + %d", r.After.Goroutines, b.Settle, r.Idle.Goroutines, b.LeakGoroutines))
	}
	if r.After.FDs > r.Idle.FDs+b.LeakFDs {
		v = append(v, fmt.Sprintf("%d open files %v after the attack (idle %d), bound idle + %d", r.After.FDs, b.Settle, r.Idle.FDs, b.LeakFDs))
	}
	return v
}

// sameOriginUnavailable counts the victims' and the same-host object's
// failures that were not a changed response.
func (r *Result) sameOriginUnavailable() (n, of int, first []string) {
	v, h := r.Canary[ProbeVictim], r.Canary[ProbeSameHost]
	first = append(slices.Clone(v.FirstErrors), h.FirstErrors...)
	return v.Failures - v.Changed + h.Failures, v.Requests + h.Requests, first[:min(3, len(first))]
}

func firstLine(s string) string {
	l, _, _ := strings.Cut(s, "\n")
	return l
}

// MiB prints a byte count in MiB.
func MiB(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }

// Table prints results, one row per class.
func Table(rs []Result) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-16s %7s %7s %9s %9s %7s %6s %7s %8s %8s %7s %8s  %s\n",
		"class", "reqs", "origin", "RSS+peak", "disk", "unlink", "fds", "gorout", "canary", "p99", "changed", "unavail", "verdict")
	for _, r := range rs {
		h, v := r.Canary[ProbeHonest], r.Canary[ProbeVictim]
		un, of, _ := r.sameOriginUnavailable()
		unavail := fmt.Sprintf("%d/%d", un, of)
		if !r.SameOrigin {
			unavail = "(" + unavail + ")"
		}
		verdict := "ok"
		if len(r.Violations) > 0 {
			verdict = fmt.Sprintf("%d broken", len(r.Violations))
		}
		fmt.Fprintf(&b, "%-16s %7d %7d %9s %9s %7s %6d %7d %8s %8s %7s %8s  %s\n",
			r.Class, r.Requests, r.OriginRequests,
			MiB(r.Peak.RSS-r.Idle.RSS), MiB(r.Peak.Disk), MiB(r.Peak.Unlinked),
			r.Peak.FDs, r.Peak.Goroutines,
			fmt.Sprintf("%d/%d", h.Failures, h.Requests), h.P99.Round(time.Millisecond),
			fmt.Sprintf("%d/%d", v.Changed, v.Requests), unavail, verdict)
	}
	return b.String()
}

// CatalogueClasses maps each class of the lab to the behaviours of
// internal/lab/evilorigin it uses (for documentation and reports).
func CatalogueClasses() map[string][]string {
	out := map[string][]string{}
	for _, b := range evilorigin.Catalogue {
		out[b.Class] = append(out[b.Class], b.Name)
	}
	return out
}
