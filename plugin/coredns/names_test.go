package coral

import (
	"context"
	"errors"
	"net/netip"
	"sort"
	"strings"
	"testing"

	"github.com/coralcdn/coral/coralname"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

func TestParseName(t *testing.T) {
	s, err := newScheme("nyucd.test", "nyud.test", 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name  string
		kind  nameKind
		level int
		rel   string
		bad   bool
	}{
		{"nyucd.test.", kindCoralApex, 0, "", false},
		{"l0.nyucd.test.", kindLevelApex, 0, "", false},
		{"l1.l0.nyucd.test.", kindLevelApex, 1, "", false},
		{"l2.l1.l0.nyucd.test.", kindLevelApex, 2, "", false},
		{"http.l2.l1.l0.nyucd.test.", kindServiceENT, 2, "", false},
		{"http.l0.nyucd.test.", kindServiceENT, 0, "", false},
		{"a.b.http.l1.l0.nyucd.test.", kindProxy, 1, "a.b", false},
		{"www.example.com.8080.http.l2.l1.l0.nyucd.test.", kindProxy, 2, "www.example.com.8080", false},
		{"a.nyud.test.http.l2.l1.l0.nyucd.test.", kindProxy, 2, "a.nyud.test", true},
		{"a.nyucd.test.b.http.l2.l1.l0.nyucd.test.", kindProxy, 2, "a.nyucd.test.b", true},
		{"nyucd.example.http.l2.l1.l0.nyucd.test.", kindProxy, 2, "nyucd.example", false},  // one label of the zone is not the zone
		{"a.nyucd.test.nyud.test.", kindAliasBelow, 0, "a.nyucd.test", true},               // the coral zone through the alias
		{"-a.example.com.http.l2.l1.l0.nyucd.test.", kindProxy, 2, "-a.example.com", true}, // the proxy's grammar
		{"localhost.http.l0.nyucd.test.", kindProxy, 0, "localhost", true},
		{"l3.l2.l1.l0.nyucd.test.", kindNX, 2, "", false},
		{"l1.nyucd.test.", kindNX, -1, "", false},
		{"x.nyucd.test.", kindNX, -1, "", false},
		{"http.nyucd.test.", kindNX, -1, "", false},
		{"x.http.nyucd.test.", kindNX, -1, "", false},
		{"ns-1-2-3-4.nyucd.test.", kindNSHost, 0, "", false},
		{"ns-1-2-3-04.nyucd.test.", kindNX, -1, "", false},
		{"ns-1-2-3-256.nyucd.test.", kindNX, -1, "", false},
		{"ns-00000000000000000000ffff01020304.nyucd.test.", kindNX, -1, "", false}, // IPv4-mapped: spelt as IPv4
		{"nyud.test.", kindAliasApex, 0, "", false},
		{"www.example.com.nyud.test.", kindAliasBelow, 0, "www.example.com", false},
		{"a.nyud.test.nyud.test.", kindAliasBelow, 0, "a.nyud.test", true},
		{"a_b.nyud.test.", kindAliasBelow, 0, "a_b", true},
		{"my_site.example.com.nyud.test.", kindAliasBelow, 0, "my_site.example.com", false},
		{"127.0.0.1.8080.nyud.test.", kindAliasBelow, 0, "127.0.0.1.8080", false},
	} {
		p, ok := s.parse(tc.name)
		if !ok {
			t.Errorf("%s: not in the zones", tc.name)
			continue
		}
		if p.kind != tc.kind || p.rel != tc.rel || p.badOrigin != tc.bad || (tc.kind != kindNSHost && tc.kind != kindAliasBelow && tc.kind != kindCoralApex && tc.kind != kindAliasApex && p.level != tc.level) {
			t.Errorf("%s: %v level %d rel %q bad %v; want %v level %d rel %q bad %v", tc.name, p.kind, p.level, p.rel, p.badOrigin, tc.kind, tc.level, tc.rel, tc.bad)
		}
	}
	for _, out := range []string{"example.org.", "test.", ".", "xnyucd.test."} {
		if _, ok := s.parse(out); ok {
			t.Errorf("%s: placed in our zones", out)
		}
	}
}

// proxyRefused are origin parts the proxy refuses with 400 (ErrBadHost)
// and that the DNS plugin used to answer with addresses: its own rules
// took any labels of letters, digits, '-' and '_'.
var proxyRefused = []string{
	"-a.example.com", "a-.example.com", "www.-a.example.com", // hyphen at a label's edge
	"a.example_com", "a_b", // '_' in the last label
	"localhost", "intranet", "0x7f000001", "localhost.8080", // single label
	"8080", "example.com.0", "example.com.080", "example.com.65536", // port label
	"example.123.456", "127.1", "0177.0.0.1", "127.000.0.1", "1.2.3", "256.0.0.1", // numeric, not a dotted quad
}

// TestDNSRefusesWhatProxyRefuses: every origin the proxy refuses gets no
// address, under the alias zone (with the DNAME and its CNAME) and under
// the coral zone at any level: NXDOMAIN where a label is not a label, and
// NODATA where names may lie below (an empty non-terminal: "com" above
// "www.example.com"; resolvers that minimise query names ask for it); the
// origins it serves are answered.
func TestDNSRefusesWhatProxyRefuses(t *testing.T) {
	c := testCoral(t, testWorld())
	dname := test.DNAME("nyud.test. 3600 IN DNAME http.l2.l1.l0.nyucd.test.")
	for _, rel := range proxyRefused {
		rcode := dns.RcodeNameError
		if coralname.NewZones("nyud.test", "nyucd.test").Above(rel) {
			rcode = dns.RcodeSuccess
		}
		alias := rel + ".nyud.test."
		if _, err := coralname.ParseHost(alias, "nyud.test"); !errors.Is(err, coralname.ErrBadHost) {
			t.Fatalf("the proxy takes %q (%v): not a case for this test", alias, err)
		}
		target := rel + ".http.l2.l1.l0.nyucd.test."
		for _, tc := range []test.Case{
			{Qname: alias, Qtype: dns.TypeA, Rcode: rcode,
				Answer: []dns.RR{dname, test.CNAME(alias + " 3600 IN CNAME " + target)},
				Ns:     []dns.RR{soa("l2.l1.l0.nyucd.test.", "30")}},
			{Qname: target, Qtype: dns.TypeA, Rcode: rcode, Ns: []dns.RR{soa("l2.l1.l0.nyucd.test.", "30")}},
			{Qname: rel + ".http.l0.nyucd.test.", Qtype: dns.TypeAAAA, Rcode: rcode, Ns: []dns.RR{soa("l0.nyucd.test.", "30")}},
		} {
			sort.Sort(test.RRSet(tc.Answer)) // SortAndCheck sorts the response only
			rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: "10.2.0.1"})
			if _, err := c.ServeDNS(context.Background(), rec, tc.Msg()); err != nil {
				t.Fatal(err)
			}
			if err := test.SortAndCheck(rec.Msg, tc); err != nil {
				t.Errorf("%s %s: %v\n%v", tc.Qname, dns.TypeToString[tc.Qtype], err, rec.Msg)
			}
		}
	}
	for _, rel := range []string{"a.example.com", "my_site.example.com", "xn--bcher-kva.example", "127.0.0.1.8080", "example.com.80", "nyucd.example",
		"a-example-com", "xn----bcher--kva-example", "127-0-0-1-8080"} { // the one-label form too
		if _, err := coralname.ParseHost(rel+".nyud.test", "nyud.test"); err != nil {
			t.Fatalf("the proxy refuses %q: %v", rel, err)
		}
		name := rel + ".http.l2.l1.l0.nyucd.test."
		tc := test.Case{Qname: name, Qtype: dns.TypeA,
			Answer: []dns.RR{test.A(name + " 60 IN A 127.0.2.80"), test.A(name + " 60 IN A 127.0.2.81")},
			Ns:     nsRRs("l2.l1.l0.nyucd.test.", "127.0.0.2", "127.0.2.1"),
			Extra:  glue("127.0.0.2", "127.0.2.1")}
		rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: "10.2.0.1"})
		if _, err := c.ServeDNS(context.Background(), rec, tc.Msg()); err != nil {
			t.Fatal(err)
		}
		if err := test.SortAndCheck(rec.Msg, tc); err != nil {
			t.Errorf("%s: %v\n%v", name, err, rec.Msg)
		}
	}
}

// TestParseNameOrigin: the origin and port the DNS plugin reads from a
// name are the proxy's.
func TestParseNameOrigin(t *testing.T) {
	s, err := newScheme("nyucd.test", "nyud.test", 3)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		want coralname.Origin
	}{
		{"www.example.com.nyud.test.", coralname.Origin{Host: "www.example.com"}},
		{"www.example.com.8080.nyud.test.", coralname.Origin{Host: "www.example.com", Port: 8080}},
		{"127.0.0.1.nyud.test.", coralname.Origin{Host: "127.0.0.1"}},
		{"10.1.2.3.80.http.l1.l0.nyucd.test.", coralname.Origin{Host: "10.1.2.3", Port: 80}},
		{"my_site.example.com.http.l0.nyucd.test.", coralname.Origin{Host: "my_site.example.com"}},
	} {
		p, ok := s.parse(tc.name)
		if !ok || p.badOrigin || p.origin != tc.want {
			t.Errorf("%s: origin %+v bad %v; want %+v", tc.name, p.origin, p.badOrigin, tc.want)
		}
	}
}

func TestNSLabelRoundTrip(t *testing.T) {
	for _, a := range []string{"127.0.0.2", "0.0.0.0", "255.255.255.255", "2001:db8::1", "::1", "::ffff:192.0.2.1"} {
		addr := netip.MustParseAddr(a)
		got, ok := parseNSLabel(nsLabel(addr))
		if !ok || got != addr.Unmap() {
			t.Errorf("%s → %s → %v %v", a, nsLabel(addr), got, ok)
		}
	}
}

func TestSchemeErrors(t *testing.T) {
	for _, tc := range []struct {
		coral, alias string
		levels       int
	}{
		{"nyucd.test", "nyucd.test", 3},
		{"nyucd.test", "a.nyucd.test", 3},
		{"a.nyud.test", "nyud.test", 3},
		{".", "", 3},
		{"nyucd.test", "", 0},
		{"nyucd.test", "", 9},
		{strings.Repeat("a.", 120) + "test", "", 8},
	} {
		if _, err := newScheme(tc.coral, tc.alias, tc.levels); err == nil {
			t.Errorf("newScheme(%q, %q, %d): no error", tc.coral, tc.alias, tc.levels)
		}
	}
}

// FuzzParseName feeds arbitrary question names through the scheme and the
// alias substitution: no panic, every answer consistent with the name.
func FuzzParseName(f *testing.F) {
	for _, seed := range []string{
		"nyucd.test.", "l0.nyucd.test.", "l2.l1.l0.nyucd.test.", "http.l2.l1.l0.nyucd.test.",
		"www.example.com.http.l2.l1.l0.nyucd.test.", "www.example.com.nyud.test.", "a.nyud.test.nyud.test.",
		"ns-127-0-0-2.nyucd.test.", `a\.b\000.nyud.test.`, "NYUCD.TEST.", "l1.l1.l0.nyucd.test.",
	} {
		f.Add(seed)
	}
	s, err := newScheme("nyucd.test", "nyud.test", 3)
	if err != nil {
		f.Fatal(err)
	}
	f.Fuzz(func(t *testing.T, name string) {
		if _, ok := dns.IsDomainName(name); !ok {
			return
		}
		name = dns.CanonicalName(name)
		p, ok := s.parse(name)
		if !ok {
			if dns.IsSubDomain(s.coral, name) || dns.IsSubDomain(s.alias, name) {
				t.Fatalf("%q is in a zone but was not placed", name)
			}
			return
		}
		switch p.kind {
		case kindProxy:
			if !p.badOrigin && !strings.HasSuffix(name, "."+serviceLabel+"."+s.levelApex[p.level]) {
				t.Fatalf("%q: proxy name outside %s", name, s.levelApex[p.level])
			}
		case kindLevelApex:
			if name != s.levelApex[p.level] {
				t.Fatalf("%q: level apex %d is %s", name, p.level, s.levelApex[p.level])
			}
		case kindNSHost:
			if s.nsHost(p.nsAddr) != name {
				t.Fatalf("%q: ns host spelt %s", name, s.nsHost(p.nsAddr))
			}
		case kindAliasBelow:
			if target, ok := s.aliasTarget(p.rel); ok {
				if _, ok := dns.IsDomainName(target); !ok {
					t.Fatalf("%q: target %q is not a name", name, target)
				}
				q, ok := s.parse(target)
				if !ok || q.kind != kindProxy || q.badOrigin != p.badOrigin {
					t.Fatalf("%q: target %q parses as %+v", name, target, q)
				}
			}
		}
	})
}
