package coral

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coredns/caddy"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"

	"github.com/coralcdn/coral/coraldht/host"
)

func parseTest(t *testing.T, input string) *config {
	t.Helper()
	cfg, err := parse(caddy.NewTestController("dns", input))
	if err != nil {
		t.Fatal(err)
	}
	return cfg
}

// closedNode reports whether n is closed, without waiting for the network.
func closedNode(n *coraldht.Node) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := n.Ping(ctx, netip.MustParseAddrPort("127.0.3.1:4101"))
	return errors.Is(err, coraldht.ErrClosed)
}

// TestRegistryAcrossReloads: instances with the same node settings share
// the node; changed settings restart it on the same socket, keeping the
// RTTs, the name servers, the cookie secret and the live set; the last
// release closes it.
func TestRegistryAcrossReloads(t *testing.T) {
	a := parseTest(t, "coral nyucd.test {\nlisten 127.0.3.1:4100\n}")
	b := parseTest(t, "coral nyucd.test {\nlisten 127.0.3.1:4100\nanswers 3\n}") // same node settings
	c := parseTest(t, "coral nyucd.test {\nlisten 127.0.3.1:4100\nlevels 50ms\n}")

	e1, err := acquireNode(a)
	if err != nil {
		t.Fatal(err)
	}
	e1.rtts.entries[netip.MustParsePrefix("192.0.2.0/24")] = measured[time.Duration]{v: time.Millisecond, ok: true, at: time.Now()}
	seen := &liveSet{}
	e1.live.Store(seen)
	e2, err := acquireNode(b)
	if err != nil {
		t.Fatal(err)
	}
	if e1.node() != e2.node() || e1.nodeState != e2.nodeState {
		t.Fatalf("same settings: nodes %p %p; want one shared node", e1.node(), e2.node())
	}
	first := e1.node()
	releaseNode(e1)
	if closedNode(first) {
		t.Fatal("node closed while still referenced")
	}
	e3, err := acquireNode(c) // a reload that changes the levels
	if err != nil {
		t.Fatalf("changed settings on the same address: %v", err)
	}
	if e3.node() == first || len(e3.node().Levels()) != 2 || e3.node().Addr() != first.Addr() {
		t.Fatalf("changed settings kept the old node")
	}
	if e2.node() != e3.node() {
		t.Error("the older instance does not follow the restarted node")
	}
	if e3.rtts != e1.rtts {
		t.Errorf("RTT cache lost across the restart")
	}
	if e3.names != e1.names || e1.names == nil {
		t.Errorf("known name servers lost across the restart")
	}
	if e3.cookie != e1.cookie || e3.live.Load() != seen {
		t.Errorf("cookie secret or live set lost across the restart")
	}
	if !closedNode(first) {
		t.Error("replaced node still open")
	}
	if inst := runningOn("127.0.3.1:4100"); inst == nil || inst.Node() != e3.node() {
		t.Error("the metrics see the replaced node")
	}
	releaseNode(e2) // the old instance stopping
	if closedNode(e3.node()) {
		t.Fatal("the old instance's release closed the restarted node")
	}
	last := e3.node()
	releaseNode(e3)
	if runningOn("127.0.3.1:4100") != nil || !closedNode(last) {
		t.Error("entry kept after its last release")
	}
}

// TestStartStop runs the plugin on a real loopback node: it becomes ready
// after joining (a node without bootstrap is the network) and the first
// sweep, answers with its own address as name server, and stops cleanly.
func TestStartStop(t *testing.T) {
	cfg := parseTest(t, "coral nyucd.test {\nlisten 127.0.3.2:4100\nalias nyud.test\ncheck_interval 200ms\nlive_within 1s\n}")
	cr := newCoral(cfg, Options{})
	if err := cr.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(10 * time.Second)
	for !cr.Ready() {
		if time.Now().After(deadline) {
			t.Fatal("not ready within 10s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	m := new(dns.Msg)
	m.SetQuestion("l0.nyucd.test.", dns.TypeNS)
	// Over UDP, the first query from a new /24 needs a probe its source
	// has not proven it may start: an empty truncated response. Over TCP
	// (what the resolver does next) the answer.
	rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: "127.0.0.1"})
	if _, err := cr.ServeDNS(context.Background(), rec, m); err != nil {
		t.Fatal(err)
	}
	if !rec.Msg.Truncated || len(rec.Msg.Ns) != 0 {
		t.Errorf("first UDP query from a new source: %v, want an empty truncated response", rec.Msg)
	}
	rec = dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: "127.0.0.1", TCP: true})
	if _, err := cr.ServeDNS(context.Background(), rec, m); err != nil {
		t.Fatal(err)
	}
	if len(rec.Msg.Ns) != 1 || rec.Msg.Ns[0].(*dns.NS).Ns != "ns-127-0-3-2.nyucd.test." {
		t.Errorf("referral %v", rec.Msg)
	}
	// Its own ns-… name is answered; that of an address that is no Coral
	// name server is not.
	for _, tc := range []struct {
		name  string
		rcode int
	}{{"ns-127-0-3-2.nyucd.test.", dns.RcodeSuccess}, {"ns-127-0-0-1.nyucd.test.", dns.RcodeNameError}} {
		m.SetQuestion(tc.name, dns.TypeA)
		rec = dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: "127.0.0.1", TCP: true})
		cr.ServeDNS(context.Background(), rec, m)
		if rec.Msg.Rcode != tc.rcode {
			t.Errorf("%s: %s, want %s", tc.name, dns.RcodeToString[rec.Msg.Rcode], dns.RcodeToString[tc.rcode])
		}
	}
	// No proxy anywhere: NODATA with the short TTL, not an error.
	m.SetQuestion("a.example.nyud.test.", dns.TypeA)
	rec = dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: "127.0.0.1", TCP: true})
	cr.ServeDNS(context.Background(), rec, m)
	if rec.Msg.Rcode != dns.RcodeSuccess || len(rec.Msg.Answer) != 2 || len(rec.Msg.Ns) != 1 || rec.Msg.Ns[0].Header().Ttl != uint32(defaultRetryTTL.Seconds()) {
		t.Errorf("no proxies: %v", rec.Msg)
	}
	if err := cr.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := cr.Stop(); err != nil {
		t.Errorf("second stop: %v", err)
	}
}

// runningOn is the instance running on listen, as the metrics see it; nil
// if none.
func runningOn(listen string) *host.Instance {
	for _, inst := range host.Running() {
		if inst.Listen().String() == listen {
			return inst
		}
	}
	return nil
}
