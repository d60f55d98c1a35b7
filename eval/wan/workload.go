//go:build linux

package main

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"slices"
	"sort"
	"sync"
	"time"

	"github.com/coralcdn/coral/internal/lab/wan"
	"github.com/coralcdn/coral/internal/lab/wan/fleet"
)

// request is one client request: its page's resolution and its fetch.
type request struct {
	Client    string  `json:"client"`
	Site      int     `json:"site"`
	Kind      string  `json:"kind"` // beside a proxy, client LAN, site without proxy
	At        float64 `json:"t"`    // seconds since the workload began, when the page began
	File      int     `json:"file"`
	DNSMs     float64 `json:"dns_ms"`
	TTL       int     `json:"answer_ttl_s"`
	Proxy     string  `json:"proxy,omitempty"`
	ProxySite int     `json:"proxy_site"`
	// Answer is the resolver's answer, in its order (the client uses the
	// first address, as a browser does); SiteInAnswer whether it named a
	// proxy at the client's site.
	Answer       []string `json:"answer,omitempty"`
	SiteInAnswer bool     `json:"site_in_answer"`
	// ProxyRTTMs is the lab's RTT between the client's site and the
	// proxy's (0 at the client's own site).
	ProxyRTTMs float64 `json:"proxy_rtt_ms"`
	FetchMs    float64 `json:"fetch_ms"`
	// LatencyMs is the page's resolution plus this request's fetch.
	LatencyMs float64 `json:"latency_ms"`
	Source    string  `json:"source"` // local, collapsed, peer-l<level>, origin, other
	Via       string  `json:"via,omitempty"`
	OK        bool    `json:"ok"`
	Err       string  `json:"error,omitempty"`
}

// Client kinds.
const (
	kindBeside   = "beside a proxy"
	kindLAN      = "client LAN"
	kindNoProxy  = "site without proxy"
	perPage      = 3
	fetchTimeout = 30 * time.Second
)

// workload is how clients load pages.
type workload struct {
	Files    int           `json:"files"`
	Size     int           `json:"file_bytes"`
	Duration time.Duration `json:"duration_ns"`
	// Jitter: clients start uniformly over it. Think: mean pause between
	// a client's pages, exponential (Exp) as eval/endtoend's clients, or
	// uniform in 0.5–1.5× (as eval/flashcrowd's).
	Jitter time.Duration `json:"jitter_ns"`
	Think  time.Duration `json:"think_ns"`
	Exp    bool          `json:"exponential_think"`
	Seed   uint64        `json:"seed"`
}

func clientKind(f *fleet.Fleet, c *fleet.Client) string {
	hasNode := false
	for _, nd := range f.Nodes {
		hasNode = hasNode || nd.Site == c.Site
	}
	switch {
	case !hasNode:
		return kindNoProxy
	case c.Beside:
		return kindBeside
	}
	return kindLAN
}

// runWorkload runs every client: each picks pages at random (Files/3
// pages of 3 files), resolves the origin's Coralized name through its
// site's resolver for each page, and fetches the page's files in parallel
// over fresh connections from the first address of the answer. Every body
// is checked against the origin's.
func runWorkload(ctx context.Context, f *fleet.Fleet, l *wan.Lab, wl workload) []request {
	bodies := make([][]byte, wl.Files)
	for i := range bodies {
		bodies[i] = body(i, wl.Size)
	}
	began := time.Now()
	end := began.Add(wl.Duration)
	var mu sync.Mutex
	var out []request
	var wg sync.WaitGroup
	for ci, c := range f.Clients {
		kind := clientKind(f, c)
		rng := rand.New(rand.NewPCG(wl.Seed, uint64(ci)))
		hc := c.HTTPClient(fetchTimeout)
		wg.Go(func() {
			if !sleep(ctx, time.Duration(rng.Int64N(int64(wl.Jitter)+1))) {
				return
			}
			for time.Now().Before(end) && ctx.Err() == nil {
				page := rng.IntN(wl.Files / perPage)
				at := time.Since(began).Seconds()
				addrs, ttl, dns, err := c.Lookup(ctx, f.CoralHost())
				base := request{Client: c.Addr.String(), Site: c.Site, Kind: kind, At: at, DNSMs: ms(dns), TTL: int(ttl.Seconds()), ProxySite: -1}
				var recs []request
				if err != nil {
					for k := range perPage {
						r := base
						r.File, r.Err, r.LatencyMs = page*perPage+k, "dns: "+err.Error(), ms(dns)
						recs = append(recs, r)
					}
				} else {
					for _, a := range addrs {
						base.Answer = append(base.Answer, a.String())
						base.SiteInAnswer = base.SiteInAnswer || wan.SiteOf(a) == c.Site
					}
					recs = fetchPage(ctx, hc, f, l, addrs[0], page, base, bodies)
				}
				mu.Lock()
				out = append(out, recs...)
				mu.Unlock()
				think := time.Duration(float64(wl.Think) * (0.5 + rng.Float64()))
				if wl.Exp {
					think = time.Duration(rng.ExpFloat64() * float64(wl.Think))
				}
				if !sleep(ctx, think) {
					return
				}
			}
		})
	}
	wg.Wait()
	sort.Slice(out, func(i, j int) bool { return out[i].At < out[j].At })
	return out
}

func fetchPage(ctx context.Context, hc *http.Client, f *fleet.Fleet, l *wan.Lab, proxy netip.Addr, page int, base request, bodies [][]byte) []request {
	recs := make([]request, perPage)
	var wg sync.WaitGroup
	for k := range perPage {
		wg.Go(func() {
			r := base
			r.File = page*perPage + k
			r.Proxy = proxy.String()
			r.ProxySite = wan.SiteOf(proxy)
			if r.ProxySite >= 0 {
				r.ProxyRTTMs = ms(l.RTT(base.Site, r.ProxySite))
			}
			got, err := fleet.Get(ctx, hc, proxy, f.CoralHost(), fmt.Sprintf("/f%d", r.File))
			if got != nil {
				r.FetchMs = ms(got.Took)
				r.Source, r.Via = fleet.Source(got.CacheStatus)
			}
			r.LatencyMs = r.DNSMs + r.FetchMs
			switch {
			case err != nil:
				r.Err = err.Error()
			case got.Status != 200:
				r.Err = fmt.Sprintf("status %d", got.Status)
			case !bytes.Equal(got.Body, bodies[r.File]):
				r.Err = fmt.Sprintf("body of %d bytes differs from the origin's", len(got.Body))
			default:
				r.OK = true
			}
			recs[k] = r
		})
	}
	wg.Wait()
	return recs
}

func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// latencies are the latencies (ms) of the ok requests that keep says.
func latencies(rs []request, keep func(request) bool) []float64 {
	var out []float64
	for _, r := range rs {
		if r.OK && keep(r) {
			out = append(out, r.LatencyMs)
		}
	}
	slices.Sort(out)
	return out
}

// pct is the p-th percentile (nearest rank) of sorted values; NaN-free:
// 0 for none.
func pct(sorted []float64, p float64) float64 {
	if len(sorted) == 0 {
		return 0
	}
	i := int(p/100*float64(len(sorted))+0.999999) - 1
	return sorted[min(max(i, 0), len(sorted)-1)]
}
