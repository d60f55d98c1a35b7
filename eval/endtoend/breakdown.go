package main

import (
	"fmt"
	"net/netip"
	"slices"
	"sort"
	"time"

	"github.com/coralcdn/coral/eval/internal/sim"
)

// sample is one request: its latency and how its proxy was chosen.
type sample struct {
	at                 time.Duration // when it started, from the clients' start
	lat, dns, proxyRTT time.Duration
	serverRTT          time.Duration // the answering name server to the resolver
	src                string        // where the proxy served the object from
	region, sameSite   bool
	// The breakdown's dimensions (see dimensions).
	dims [len(dimensions)]string
}

// dimensions are the report's breakdown of requests: where the proxy was,
// the hint that ranked it, the answer's proximity source, the NS set the
// resolver asked from, where the answering name server was, where the
// proxy got the object, how the answering server's last trace toward the
// resolver's /24 ended, and all but "served" together ("why").
var dimensions = [...]string{"proxy", "hint", "source", "ns set", "server", "served", "trace", "why"}

const (
	atSite      = "client's site"
	atRegion    = "client's region"
	atElsewhere = "elsewhere"
)

// where is b's place relative to a client at site.
func (w *world) where(site int, b netip.Addr) string {
	sb := w.site[b.Unmap()]
	switch {
	case sb == site:
		return atSite
	case w.region[sb] == w.region[site]:
		return atRegion
	}
	return atElsewhere
}

// hopName names a hint hop (the plugin's nearNode.hop): 0 the target's
// own /24, k the k-th router heard counting from the target outward.
func hopName(hop int) string {
	switch {
	case hop == 0:
		return "client /24"
	case hop > 0:
		return fmt.Sprintf("router %d from client", hop)
	}
	return "none"
}

func nsSetName(lockHop int) string {
	switch lockHop {
	case -2:
		return "parent's set"
	case -1:
		return "level set, no hint"
	}
	return "level set, " + hopName(lockHop)
}

// describe fills in a sample's dimensions; target is the address the
// answering server mapped (the resolver's).
func (w *world) describe(sm *sample, site int, proxy, target netip.Addr, info answerInfo) {
	src := info.source
	if src == "" {
		src = "off"
	}
	hint := "none"
	if info.source == "hints" {
		hint = hopName(info.hop)
	}
	trace := "none"
	if tr, ok := w.lastTrace(info.server, target); ok {
		trace = tr.outcome()
	}
	sm.dims = [len(dimensions)]string{w.where(site, proxy), hint, src, nsSetName(info.lockHop), w.where(site, info.server), sm.src, trace, ""}
	sm.dims[7] = sm.dims[0] + " | hint " + hint + " | " + src + " | " + sm.dims[3] + " | server " + sm.dims[4] + " | trace " + trace
}

// classStat summarises the requests of one class.
type classStat struct {
	Class        string  `json:"class"`
	Requests     int     `json:"requests"`
	Share        float64 `json:"share"`
	P50          float64 `json:"p50_s"`
	P96          float64 `json:"p96_s"`
	ProxyRTTP50  float64 `json:"client_proxy_rtt_p50_s"`
	ServerRTTP50 float64 `json:"server_resolver_rtt_p50_s"`
	// TailShare is the share of the scope's requests slower than its p96
	// that are in this class: what sets the p96.
	TailShare float64 `json:"share_of_tail"`
}

// breakdown is, per scope (all clients, the region) and dimension, the
// classes of requests, largest first.
type breakdown map[string]map[string][]classStat

func breakDown(samples []sample) breakdown {
	out := breakdown{}
	for _, scope := range []string{"all", "region"} {
		out[scope] = map[string][]classStat{}
		var in []sample
		for _, sm := range samples {
			if scope == "all" || sm.region {
				in = append(in, sm)
			}
		}
		all := make([]float64, 0, len(in))
		for _, sm := range in {
			all = append(all, sm.lat.Seconds())
		}
		slices.Sort(all)
		p96 := sim.Percentile(all, 96)
		tail := 0
		for _, l := range all {
			if l > p96 {
				tail++
			}
		}
		for d, dim := range dimensions {
			groups := map[string][]sample{}
			for _, sm := range in {
				groups[sm.dims[d]] = append(groups[sm.dims[d]], sm)
			}
			var stats []classStat
			for class, g := range groups {
				var lat, prx, srv []float64
				slow := 0
				for _, sm := range g {
					if sm.lat.Seconds() > p96 {
						slow++
					}
					lat = append(lat, sm.lat.Seconds())
					prx = append(prx, sm.proxyRTT.Seconds())
					srv = append(srv, sm.serverRTT.Seconds())
				}
				for _, l := range [][]float64{lat, prx, srv} {
					slices.Sort(l)
				}
				stats = append(stats, classStat{Class: class, Requests: len(g), Share: float64(len(g)) / float64(len(in)),
					P50: sim.Percentile(lat, 50), P96: sim.Percentile(lat, 96),
					ProxyRTTP50: sim.Percentile(prx, 50), ServerRTTP50: sim.Percentile(srv, 50)})
				if tail > 0 {
					stats[len(stats)-1].TailShare = float64(slow) / float64(tail)
				}
			}
			sort.Slice(stats, func(i, j int) bool {
				if stats[i].Requests != stats[j].Requests {
					return stats[i].Requests > stats[j].Requests
				}
				return stats[i].Class < stats[j].Class
			})
			out[scope][dim] = stats
		}
	}
	return out
}

// printBreakdown prints a run's breakdown; the combined "why" dimension
// only its largest classes.
func printBreakdown(r *runResult, region string) {
	for _, scope := range []string{"all", "region"} {
		name := "all clients"
		if scope == "region" {
			name = region
		}
		fmt.Printf("  %s, %s, %s:\n", r.Config, r.Variant, name)
		for _, dim := range dimensions {
			stats := r.Breakdown[scope][dim]
			if dim == "why" && len(stats) > 12 {
				stats = stats[:12]
			}
			for _, c := range stats {
				fmt.Printf("    %-7s %-88s %5.1f%%  p50 %.3f  p96 %.3f  proxy RTT p50 %.4f  server RTT p50 %.4f  of the tail %3.0f%%\n",
					dim, c.Class, 100*c.Share, c.P50, c.P96, c.ProxyRTTP50, c.ServerRTTP50, 100*c.TailShare)
			}
		}
	}
}
