package dhtmetrics

import (
	"net/netip"
	"strings"
	"testing"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coraldht/memnet"
	"github.com/prometheus/client_golang/prometheus"
)

type oneNode struct {
	d    *Descs
	n    *coraldht.Node
	name string
}

func (c oneNode) Describe(ch chan<- *prometheus.Desc) { c.d.Describe(ch) }
func (c oneNode) Collect(ch chan<- prometheus.Metric) { c.d.Collect(ch, c.name, c.n, true) }

// TestCollect: a real node's counters come out under the namespace, with
// the node label, and the exported set passes the registry's consistency
// checks (every metric described, labels as declared).
func TestCollect(t *testing.T) {
	net := memnet.New(memnet.Config{})
	var nodes []*coraldht.Node
	key, err := coraldht.NewKey(coraldht.GenerateKey())
	if err != nil {
		t.Fatal(err)
	}
	for i := range 2 {
		tr, err := net.Listen(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 0, 0, byte(i + 1)}), 4000))
		if err != nil {
			t.Fatal(err)
		}
		cfg := coraldht.DefaultConfig()
		cfg.Key = key
		n, err := coraldht.NewNode(cfg, tr)
		if err != nil {
			t.Fatal(err)
		}
		defer n.Close()
		nodes = append(nodes, n)
	}
	if _, err := nodes[0].Ping(t.Context(), nodes[1].Addr()); err != nil {
		t.Fatal(err)
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(oneNode{d: New("test", "coral"), n: nodes[0], name: "n0"})
	fams, err := reg.Gather() // the pedantic registry checks descriptions and labels
	if err != nil {
		t.Fatal(err)
	}
	series := 0
	var joined float64 = -1
	for _, f := range fams {
		if !strings.HasPrefix(f.GetName(), "test_coral_dht_") {
			t.Errorf("metric %s outside the namespace", f.GetName())
		}
		for _, m := range f.GetMetric() {
			series++
			node := ""
			for _, l := range m.GetLabel() {
				if l.GetName() == "node" {
					node = l.GetValue()
				}
			}
			if node != "n0" {
				t.Errorf("%s: labels %v, want node=n0", f.GetName(), m.GetLabel())
			}
			if f.GetName() == "test_coral_dht_joined" {
				joined = m.GetGauge().GetValue()
			}
		}
	}
	if joined != 1 {
		t.Errorf("joined = %v, want 1", joined)
	}
	if series < 40 {
		t.Errorf("%d series, want the full set", series)
	}
	// The ping went out as a request and came back as a reply.
	var out, in float64
	for _, f := range fams {
		if f.GetName() != "test_coral_dht_messages_total" {
			continue
		}
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			if l["type"] == "ping" && l["direction"] == "out" && l["kind"] == "request" {
				out = m.GetCounter().GetValue()
			}
			if l["type"] == "ping" && l["direction"] == "in" && l["kind"] == "reply" {
				in = m.GetCounter().GetValue()
			}
		}
	}
	if out < 1 || in < 1 {
		t.Errorf("ping requests out %v, replies in %v; want at least 1 each", out, in)
	}
	// The reply came in under the one installed key, which is primary;
	// the key label is its fingerprint, never the key.
	keySeries := map[string]float64{}
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			for _, p := range m.GetLabel() {
				if p.GetName() != "key" {
					continue
				}
				v := m.GetGauge().GetValue() + m.GetCounter().GetValue()
				keySeries[strings.TrimPrefix(f.GetName(), "test_coral_dht_")+" "+p.GetValue()] = v
			}
		}
	}
	fp := key.Fingerprint()
	if keySeries["network_key_datagrams_total "+fp] < 1 || keySeries["network_key_primary "+fp] != 1 ||
		keySeries["network_key_datagrams_total none"] != 0 || len(keySeries) != 3 {
		t.Errorf("key series %v; want datagrams under %s, it primary, and 0 for none", keySeries, fp)
	}
}

// TestSuspectsExported: the suspect prefixes a node keeps are exported
// ten at most, whatever the number of sources, each with its events;
// abuse_events_total counts them all.
func TestSuspectsExported(t *testing.T) {
	net := memnet.New(memnet.Config{})
	key, err := coraldht.NewKey(coraldht.GenerateKey())
	if err != nil {
		t.Fatal(err)
	}
	start := func(listen, advertise netip.AddrPort) *coraldht.Node {
		t.Helper()
		tr, err := net.Listen(listen)
		if err != nil {
			t.Fatal(err)
		}
		cfg := coraldht.DefaultConfig()
		cfg.Key, cfg.Advertise = key, advertise
		n, err := coraldht.NewNode(cfg, tr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	target := start(netip.MustParseAddrPort("10.0.0.1:4000"), netip.AddrPort{})
	// Fifteen nodes that advertise an address other than the one they
	// send from (a NAT does that, as do members claiming others'
	// addresses): each a claim mismatch from its own /24.
	for i := range 15 {
		n := start(netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 1, byte(i), 1}), 4000),
			netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 2, byte(i), 1}), 4000))
		_, _ = n.Ping(t.Context(), target.Addr())
	}
	reg := prometheus.NewPedanticRegistry()
	reg.MustRegister(oneNode{d: New("test", "coral"), n: target, name: "n0"})
	fams, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	prefixes := map[string]bool{}
	var mismatches float64
	for _, f := range fams {
		for _, m := range f.GetMetric() {
			l := map[string]string{}
			for _, p := range m.GetLabel() {
				l[p.GetName()] = p.GetValue()
			}
			switch f.GetName() {
			case "test_coral_dht_suspect_events_total":
				prefixes[l["prefix"]] = true
			case "test_coral_dht_abuse_events_total":
				if l["event"] == "claim_mismatch" {
					mismatches = m.GetCounter().GetValue()
				}
			}
		}
	}
	if len(prefixes) != topSuspects || mismatches < 15 {
		t.Fatalf("%d suspect prefixes exported (want %d), %v claim mismatches in all (want one or two per node: 15 at least)", len(prefixes), topSuspects, mismatches)
	}
}
