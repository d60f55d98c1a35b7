package coral

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

// fakeNodes is a node with a fixed membership per level.
type fakeNodes struct {
	mu      sync.Mutex
	self    coraldht.Contact
	members [][]coraldht.NodeInfo // per level, self excluded
	// contacts are more routing-table entries at level 0: nodes the node
	// knows that Nodes does not return (not live, or beyond its count).
	contacts []coraldht.NodeInfo
	dead     map[netip.AddrPort]bool
	pings    int
	calls    int // Nodes calls
}

func (f *fakeNodes) Nodes(ctx context.Context, level, count int, target netip.Addr, services coraldht.Services) []coraldht.NodeInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.calls++
	var out []coraldht.NodeInfo
	if f.self.Services.Has(services) {
		out = append(out, coraldht.NodeInfo{Contact: f.self, LastHeard: time.Now(), Self: true})
	}
	for _, ni := range f.members[level] {
		if ni.Services.Has(services) && !f.dead[ni.Addr] {
			out = append(out, ni)
		}
	}
	return out[:min(len(out), count)]
}

func (f *fakeNodes) Ping(ctx context.Context, addr netip.AddrPort) (time.Duration, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pings++
	if f.dead[addr] {
		return 0, coraldht.ErrNoResponse
	}
	return time.Millisecond, nil
}

// PingNode answers for the members and contacts that are not dead.
func (f *fakeNodes) PingNode(ctx context.Context, addr netip.AddrPort) (coraldht.NodeInfo, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.pings++
	if !f.dead[addr] {
		for _, list := range append(slices.Clone(f.members), f.contacts) {
			for _, ni := range list {
				if ni.Addr == addr {
					ni.LastHeard = time.Now()
					return ni, nil
				}
			}
		}
	}
	return coraldht.NodeInfo{}, coraldht.ErrNoResponse
}

func (f *fakeNodes) Levels() []coraldht.LevelInfo { return nil }

func (f *fakeNodes) RoutingTable(level int) []coraldht.NodeInfo {
	f.mu.Lock()
	defer f.mu.Unlock()
	out := slices.Clone(f.members[level])
	if level == 0 {
		out = append(out, f.contacts...)
	}
	return out
}

func member(addr string, s coraldht.Services, heard time.Time) coraldht.NodeInfo {
	ap := netip.AddrPortFrom(netip.MustParseAddr(addr), 4000)
	return coraldht.NodeInfo{Contact: coraldht.Contact{Addr: ap, Services: s}, LastHeard: heard, RTT: time.Millisecond}
}

// testWorld: this server is 127.0.0.2 (DNS). Its clusters:
//
//	level 0: DNS 127.0.9.1; HTTP 127.0.9.80, 127.0.1.80, 127.0.2.80, 127.0.2.81, 2001:db8::80
//	level 1: DNS 127.0.1.1; HTTP 127.0.1.80, 127.0.2.80, 127.0.2.81
//	level 2: DNS 127.0.2.1; HTTP 127.0.2.80, 127.0.2.81
//
// and its routing table knows one more name server, 2001:db8::53.
// Resolvers in 10.0/16, 10.1/16 and 10.2/16 are classified at levels 0, 1, 2.
func testWorld() *fakeNodes {
	now := time.Now()
	dnsS, http := coraldht.ServiceDNS, coraldht.ServiceHTTP
	return &fakeNodes{
		self: coraldht.Contact{Addr: netip.MustParseAddrPort("127.0.0.2:4000"), Services: dnsS},
		members: [][]coraldht.NodeInfo{
			{member("127.0.9.1", dnsS, now), member("127.0.9.80", http, now), member("127.0.1.80", http, now),
				member("127.0.2.80", http, now), member("127.0.2.81", http, now), member("2001:db8::80", http, now)},
			{member("127.0.1.1", dnsS, now), member("127.0.1.80", http, now), member("127.0.2.80", http, now), member("127.0.2.81", http, now)},
			{member("127.0.2.1", dnsS, now), member("127.0.2.80", http, now), member("127.0.2.81", http, now)},
		},
		contacts: []coraldht.NodeInfo{member("2001:db8::53", dnsS, now)},
		dead:     map[netip.AddrPort]bool{},
	}
}

func testCoral(t testing.TB, nodes *fakeNodes) *Coral {
	t.Helper()
	sch, err := newScheme("nyucd.test.", "nyud.test.", 3)
	if err != nil {
		t.Fatal(err)
	}
	tr := newTracker(nodes, 3, time.Second, 15*time.Second, 100*time.Millisecond)
	tr.intn = func(int) int { return 0 }
	tr.sweep(context.Background())
	cl := &classifier{
		thresholds: []time.Duration{60 * time.Millisecond, 20 * time.Millisecond},
		overrides: []override{
			{netip.MustParsePrefix("10.0.0.0/16"), 0},
			{netip.MustParsePrefix("10.1.0.0/16"), 1},
			{netip.MustParsePrefix("10.2.0.0/16"), 2},
		},
		cache: newRTTCache(16),
		now:   time.Now,
		ctx:   context.Background(),
		gate:  newProbeGate(maxProbeRate, maxProbeRate, time.Now),
	}
	return &Coral{
		cfg: newConfig(), gate: cl.gate,
		scheme: sch, classifier: cl, tracker: tr, cookies: newServerCookies([16]byte{1}),
		self: netip.MustParseAddr("127.0.0.2"),
		set:  settings{answerTTL: []uint32{30, 30, 60}, nsTTL: 3600, negTTL: 30, retryTTL: 10, answers: 2, nameservers: 2},
	}
}

const (
	soaTail = " ns-127-0-0-2.nyucd.test. hostmaster.nyucd.test. 1 3600 600 86400 "
	full2   = "www.example.com.http.l2.l1.l0.nyucd.test."
)

func soa(zone string, ttl string) dns.RR {
	return test.SOA(zone + " " + ttl + " IN SOA" + soaTail + ttl)
}

func glue(addrs ...string) []dns.RR {
	var out []dns.RR
	for _, a := range addrs {
		out = append(out, test.A(nsLabel(netip.MustParseAddr(a))+".nyucd.test. 3600 IN A "+a))
	}
	return out
}

func nsRRs(zone string, addrs ...string) []dns.RR {
	var out []dns.RR
	for _, a := range addrs {
		out = append(out, test.NS(zone+" 3600 IN NS "+nsLabel(netip.MustParseAddr(a))+".nyucd.test."))
	}
	return out
}

// query asks c for name from a resolver at ip, over TCP (so its address
// is proven: proof.go), and returns the response with the addresses of its
// A records (section: answer or additional).
func query(c *Coral, ip, name string, qtype uint16, section func(*dns.Msg) []dns.RR) (*dns.Msg, []string) {
	m := new(dns.Msg)
	m.SetQuestion(name, qtype)
	rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: ip, TCP: true})
	c.ServeDNS(context.Background(), rec, m)
	var got []string
	for _, rr := range section(rec.Msg) {
		if a, ok := rr.(*dns.A); ok {
			got = append(got, a.A.String())
		}
	}
	return rec.Msg, got
}

func answers(m *dns.Msg) []dns.RR    { return m.Answer }
func additional(m *dns.Msg) []dns.RR { return m.Extra }

type coralCase struct {
	name     string
	resolver string
	aa       bool
	test.Case
}

func coralCases() []coralCase {
	return []coralCase{
		// The Coralized name: proxies of the resolver's level cluster, and the
		// paper's authority section naming that cluster's servers.
		{"proxy level 2", "10.2.0.1", true, test.Case{Qname: full2, Qtype: dns.TypeA,
			Answer: []dns.RR{test.A(full2 + " 60 IN A 127.0.2.80"), test.A(full2 + " 60 IN A 127.0.2.81")},
			Ns:     nsRRs("l2.l1.l0.nyucd.test.", "127.0.0.2", "127.0.2.1"),
			Extra:  glue("127.0.0.2", "127.0.2.1")}},
		{"proxy level 1", "10.1.0.1", true, test.Case{Qname: full2, Qtype: dns.TypeA,
			Answer: []dns.RR{test.A(full2 + " 30 IN A 127.0.1.80"), test.A(full2 + " 30 IN A 127.0.2.80")},
			Ns:     nsRRs("l1.l0.nyucd.test.", "127.0.0.2", "127.0.1.1"),
			Extra:  glue("127.0.0.2", "127.0.1.1")}},
		{"proxy level 0", "10.0.0.1", true, test.Case{Qname: full2, Qtype: dns.TypeA,
			Answer: []dns.RR{test.A(full2 + " 30 IN A 127.0.1.80"), test.A(full2 + " 30 IN A 127.0.9.80")},
			Ns:     nsRRs("l0.nyucd.test.", "127.0.0.2", "127.0.9.1"),
			Extra:  glue("127.0.0.2", "127.0.9.1")}},
		{"proxy AAAA level 0", "10.0.0.1", true, test.Case{Qname: full2, Qtype: dns.TypeAAAA,
			Answer: []dns.RR{test.AAAA(full2 + " 30 IN AAAA 2001:db8::80")},
			Ns:     nsRRs("l0.nyucd.test.", "127.0.0.2", "127.0.9.1"),
			Extra:  glue("127.0.0.2", "127.0.9.1")}},
		{"proxy AAAA level 2 falls back to level 0", "10.2.0.1", true, test.Case{Qname: full2, Qtype: dns.TypeAAAA,
			Answer: []dns.RR{test.AAAA(full2 + " 30 IN AAAA 2001:db8::80")},
			Ns:     nsRRs("l2.l1.l0.nyucd.test.", "127.0.0.2", "127.0.2.1"),
			Extra:  glue("127.0.0.2", "127.0.2.1")}},
		{"proxy ANY is one HINFO (RFC 8482)", "10.2.0.1", true, test.Case{Qname: full2, Qtype: dns.TypeANY,
			Answer: hinfo(full2)}},
		{"proxy TXT", "10.2.0.1", true, test.Case{Qname: full2, Qtype: dns.TypeTXT,
			Ns: []dns.RR{soa("l2.l1.l0.nyucd.test.", "30")}}},
		{"proxy keeps the query's case", "10.2.0.1", true, test.Case{Qname: "WWW.Example.com.HTTP.L2.l1.L0.nyucd.TEST.", Qtype: dns.TypeA,
			Answer: []dns.RR{test.A("WWW.Example.com.HTTP.L2.l1.L0.nyucd.TEST. 60 IN A 127.0.2.80"), test.A("WWW.Example.com.HTTP.L2.l1.L0.nyucd.TEST. 60 IN A 127.0.2.81")},
			Ns:     nsRRs("l2.l1.l0.nyucd.test.", "127.0.0.2", "127.0.2.1"),
			Extra:  glue("127.0.0.2", "127.0.2.1")}},
		{"proxy under a lower level zone", "10.2.0.1", true, test.Case{Qname: "a.example.http.l0.nyucd.test.", Qtype: dns.TypeA,
			Answer: []dns.RR{test.A("a.example.http.l0.nyucd.test. 60 IN A 127.0.2.80"), test.A("a.example.http.l0.nyucd.test. 60 IN A 127.0.2.81")},
			Ns:     nsRRs("l0.nyucd.test.", "127.0.0.2", "127.0.9.1"),
			Extra:  glue("127.0.0.2", "127.0.9.1")}},

		// Level zone apexes: what QNAME minimisation asks the parent's servers.
		{"apex L0 refers", "10.0.0.1", false, test.Case{Qname: "l0.nyucd.test.", Qtype: dns.TypeA,
			Ns: nsRRs("l0.nyucd.test.", "127.0.0.2", "127.0.9.1"), Extra: glue("127.0.0.2", "127.0.9.1")}},
		{"apex L1 refers a level-1 resolver", "10.1.0.1", false, test.Case{Qname: "l1.l0.nyucd.test.", Qtype: dns.TypeNS,
			Ns: nsRRs("l1.l0.nyucd.test.", "127.0.0.2", "127.0.1.1"), Extra: glue("127.0.0.2", "127.0.1.1")}},
		{"apex L2 refers a level-2 resolver", "10.2.0.1", false, test.Case{Qname: "l2.l1.l0.nyucd.test.", Qtype: dns.TypeA,
			Ns: nsRRs("l2.l1.l0.nyucd.test.", "127.0.0.2", "127.0.2.1"), Extra: glue("127.0.0.2", "127.0.2.1")}},
		{"apex L1 is NODATA for a level-0 resolver", "10.0.0.1", true, test.Case{Qname: "l1.l0.nyucd.test.", Qtype: dns.TypeA,
			Ns: []dns.RR{soa("l0.nyucd.test.", "10")}}},
		{"apex L2 is NODATA for a level-0 resolver, in L0", "10.0.0.1", true, test.Case{Qname: "l2.l1.l0.nyucd.test.", Qtype: dns.TypeNS,
			Ns: []dns.RR{soa("l0.nyucd.test.", "10")}}},
		{"apex L2 is NODATA for a level-1 resolver, in L1", "10.1.0.1", true, test.Case{Qname: "l2.l1.l0.nyucd.test.", Qtype: dns.TypeA,
			Ns: []dns.RR{soa("l1.l0.nyucd.test.", "10")}}},
		{"apex DS is the parent's NODATA", "10.2.0.1", true, test.Case{Qname: "l1.l0.nyucd.test.", Qtype: dns.TypeDS,
			Ns: []dns.RR{soa("l0.nyucd.test.", "30")}}},
		{"service label is an empty non-terminal", "10.2.0.1", true, test.Case{Qname: "http.l2.l1.l0.nyucd.test.", Qtype: dns.TypeA,
			Ns: []dns.RR{soa("l2.l1.l0.nyucd.test.", "30")}}},
		{"service label for a level-0 resolver is in L0", "10.0.0.1", true, test.Case{Qname: "http.l2.l1.l0.nyucd.test.", Qtype: dns.TypeA,
			Ns: []dns.RR{soa("l0.nyucd.test.", "30")}}},

		// The coral zone apex and name server hosts.
		{"coral SOA", "10.2.0.1", true, test.Case{Qname: "nyucd.test.", Qtype: dns.TypeSOA,
			Answer: []dns.RR{soa("nyucd.test.", "30")}}},
		{"coral NS", "10.2.0.1", true, test.Case{Qname: "nyucd.test.", Qtype: dns.TypeNS,
			Answer: nsRRs("nyucd.test.", "127.0.0.2", "127.0.2.1"), Extra: glue("127.0.0.2", "127.0.2.1")}},
		{"coral NS level 0", "10.0.0.1", true, test.Case{Qname: "nyucd.test.", Qtype: dns.TypeNS,
			Answer: nsRRs("nyucd.test.", "127.0.0.2", "127.0.9.1"), Extra: glue("127.0.0.2", "127.0.9.1")}},
		{"coral MX", "10.2.0.1", true, test.Case{Qname: "nyucd.test.", Qtype: dns.TypeMX,
			Ns: []dns.RR{soa("nyucd.test.", "30")}}},
		{"ns host A", "10.2.0.1", true, test.Case{Qname: "ns-127-0-2-1.nyucd.test.", Qtype: dns.TypeA,
			Answer: []dns.RR{test.A("ns-127-0-2-1.nyucd.test. 3600 IN A 127.0.2.1")}}},
		{"ns host AAAA of an IPv4 host", "10.2.0.1", true, test.Case{Qname: "ns-127-0-2-1.nyucd.test.", Qtype: dns.TypeAAAA,
			Ns: []dns.RR{soa("nyucd.test.", "30")}}},
		{"ns host IPv6", "10.2.0.1", true, test.Case{Qname: "ns-20010db8000000000000000000000053.nyucd.test.", Qtype: dns.TypeAAAA,
			Answer: []dns.RR{test.AAAA("ns-20010db8000000000000000000000053.nyucd.test. 3600 IN AAAA 2001:db8::53")}}},
		{"ns host not canonical", "10.2.0.1", true, test.Case{Qname: "ns-127-0-02-1.nyucd.test.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError,
			Ns: []dns.RR{soa("nyucd.test.", "30")}}},

		// Outside the scheme.
		{"unknown child of the zone", "10.2.0.1", true, test.Case{Qname: "www.nyucd.test.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError,
			Ns: []dns.RR{soa("nyucd.test.", "30")}}},
		{"unknown name in L0", "10.2.0.1", true, test.Case{Qname: "x.l0.nyucd.test.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError,
			Ns: []dns.RR{soa("l0.nyucd.test.", "30")}}},
		{"level beyond the configured ones", "10.2.0.1", true, test.Case{Qname: "l3.l2.l1.l0.nyucd.test.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError,
			Ns: []dns.RR{soa("l2.l1.l0.nyucd.test.", "30")}}},
		{"levels out of order", "10.2.0.1", true, test.Case{Qname: "l2.l0.nyucd.test.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError,
			Ns: []dns.RR{soa("l0.nyucd.test.", "30")}}},
		{"origin carrying the coral zone", "10.2.0.1", true, test.Case{Qname: "x.nyucd.test.http.l2.l1.l0.nyucd.test.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError,
			Ns: []dns.RR{soa("l2.l1.l0.nyucd.test.", "30")}}},
		{"origin with a character no host has", "10.2.0.1", true, test.Case{Qname: `a\.b.http.l2.l1.l0.nyucd.test.`, Qtype: dns.TypeA, Rcode: dns.RcodeNameError,
			Ns: []dns.RR{soa("l2.l1.l0.nyucd.test.", "30")}}},

		// The alias zone.
		{"alias DNAME", "10.2.0.1", true, test.Case{Qname: "nyud.test.", Qtype: dns.TypeDNAME,
			Answer: []dns.RR{test.DNAME("nyud.test. 3600 IN DNAME http.l2.l1.l0.nyucd.test.")}}},
		{"alias SOA", "10.2.0.1", true, test.Case{Qname: "nyud.test.", Qtype: dns.TypeSOA,
			Answer: []dns.RR{test.SOA("nyud.test. 30 IN SOA" + soaTail + "30")}}},
		{"alias NS", "10.2.0.1", true, test.Case{Qname: "nyud.test.", Qtype: dns.TypeNS,
			Answer: nsRRs("nyud.test.", "127.0.0.2", "127.0.2.1"), Extra: glue("127.0.0.2", "127.0.2.1")}},
		{"alias apex A", "10.2.0.1", true, test.Case{Qname: "nyud.test.", Qtype: dns.TypeA,
			Ns: []dns.RR{test.SOA("nyud.test. 30 IN SOA" + soaTail + "30")}}},
		{"alias name", "10.2.0.1", true, test.Case{Qname: "www.example.com.nyud.test.", Qtype: dns.TypeA,
			Answer: []dns.RR{
				// SortAndCheck compares sorted sections; the order on the
				// wire (DNAME, CNAME, A) is checked by CNAMEOrder below.
				test.DNAME("nyud.test. 3600 IN DNAME http.l2.l1.l0.nyucd.test."),
				test.A(full2 + " 60 IN A 127.0.2.80"), test.A(full2 + " 60 IN A 127.0.2.81"),
				test.CNAME("www.example.com.nyud.test. 3600 IN CNAME " + full2)},
			Ns:    nsRRs("nyud.test.", "127.0.0.2", "127.0.2.1"),
			Extra: glue("127.0.0.2", "127.0.2.1")}},
		{"alias name CNAME", "10.0.0.1", true, test.Case{Qname: "www.example.com.nyud.test.", Qtype: dns.TypeCNAME,
			Answer: []dns.RR{
				test.DNAME("nyud.test. 3600 IN DNAME http.l2.l1.l0.nyucd.test."),
				test.CNAME("www.example.com.nyud.test. 3600 IN CNAME " + full2)},
			Ns:    nsRRs("nyud.test.", "127.0.0.2", "127.0.9.1"),
			Extra: glue("127.0.0.2", "127.0.9.1")}},
		{"alias of an alias", "10.2.0.1", true, test.Case{Qname: "a.nyud.test.nyud.test.", Qtype: dns.TypeA, Rcode: dns.RcodeNameError,
			Answer: []dns.RR{
				test.CNAME("a.nyud.test.nyud.test. 3600 IN CNAME a.nyud.test.http.l2.l1.l0.nyucd.test."),
				test.DNAME("nyud.test. 3600 IN DNAME http.l2.l1.l0.nyucd.test.")},
			Ns: []dns.RR{soa("l2.l1.l0.nyucd.test.", "30")}}},
		{"alias target too long", "10.2.0.1", true, test.Case{Qname: longAliasName(), Qtype: dns.TypeA, Rcode: dns.RcodeYXDomain,
			Answer: []dns.RR{test.DNAME("nyud.test. 3600 IN DNAME http.l2.l1.l0.nyucd.test.")}}},
	}
}

// longAliasName is a legal name under the alias zone whose DNAME target
// would exceed 255 octets.
func longAliasName() string {
	l := strings.Repeat("a", 60)
	return l + "." + l + "." + l + "." + strings.Repeat("b", 50) + ".nyud.test."
}

func TestServeDNS(t *testing.T) {
	c := testCoral(t, testWorld())
	for _, tc := range coralCases() {
		t.Run(tc.name, func(t *testing.T) {
			m := tc.Msg()
			rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: tc.resolver})
			if _, err := c.ServeDNS(context.Background(), rec, m); err != nil {
				t.Fatal(err)
			}
			if rec.Msg == nil {
				t.Fatal("no response written")
			}
			if err := test.CNAMEOrder(rec.Msg); err != nil {
				t.Error(err)
			}
			if len(rec.Msg.Answer) > 0 && rec.Msg.Answer[0].Header().Rrtype == dns.TypeDNAME {
				if len(rec.Msg.Answer) > 1 && rec.Msg.Answer[1].Header().Rrtype != dns.TypeCNAME {
					t.Errorf("the synthesized CNAME must follow the DNAME: %v", rec.Msg.Answer)
				}
			}
			if rec.Msg.Authoritative != tc.aa {
				t.Errorf("AA = %v, want %v", rec.Msg.Authoritative, tc.aa)
			}
			if err := test.SortAndCheck(rec.Msg, tc.Case); err != nil {
				t.Errorf("%v\n%v", err, rec.Msg)
			}
		})
	}
}

// TestReferralShape checks the rules that keep resolvers from dropping this
// server: an apex query is referred only to the zone asked for, and only
// when the resolver's level reaches it; a referral is non-authoritative, has
// NS and glue and no SOA; otherwise the answer is an authoritative NODATA.
func TestReferralShape(t *testing.T) {
	c := testCoral(t, testWorld())
	for lvl, ip := range []string{"10.0.0.1", "10.1.0.1", "10.2.0.1"} {
		for k, apex := range c.scheme.levelApex {
			for _, qt := range []uint16{dns.TypeA, dns.TypeNS, dns.TypeAAAA, dns.TypeSOA} {
				m := new(dns.Msg)
				m.SetQuestion(apex, qt)
				rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: ip})
				c.ServeDNS(context.Background(), rec, m)
				r := rec.Msg
				referral := !r.Authoritative
				if referral != (lvl >= k) {
					t.Errorf("resolver level %d, apex %s %s: referral %v, want %v", lvl, apex, dns.TypeToString[qt], referral, lvl >= k)
				}
				if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 {
					t.Errorf("%s: rcode %s, %d answers", apex, dns.RcodeToString[r.Rcode], len(r.Answer))
				}
				for _, rr := range r.Ns {
					switch rr := rr.(type) {
					case *dns.NS:
						if !referral || rr.Hdr.Name != apex {
							t.Errorf("%s: NS for %s (referral %v)", apex, rr.Hdr.Name, referral)
						}
					case *dns.SOA:
						if referral {
							t.Errorf("%s: SOA in a referral", apex)
						}
					}
				}
				if referral && len(r.Extra) != len(r.Ns) {
					t.Errorf("%s: %d NS but %d glue records", apex, len(r.Ns), len(r.Extra))
				}
			}
		}
	}
}

func TestProxiesFallBackAndExpire(t *testing.T) {
	w := testWorld()
	c := testCoral(t, w)
	// Both level-2 proxies die; the next sweep drops them and a level-2
	// resolver gets level-1 proxies with level 1's TTL.
	w.mu.Lock()
	w.dead[netip.MustParseAddrPort("127.0.2.80:4000")] = true
	w.dead[netip.MustParseAddrPort("127.0.2.81:4000")] = true
	w.mu.Unlock()
	c.tracker.sweep(context.Background())
	m, got := query(c, "10.2.0.1", full2, dns.TypeA, answers)
	if len(got) != 1 || got[0] != "127.0.1.80" || m.Answer[0].Header().Ttl != 30 {
		t.Fatalf("after the level-2 proxies died: %v (ttl %d), want [127.0.1.80] with ttl 30", got, m.Answer[0].Header().Ttl)
	}

	// A proxy not heard from within live_within is not handed out even before
	// the next sweep notices.
	c.tracker.now = func() time.Time { return time.Now().Add(20 * time.Second) }
	c.tracker.syncWait = 50 * time.Millisecond
	before := w.calls
	m, _ = query(c, "10.2.0.1", full2, dns.TypeA, answers)
	if w.calls == before {
		t.Errorf("no synchronous Nodes call when nothing in the sweep was live")
	}
	// The fake's members still report the old LastHeard, so even the slow
	// path finds nothing live: the answer is NODATA with the short TTL.
	if len(m.Answer) != 0 || len(m.Ns) != 1 || m.Ns[0].Header().Ttl != 10 {
		t.Errorf("with nothing live: %v", m)
	}
}

func TestNonRecursiveProxiesOnlyLocally(t *testing.T) {
	w := testWorld()
	now := time.Now()
	w.members[2] = []coraldht.NodeInfo{member("10.2.0.80", coraldht.ServiceHTTP|coraldht.ServiceNonRecursive, now),
		member("127.0.2.81", coraldht.ServiceHTTP, now)}
	c := testCoral(t, w)
	for _, tc := range []struct {
		resolver string
		want     []string
	}{
		{"10.2.0.1", []string{"10.2.0.80", "127.0.2.81"}}, // same /24: the local proxy first
		{"10.2.9.1", []string{"127.0.2.81"}},
	} {
		_, got := query(c, tc.resolver, full2, dns.TypeA, answers)
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("resolver %s: %v, want %v", tc.resolver, got, tc.want)
		}
	}
}

func TestNextPluginOutsideZones(t *testing.T) {
	c := testCoral(t, testWorld())
	c.Next = test.NextHandler(dns.RcodeRefused, nil)
	m := new(dns.Msg)
	m.SetQuestion("example.org.", dns.TypeA)
	rec := dnstest.NewRecorder(&test.ResponseWriter{})
	rcode, _ := c.ServeDNS(context.Background(), rec, m)
	if rcode != dns.RcodeRefused {
		t.Errorf("rcode %d, want the next plugin's REFUSED", rcode)
	}
}

func TestEDNSAndCookies(t *testing.T) {
	c := testCoral(t, testWorld())
	m := new(dns.Msg)
	m.SetQuestion(full2, dns.TypeA)
	m.SetEdns0(1232, false)
	opt := m.IsEdns0()
	opt.Option = append(opt.Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"})
	rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: "10.2.0.1"})
	c.ServeDNS(context.Background(), rec, m)
	ro := rec.Msg.IsEdns0()
	if ro == nil {
		t.Fatal("no OPT in the response to an EDNS query")
	}
	var cookie string
	for _, o := range ro.Option {
		if ck, ok := o.(*dns.EDNS0_COOKIE); ok {
			cookie = ck.Cookie
		}
	}
	if len(cookie) != 2*(8+16) || !strings.HasPrefix(cookie, "0102030405060708") {
		t.Fatalf("cookie %q: want the client cookie and a 16-byte server cookie", cookie)
	}
	// The returned cookie is valid when the resolver sends it back.
	m.IsEdns0().Option = []dns.EDNS0{&dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: cookie}}
	if v, _ := c.cookies.check(m, netip.MustParseAddr("10.2.0.1")); v != cookieValid {
		t.Errorf("verdict %v for our own cookie, want valid", v)
	}

	// Two OPT records: FORMERR (RFC 6891 §6.1.1).
	m = new(dns.Msg)
	m.SetQuestion(full2, dns.TypeA)
	m.Extra = append(m.Extra, test.OPT(1232, false), test.OPT(1232, false))
	rec = dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: "10.2.0.1"})
	c.ServeDNS(context.Background(), rec, m)
	if rec.Msg.Rcode != dns.RcodeFormatError {
		t.Errorf("two OPT records: rcode %s, want FORMERR", dns.RcodeToString[rec.Msg.Rcode])
	}
}

// TestNameServersNearResolver: with two or more name servers in the
// resolver's /24, the NS set holds only those, so a far server does not
// name itself to a resolver it measured as far away.
func TestNameServersNearResolver(t *testing.T) {
	w := testWorld()
	now := time.Now()
	w.members[0] = append(w.members[0], member("10.0.0.53", coraldht.ServiceDNS, now), member("10.0.0.54", coraldht.ServiceDNS, now))
	c := testCoral(t, w)
	for _, tc := range []struct {
		resolver string
		want     []string
	}{
		{"10.0.0.1", []string{"10.0.0.53", "10.0.0.54"}},
		{"10.0.9.1", []string{"127.0.0.2", "127.0.9.1", "10.0.0.53"}}, // nobody near: the sweep's order, three of them
	} {
		c.set.nameservers = 3
		_, got := query(c, tc.resolver, "l0.nyucd.test.", dns.TypeA, additional)
		if strings.Join(got, " ") != strings.Join(tc.want, " ") {
			t.Errorf("resolver %s: name servers %v, want %v", tc.resolver, got, tc.want)
		}
	}
}

// TestAnswerWaitsForFirstSweep: a query that arrives while the first sweep
// is still running waits for it instead of answering with no proxies.
func TestAnswerWaitsForFirstSweep(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := testWorld()
		c := testCoral(t, w)
		c.tracker = newTracker(w, 3, time.Second, 15*time.Second, 250*time.Millisecond)
		go func() {
			time.Sleep(100 * time.Millisecond)
			c.tracker.sweep(context.Background())
		}()
		m := new(dns.Msg)
		m.SetQuestion(full2, dns.TypeA)
		rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: "10.2.0.1"})
		start := time.Now()
		c.ServeDNS(context.Background(), rec, m)
		if len(rec.Msg.Answer) != 2 || time.Since(start) != 100*time.Millisecond {
			t.Errorf("after %v: %v", time.Since(start), rec.Msg)
		}
	})
}

// TestSeededTrackerAcrossNodeRestart: after a reload that restarts the
// node, the new tracker answers from the previous instance's live set at
// once; its sweeps before the node has joined (which find nobody) leave
// that set in place, and the first sweep after joining replaces it.
func TestSeededTrackerAcrossNodeRestart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		w := testWorld()
		old := newTracker(w, 3, time.Second, 15*time.Second, 250*time.Millisecond)
		old.sweep(context.Background())
		prev := old.snap.Load()

		// The restarted node knows nobody yet.
		fresh := &fakeNodes{self: w.self, members: make([][]coraldht.NodeInfo, 3), dead: map[netip.AddrPort]bool{}}
		var joined atomic.Bool
		c := testCoral(t, w)
		c.tracker = newTracker(fresh, 3, time.Second, 15*time.Second, 250*time.Millisecond)
		c.tracker.seed(prev)
		c.tracker.keepSeed = func(set *liveSet) bool { return set.empty() && !joined.Load() }
		ask := func() int {
			m := new(dns.Msg)
			m.SetQuestion(full2, dns.TypeA)
			rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: "10.2.0.1"})
			start := time.Now()
			c.ServeDNS(context.Background(), rec, m)
			if time.Since(start) != 0 {
				t.Errorf("the answer waited %v", time.Since(start))
			}
			return len(rec.Msg.Answer)
		}
		if n := ask(); n != 2 {
			t.Fatalf("right after the reload: %d answers, want 2 from the previous live set", n)
		}
		c.tracker.sweep(context.Background()) // not joined: finds nobody
		if n := ask(); n != 2 {
			t.Errorf("after a sweep before joining: %d answers, want the previous set's 2", n)
		}
		// Joined, and the network says only 127.0.2.80 is left at level 2.
		fresh.mu.Lock()
		fresh.members[2] = []coraldht.NodeInfo{member("127.0.2.80", coraldht.ServiceHTTP, time.Now())}
		fresh.mu.Unlock()
		joined.Store(true)
		c.tracker.sweep(context.Background())
		if n := ask(); n != 1 {
			t.Errorf("after joining: %d answers, want the new sweep's 1", n)
		}
	})
}

// TestNameServerSetNeverOfOne: a referral names two servers whenever this
// node knows two (RFC 2182 §5), topping a one-server cluster up from the
// levels below; a set of one (this node knows no other name server) gets
// retry_ttl, not ns_ttl, so a resolver does not stay locked for an hour
// onto one server that may die. Found when Unbound in test/demonet was
// locked onto the single server a node named at start-up and went silent
// when that node was killed.
func TestNameServerSetNeverOfOne(t *testing.T) {
	dnsOnly := func(members []coraldht.NodeInfo) []coraldht.NodeInfo {
		return slices.DeleteFunc(slices.Clone(members), func(ni coraldht.NodeInfo) bool { return ni.Services.Has(coraldht.ServiceDNS) })
	}
	for _, tc := range []struct {
		name        string
		world       func(w *fakeNodes)
		nameservers int
		want        []string
		ttl         uint32
	}{
		{"cluster of two", func(*fakeNodes) {}, 2, []string{"127.0.0.2", "127.0.2.1"}, 3600},
		{"alone at level 2: topped up from level 1", func(w *fakeNodes) { w.members[2] = dnsOnly(w.members[2]) }, 2,
			[]string{"127.0.0.2", "127.0.1.1"}, 3600},
		{"alone at levels 2 and 1: from level 0", func(w *fakeNodes) {
			w.members[2], w.members[1] = dnsOnly(w.members[2]), dnsOnly(w.members[1])
		}, 2, []string{"127.0.0.2", "127.0.9.1"}, 3600},
		{"no other name server known: provisional", func(w *fakeNodes) {
			for l := range w.members {
				w.members[l] = dnsOnly(w.members[l])
			}
		}, 2, []string{"127.0.0.2"}, 10},
		{"nameservers 1 is the operator's choice", func(w *fakeNodes) { w.members[2] = dnsOnly(w.members[2]) }, 1,
			[]string{"127.0.0.2"}, 3600},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := testWorld()
			tc.world(w)
			c := testCoral(t, w)
			c.set.nameservers = tc.nameservers
			r, glue := query(c, "10.2.0.1", "l2.l1.l0.nyucd.test.", dns.TypeA, additional)
			if r.Authoritative || len(r.Ns) != len(tc.want) {
				t.Fatalf("want a referral with %d NS, got AA %v and %v", len(tc.want), r.Authoritative, r.Ns)
			}
			if strings.Join(glue, " ") != strings.Join(tc.want, " ") {
				t.Errorf("name servers %v, want %v", glue, tc.want)
			}
			for _, rr := range append(slices.Clone(r.Ns), r.Extra...) {
				if rr.Header().Rrtype != dns.TypeOPT && rr.Header().Ttl != tc.ttl {
					t.Errorf("%s: TTL %d, want %d", rr.Header().Name, rr.Header().Ttl, tc.ttl)
				}
			}
		})
	}
}
