package coral

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coredns/coredns/core/dnsserver"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// The regression tests of "coral DNS plugin on hostile input": requests
// the zones have no answer for, and resolvers that are not what they seem.
// Each request goes to the plugin directly and through CoreDNS's own
// server (dnsserver.Server, as in bin/coredns), which screens some of them
// itself, with and without a plugin (chaos, forward) that makes it let
// other classes through.

// chaosStub stands for the chaos plugin: its name alone makes the server
// pass queries of every class to the plugins.
type chaosStub struct{ next plugin.Handler }

func (s chaosStub) Name() string { return "chaos" }

func (s chaosStub) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	return plugin.NextOrFailure(s.Name(), s.next, ctx, w, r)
}

// servePath sends r to the handler one way and returns what was written.
type servePath struct {
	name  string
	serve func(w dns.ResponseWriter, r *dns.Msg)
}

// servePaths: the plugin directly, and in CoreDNS's server with and
// without the chaos plugin in front of it.
func servePaths(t *testing.T, c *Coral) []servePath {
	t.Helper()
	server := func(chaos bool) func(dns.ResponseWriter, *dns.Msg) {
		var cfgs []*dnsserver.Config
		for _, zone := range []string{"nyucd.test.", "nyud.test."} {
			cfg := &dnsserver.Config{Zone: zone, Transport: "dns", ListenHosts: []string{"127.0.0.1"}, Port: "53"}
			if chaos {
				cfg.AddPlugin(func(next plugin.Handler) plugin.Handler { return chaosStub{next} })
			}
			cfg.AddPlugin(func(plugin.Handler) plugin.Handler { return c })
			cfgs = append(cfgs, cfg)
		}
		s, err := dnsserver.NewServer("dns://127.0.0.1:53", cfgs)
		if err != nil {
			t.Fatal(err)
		}
		return func(w dns.ResponseWriter, r *dns.Msg) { s.ServeDNS(context.Background(), w, r) }
	}
	return []servePath{
		{"plugin", func(w dns.ResponseWriter, r *dns.Msg) { c.ServeDNS(context.Background(), w, r) }},
		{"server", server(false)},
		{"server with chaos", server(true)},
	}
}

type hostileCase struct {
	name string
	tcp  bool
	mod  func(*dns.Msg)
	aa   bool
	test.Case
	// server, when set, is what CoreDNS's server answers before the plugin
	// sees the request.
	server *test.Case
}

func hostileCases() []hostileCase {
	class := func(c uint16) func(*dns.Msg) { return func(m *dns.Msg) { m.Question[0].Qclass = c } }
	opcode := func(o int) func(*dns.Msg) { return func(m *dns.Msg) { m.Opcode = o } }
	ednsVersion := func(v uint8) func(*dns.Msg) {
		return func(m *dns.Msg) {
			m.SetEdns0(1232, false)
			m.IsEdns0().SetVersion(v)
		}
	}
	ixfr := func(m *dns.Msg) { m.Ns = []dns.RR{soa("nyucd.test.", "30")} } // RFC 1995 §3: the client's SOA
	return []hostileCase{
		// Other classes: the zones exist in IN only.
		{name: "CH SOA of the coral zone", mod: class(dns.ClassCHAOS),
			Case: test.Case{Qname: "nyucd.test.", Qtype: dns.TypeSOA, Rcode: dns.RcodeRefused}},
		{name: "CH TXT of a Coralized name", mod: class(dns.ClassCHAOS),
			Case: test.Case{Qname: "www.example.com.nyud.test.", Qtype: dns.TypeTXT, Rcode: dns.RcodeRefused}},
		{name: "HS A of a proxy name", mod: class(dns.ClassHESIOD),
			Case: test.Case{Qname: full2, Qtype: dns.TypeA, Rcode: dns.RcodeRefused}},
		{name: "class ANY", mod: class(dns.ClassANY),
			Case: test.Case{Qname: "ns-127-0-0-2.nyucd.test.", Qtype: dns.TypeA, Rcode: dns.RcodeRefused}},

		// Opcodes other than QUERY. CoreDNS's server passes NOTIFY on.
		{name: "NOTIFY for the coral zone", mod: opcode(dns.OpcodeNotify),
			Case: test.Case{Qname: "nyucd.test.", Qtype: dns.TypeSOA, Rcode: dns.RcodeNotImplemented}},
		{name: "NOTIFY for a proxy name", mod: opcode(dns.OpcodeNotify),
			Case: test.Case{Qname: full2, Qtype: dns.TypeA, Rcode: dns.RcodeNotImplemented}},
		{name: "UPDATE", mod: opcode(dns.OpcodeUpdate),
			Case: test.Case{Qname: "nyucd.test.", Qtype: dns.TypeSOA, Rcode: dns.RcodeNotImplemented}},
		{name: "IQUERY", mod: opcode(dns.OpcodeIQuery),
			Case: test.Case{Qname: full2, Qtype: dns.TypeA, Rcode: dns.RcodeNotImplemented}},

		// EDNS versions this server does not speak: BADVERS, with an OPT of
		// version 0 and this server's size. CoreDNS's server answers these
		// itself, with an OPT of UDP size 0.
		{name: "EDNS version 1", mod: ednsVersion(1),
			Case:   test.Case{Qname: full2, Qtype: dns.TypeA, Rcode: dns.RcodeBadVers, Extra: []dns.RR{test.OPT(1232, false)}},
			server: &test.Case{Rcode: dns.RcodeBadVers, Extra: []dns.RR{test.OPT(0, false)}}},
		{name: "EDNS version 255", mod: ednsVersion(255),
			Case:   test.Case{Qname: "nyucd.test.", Qtype: dns.TypeNS, Rcode: dns.RcodeBadVers, Extra: []dns.RR{test.OPT(1232, false)}},
			server: &test.Case{Rcode: dns.RcodeBadVers, Extra: []dns.RR{test.OPT(0, false)}}},

		// Zone transfers: nothing to transfer.
		{name: "AXFR over UDP",
			Case: test.Case{Qname: "nyucd.test.", Qtype: dns.TypeAXFR, Rcode: dns.RcodeNotImplemented}},
		{name: "IXFR over UDP", mod: ixfr,
			Case: test.Case{Qname: "nyucd.test.", Qtype: dns.TypeIXFR, Rcode: dns.RcodeNotImplemented}},
		{name: "AXFR over TCP", tcp: true,
			Case: test.Case{Qname: "nyucd.test.", Qtype: dns.TypeAXFR, Rcode: dns.RcodeRefused}},
		{name: "IXFR over TCP", tcp: true, mod: ixfr,
			Case: test.Case{Qname: "nyud.test.", Qtype: dns.TypeIXFR, Rcode: dns.RcodeRefused}},
		{name: "AXFR of a level zone over TCP", tcp: true,
			Case: test.Case{Qname: "l1.l0.nyucd.test.", Qtype: dns.TypeAXFR, Rcode: dns.RcodeRefused}},

		// ns-<ip> names exist for Coral name servers only.
		{name: "ns host of this server", aa: true,
			Case: test.Case{Qname: "ns-127-0-0-2.nyucd.test.", Qtype: dns.TypeA,
				Answer: []dns.RR{test.A("ns-127-0-0-2.nyucd.test. 3600 IN A 127.0.0.2")}}},
		{name: "ns host of loopback", aa: true,
			Case: test.Case{Qname: "ns-127-0-0-1.nyucd.test.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError,
				Ns: []dns.RR{soa("nyucd.test.", "30")}}},
		{name: "ns host of a private address", aa: true,
			Case: test.Case{Qname: "ns-10-2-0-1.nyucd.test.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError,
				Ns: []dns.RR{soa("nyucd.test.", "30")}}},
		{name: "ns host of a proxy", aa: true, // a member, but no name server
			Case: test.Case{Qname: "ns-127-0-2-80.nyucd.test.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError,
				Ns: []dns.RR{soa("nyucd.test.", "30")}}},
		{name: "ns host of a stranger, IPv6", aa: true,
			Case: test.Case{Qname: "ns-20010db8000000000000000000000099.nyucd.test.", Qtype: dns.TypeAAAA, Rcode: dns.RcodeNameError,
				Ns: []dns.RR{soa("nyucd.test.", "30")}}},
		{name: "ns host of a stranger, other type", aa: true,
			Case: test.Case{Qname: "ns-192-0-2-1.nyucd.test.", Qtype: dns.TypeTXT, Rcode: dns.RcodeNameError,
				Ns: []dns.RR{soa("nyucd.test.", "30")}}},
	}
}

func TestHostileRequests(t *testing.T) {
	c := testCoral(t, testWorld())
	for _, path := range servePaths(t, c) {
		for _, tc := range hostileCases() {
			t.Run(path.name+"/"+tc.name, func(t *testing.T) {
				m := tc.Msg()
				if tc.mod != nil {
					tc.mod(m)
				}
				rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: "10.2.0.1", TCP: tc.tcp})
				path.serve(rec, m)
				if rec.Msg == nil {
					t.Fatal("no response written")
				}
				want := tc.Case
				if tc.server != nil && path.name != "plugin" {
					want.Rcode, want.Extra = tc.server.Rcode, tc.server.Extra
				}
				r := rec.Msg
				if r.Authoritative != tc.aa {
					t.Errorf("AA = %v, want %v", r.Authoritative, tc.aa)
				}
				if r.Opcode != m.Opcode || len(r.Question) != 1 || r.Question[0] != m.Question[0] || r.Id != m.Id || !r.Response {
					t.Errorf("header or question not echoed: %v", r)
				}
				// What goes on the wire says the same.
				wire, err := r.Pack()
				if err != nil {
					t.Fatalf("response does not pack: %v", err)
				}
				back := new(dns.Msg)
				if err := back.Unpack(wire); err != nil {
					t.Fatalf("response does not unpack: %v", err)
				}
				if back.Rcode != want.Rcode {
					t.Errorf("rcode on the wire %s, want %s", rcodeName(back.Rcode), rcodeName(want.Rcode))
				}
				if err := test.SortAndCheck(r, want); err != nil {
					t.Errorf("%v\n%v", err, r)
				}
			})
		}
	}
}

// bigWorld has enough IPv6 proxies and name servers at level 0 for an
// answer of 16 proxies and 13 name servers, which is more than 1232 octets.
func bigWorld() *fakeNodes {
	w := testWorld()
	now := time.Now()
	for i := range 16 {
		w.members[0] = append(w.members[0], member(fmt.Sprintf("2001:db8:80::%x", i+1), coraldht.ServiceHTTP, now))
	}
	for i := range 13 {
		w.members[0] = append(w.members[0], member(fmt.Sprintf("2001:db8:53::%x", i+1), coraldht.ServiceDNS, now))
	}
	return w
}

// TestEDNSBufferSize: a response advertises this server's own UDP size
// (1232), whatever the client's, and is truncated to what the client can
// take: 512 octets without EDNS, over UDP the smaller of the client's size
// and 1232, over TCP all of it.
func TestEDNSBufferSize(t *testing.T) {
	c := testCoral(t, bigWorld())
	c.set.answers, c.set.nameservers = 16, 13
	for _, path := range servePaths(t, c) {
		for _, tc := range []struct {
			name  string
			size  uint16 // 0: no EDNS
			tcp   bool
			limit int // the most octets the response may have
			tc    bool
		}{
			{"no EDNS over UDP", 0, false, 512, true},
			{"EDNS 4096 over UDP", 4096, false, 1232, true},
			{"EDNS 1232 over UDP", 1232, false, 1232, true},
			{"EDNS 800 over UDP", 800, false, 800, true},
			{"EDNS 100 is 512", 100, false, 512, true},
			{"EDNS 4096 over TCP", 4096, true, dns.MaxMsgSize, false},
			{"no EDNS over TCP", 0, true, dns.MaxMsgSize, false},
		} {
			t.Run(path.name+"/"+tc.name, func(t *testing.T) {
				m := new(dns.Msg)
				m.SetQuestion(full2, dns.TypeAAAA)
				if tc.size != 0 {
					m.SetEdns0(tc.size, true)
				}
				rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: "10.0.0.1", TCP: tc.tcp})
				path.serve(rec, m)
				r := rec.Msg
				wire, err := r.Pack()
				if err != nil {
					t.Fatal(err)
				}
				if len(wire) > tc.limit || r.Truncated != tc.tc {
					t.Errorf("%d octets with TC=%v; want at most %d with TC=%v", len(wire), r.Truncated, tc.limit, tc.tc)
				}
				if !tc.tc && (len(r.Answer) != 16 || len(r.Ns) != 13 || len(wire) <= 1232) {
					t.Errorf("untruncated: %d octets, %d answers, %d NS; want all of the 16 and 13, over 1232 octets", len(wire), len(r.Answer), len(r.Ns))
				}
				o := r.IsEdns0()
				switch {
				case tc.size == 0 && o != nil:
					t.Errorf("OPT in a response to a request without EDNS: %v", o)
				case tc.size != 0 && o == nil:
					t.Errorf("no OPT in the response to an EDNS request")
				case tc.size != 0 && (o.UDPSize() != 1232 || !o.Do() || o.Version() != 0):
					t.Errorf("OPT says size %d, DO %v, version %d; want this server's 1232, the DO echoed, version 0", o.UDPSize(), o.Do(), o.Version())
				}
				// The request the plugins in front see afterwards (log,
				// metrics) still says what the client said.
				if tc.size != 0 && m.IsEdns0().UDPSize() != tc.size {
					t.Errorf("request's UDP size now %d, was %d", m.IsEdns0().UDPSize(), tc.size)
				}
			})
		}
	}
}

// TestProbeFloodBounded: a flood of queries from many new /24s (spoofed
// sources, say) starts at most defaultProbeLimit probes at once; the rest
// are answered at once at level 0 and counted as skipped. A prober that
// never answers keeps every started probe in flight until its deadline, and
// synctest's clock stands still until every query has been handled, so the
// counts are exact.
func TestProbeFloodBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := testCoral(t, testWorld())
		var started, active, peak atomic.Int32
		c.classifier.probe = func(ctx context.Context, a netip.Addr) (time.Duration, error) {
			started.Add(1)
			n := active.Add(1)
			defer active.Add(-1)
			for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
			}
			<-ctx.Done()
			return 0, ctx.Err()
		}
		c.classifier.wait = 60 * time.Millisecond
		c.classifier.fresh = 10 * time.Minute
		c.classifier.failedFor = time.Minute
		skipped := counterValue(probesSkipped)
		skippedCls := counterValue(classifyCount.WithLabelValues("", "nyucd.test.", "", "skipped"))

		const flood = 1000
		var wg sync.WaitGroup
		var atOnce, level0 atomic.Int32
		for i := range flood {
			wg.Go(func() {
				ip := netip.AddrFrom4([4]byte{198, 18 + byte(i>>8), byte(i), 1}) // a /24 each
				start := time.Now()
				m, _ := query(c, ip.String(), full2, dns.TypeA, answers)
				if time.Since(start) == 0 {
					atOnce.Add(1)
				}
				if len(m.Answer) == 2 && len(m.Ns) > 0 && m.Ns[0].Header().Name == "l0.nyucd.test." {
					level0.Add(1)
				}
			})
		}
		wg.Wait()
		if n := started.Load(); n != defaultProbeLimit {
			t.Errorf("%d probes started for %d new prefixes, want %d", n, flood, defaultProbeLimit)
		}
		if n := peak.Load(); n > defaultProbeLimit {
			t.Errorf("%d probes in flight at once, limit %d", n, defaultProbeLimit)
		}
		if got := counterValue(probesSkipped) - skipped; got != flood-defaultProbeLimit {
			t.Errorf("probes_skipped_total went up by %v, want %d", got, flood-defaultProbeLimit)
		}
		if got := counterValue(classifyCount.WithLabelValues("", "nyucd.test.", "", "skipped")) - skippedCls; got != flood-defaultProbeLimit {
			t.Errorf("classifications_total{source=skipped} went up by %v, want %d", got, flood-defaultProbeLimit)
		}
		if n := atOnce.Load(); n != flood-defaultProbeLimit {
			t.Errorf("%d queries answered without waiting, want the %d that got no probe", n, flood-defaultProbeLimit)
		}
		if n := level0.Load(); n != flood {
			t.Errorf("%d of %d answers at level 0", n, flood)
		}

		// The probes end at their deadline and free their slots: the next
		// new prefix is probed again.
		c.classifier.background.Wait()
		if n := active.Load(); n != 0 {
			t.Fatalf("%d probes still in flight", n)
		}
		before := started.Load()
		query(c, "198.51.100.1", full2, dns.TypeA, answers)
		if started.Load() != before+1 {
			t.Errorf("no probe for a new prefix after the flood")
		}
		c.classifier.background.Wait()
	})
}

// TestNSHostRemembered: a name server's ns-<ip> name answers while the
// node knows it and for nsRemember after it last heard from it; then it is
// NXDOMAIN. One that is still around keeps its name.
func TestNSHostRemembered(t *testing.T) {
	w := testWorld()
	c := testCoral(t, w)
	ask := func(name string, qtype uint16) *dns.Msg {
		t.Helper()
		m, _ := query(c, "10.2.0.1", name, qtype, answers)
		return m
	}
	const gone, stays, routed = "ns-127-0-2-1.nyucd.test.", "ns-127-0-9-1.nyucd.test.", "ns-20010db8000000000000000000000053.nyucd.test."
	for _, q := range []struct {
		name  string
		qtype uint16
	}{{gone, dns.TypeA}, {stays, dns.TypeA}, {routed, dns.TypeAAAA}} {
		if m := ask(q.name, q.qtype); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
			t.Fatalf("%s while a member: %v", q.name, m)
		}
	}
	// 127.0.2.1 leaves the network, and the routing table forgets
	// 2001:db8::53.
	w.mu.Lock()
	w.members[2] = w.members[2][1:]
	w.contacts = nil
	w.mu.Unlock()
	c.tracker.sweep(context.Background())
	if m := ask(gone, dns.TypeA); m.Rcode != dns.RcodeSuccess || len(m.Answer) != 1 {
		t.Errorf("%s right after leaving: %v", gone, m)
	}
	// Later than nsRemember after the node last heard from it.
	later := time.Now().Add(nsRemember + time.Minute)
	c.tracker.now = func() time.Time { return later }
	c.tracker.sweep(context.Background()) // pings 127.0.9.1, which answers
	for _, q := range []struct {
		name  string
		qtype uint16
		rcode int
	}{{gone, dns.TypeA, dns.RcodeNameError}, {routed, dns.TypeAAAA, dns.RcodeNameError}, {stays, dns.TypeA, dns.RcodeSuccess}} {
		if m := ask(q.name, q.qtype); m.Rcode != q.rcode {
			t.Errorf("%s after %v: %s, want %s\n%v", q.name, nsRemember, dns.RcodeToString[m.Rcode], dns.RcodeToString[q.rcode], m)
		}
	}
}

// rcodeName names rcodes the way dig does; miekg/dns calls 16 BADSIG.
func rcodeName(rcode int) string {
	if rcode == dns.RcodeBadVers {
		return "BADVERS"
	}
	return dns.RcodeToString[rcode]
}

// counterValue reads a Prometheus counter.
func counterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}
