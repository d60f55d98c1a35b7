package main

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/coralcdn/coral/eval/internal/topology"
)

// testWorld places a node network at sites 0 and 1 and a client network
// at site 0.
func testWorld(t *testing.T, rp routeParams) (w *world, node0, node1, client netip.Addr) {
	t.Helper()
	m := topology.Synthetic(250, 1)
	w = newWorld(m, rp, 1)
	// Two sites in different regions.
	far := 1
	for far < m.Len() && w.region[far] == w.region[0] {
		far++
	}
	node0 = w.place(siteAddr(10, 0, 1), 0)
	node1 = w.place(siteAddr(10, far, 1), far)
	client = w.place(siteAddr(11, 0, 101), 0)
	return w, node0, node1, client
}

func quiet() routeParams {
	rp := defaultRouteParams()
	rp.Silent, rp.ClientEcho = 0, 1
	return rp
}

func TestPathShape(t *testing.T) {
	w, node0, node1, _ := testWorld(t, quiet())
	p := w.path(node0, node1)
	if len(p) < 9 {
		t.Fatalf("path between regions has %d routers: %v", len(p), p)
	}
	if p[0].addr != gatewayOf(node0) || p[len(p)-1].addr != gatewayOf(node1) || p[1].kind != kindAgg || p[len(p)-2].kind != kindAgg {
		t.Errorf("path does not start and end with the networks' gateways and aggregation routers: %v", p)
	}
	total := w.rtt(node0, node1)
	for i, h := range p {
		if h.rtt < 0 || h.rtt > total || (i > 0 && h.rtt < p[i-1].rtt) {
			t.Errorf("hop %d (%v) at %v: RTTs must grow toward the end's %v", i, h.addr, h.rtt, total)
		}
	}
	// The way back crosses the same gateways and aggregation routers and
	// the same transit routers, in reverse.
	back := w.path(node1, node0)
	var there, again []netip.Addr
	for _, h := range p {
		if h.kind == kindTransit {
			there = append(there, h.addr)
		}
	}
	for _, h := range back {
		if h.kind == kindTransit {
			again = append(again, h.addr)
		}
	}
	slices.Reverse(again)
	if len(there) == 0 || !slices.Equal(there, again) {
		t.Errorf("transit there %v, back (reversed) %v", there, again)
	}
	if back[0].addr != p[len(p)-1].addr || back[1].addr != p[len(p)-2].addr {
		t.Errorf("the way back does not leave through the far gateway and aggregation router: %v", back)
	}
	// One /24: no routers at all.
	if p := w.path(node0, siteAddr(10, 0, 2)); len(p) != 0 {
		t.Errorf("same /24: %v", p)
	}
}

func TestTraceOutcomes(t *testing.T) {
	w, node0, node1, _ := testWorld(t, quiet())
	now := time.Now()
	r := w.trace(node0, node1, 32, now)
	if !r.complete || r.took >= w.rp.TraceTimeout || r.took < w.rtt(node0, node1) || len(r.routers) != len(w.path(node0, node1)) {
		t.Errorf("trace through answering routers: %+v", r)
	}

	// A client network that does not answer echo leaves the trace waiting
	// for its timeout, with every router heard.
	rp := quiet()
	rp.ClientEcho = 0
	w, node0, _, client := testWorld(t, rp)
	r = w.trace(node0, client, 32, now)
	if r.complete || !r.noEcho || r.took != rp.TraceTimeout || r.outcome() != "timed out: no echo" {
		t.Errorf("trace toward a host that ignores echo: %+v", r)
	}
	if got := w.trace(node0, siteAddr(10, 0, 201), 32, now); !got.complete {
		t.Errorf("a resolver on a node's host answers echo: %+v", got)
	}

	// Every router silent: nothing heard, the timeout.
	rp = quiet()
	rp.Silent = 1
	w, node0, node1, _ = testWorld(t, rp)
	r = w.trace(node0, node1, 32, now)
	if len(r.routers) != 0 || r.took != rp.TraceTimeout || r.outcome() != "timed out: silent router" {
		t.Errorf("trace through silent routers: %+v", r)
	}

	// A realistic share of silent routers: some traces complete, most
	// paths across regions hold one.
	w, _, _, _ = testWorld(t, defaultRouteParams())
	complete, n := 0, 0
	for s := 0; s < 200; s += 2 {
		a := w.place(siteAddr(10, s, 1), s)
		b := w.place(siteAddr(10, s+1, 1), s+1)
		if w.trace(a, b, 32, now).complete {
			complete++
		}
		n++
	}
	if complete == 0 || complete == n {
		t.Errorf("%d of %d traces complete with %.0f%% silent routers", complete, n, 100*defaultRouteParams().Silent)
	}
}

func TestICMPRateLimit(t *testing.T) {
	w, node0, node1, _ := testWorld(t, quiet())
	now := time.Now()
	heard := []int{}
	for range 10 {
		heard = append(heard, len(w.trace(node0, node1, 32, now).routers))
	}
	// The burst of 6 per source, then nothing from the same routers
	// within the same instant.
	if heard[0] == 0 || heard[5] != heard[0] || heard[6] != 0 {
		t.Errorf("routers heard by 10 traces at once from one source: %v", heard)
	}
	// A second later each router has one token for this source again.
	if got := len(w.trace(node0, node1, 32, now.Add(time.Second)).routers); got != heard[0] {
		t.Errorf("a second later: %d routers heard, want %d", got, heard[0])
	}
	// Another source has tokens of its own.
	other := w.place(siteAddr(10, 0, 2), 0)
	if got := w.trace(other, node1, 32, now); !got.complete {
		t.Errorf("another source, same instant: %+v", got)
	}
	var b bucket
	for i := range 50 {
		if !b.take(now, 50, 1000) {
			t.Fatalf("global bucket refused the %d-th of a burst of 50", i+1)
		}
	}
	if b.take(now, 50, 1000) || !b.take(now.Add(time.Millisecond), 50, 1000) {
		t.Error("global bucket: not empty after its burst, or not refilled after a millisecond at 1000/s")
	}
}

// TestHintsFromTraces: a node publishes the routers its own trace heard,
// nothing it was told; a client network on another ISP shares with the
// nodes' hints only what lies beyond both PoPs.
func TestHintsFromTraces(t *testing.T) {
	w, node0, node1, _ := testWorld(t, quiet())
	hints, r := w.startupHints(node0, node1, time.Now())
	if len(r.routers) != w.rp.HintHops {
		t.Fatalf("start-up trace heard %v, want the first %d routers", r.routers, w.rp.HintHops)
	}
	p := w.path(node0, node1)
	for _, h := range p[:w.rp.HintHops] {
		if !slices.Contains(hints, netip.PrefixFrom(h.addr, 32)) || !slices.Contains(hints, network(h.addr)) {
			t.Errorf("router %v (%s) heard but not published: %v", h.addr, h.kind, hints)
		}
	}
	for _, h := range p[w.rp.HintHops:] {
		if slices.Contains(hints, netip.PrefixFrom(h.addr, 32)) {
			t.Errorf("router %v beyond the start-up trace's hops published", h.addr)
		}
	}
	// A client network at site 0 on another ISP than the nodes': the
	// world's seed draws the ISPs; take the first seed that does.
	other := w.place(siteAddr(11, 0, 101), 0)
	for w.ispOf(other) == w.ispOf(node0) {
		w.seed++
	}
	hints, _ = w.startupHints(node0, node1, time.Now())
	tr := w.trace(node1, other, 32, time.Now())
	for _, a := range tr.routers[max(0, len(tr.routers)-3):] {
		if slices.Contains(hints, netip.PrefixFrom(a, 32)) {
			t.Errorf("client on another ISP: its gateway, aggregation or border router %v is among the nodes' hints", a)
		}
	}
}
