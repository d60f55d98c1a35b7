package coral

import (
	"context"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

func hinfo(owner string) []dns.RR {
	return []dns.RR{test.HINFO(owner + ` 3600 IN HINFO "RFC8482" ""`)}
}

// TestANYMinimal: QTYPE ANY gets one synthesized HINFO record (RFC 8482
// §4.2) at every name with data, with nothing in the authority or
// additional sections; a name below the alias zone gets the DNAME and the
// CNAME, which ANY matches; names without data answer as for any type.
func TestANYMinimal(t *testing.T) {
	c := testCoral(t, testWorld())
	c.set.caa = testCAA() // not part of the ANY answer either
	for _, tc := range []struct {
		name, resolver string
		aa             bool
		test.Case
	}{
		{"coral apex", "10.2.0.1", true, test.Case{Qname: "nyucd.test.", Qtype: dns.TypeANY, Answer: hinfo("nyucd.test.")}},
		{"alias apex", "10.2.0.1", true, test.Case{Qname: "nyud.test.", Qtype: dns.TypeANY, Answer: hinfo("nyud.test.")}},
		{"level apex, not a referral", "10.2.0.1", true, test.Case{Qname: "l1.l0.nyucd.test.", Qtype: dns.TypeANY, Answer: hinfo("l1.l0.nyucd.test.")}},
		{"level apex above the resolver", "10.0.0.1", true, test.Case{Qname: "l2.l1.l0.nyucd.test.", Qtype: dns.TypeANY, Answer: hinfo("l2.l1.l0.nyucd.test.")}},
		{"proxy name", "10.2.0.1", true, test.Case{Qname: full2, Qtype: dns.TypeANY, Answer: hinfo(full2)}},
		{"proxy name, level-0 resolver", "10.0.0.1", true, test.Case{Qname: full2, Qtype: dns.TypeANY, Answer: hinfo(full2)}},
		{"challenge name, no DSHT lookup", "10.2.0.1", true, test.Case{Qname: "_acme-challenge.http.l2.l1.l0.nyucd.test.", Qtype: dns.TypeANY,
			Answer: hinfo("_acme-challenge.http.l2.l1.l0.nyucd.test.")}},
		{"ns host", "10.2.0.1", true, test.Case{Qname: "ns-127-0-2-1.nyucd.test.", Qtype: dns.TypeANY, Answer: hinfo("ns-127-0-2-1.nyucd.test.")}},
		{"alias name ends at the CNAME", "10.2.0.1", true, test.Case{Qname: "www.example.com.nyud.test.", Qtype: dns.TypeANY,
			Answer: []dns.RR{
				test.DNAME("nyud.test. 3600 IN DNAME http.l2.l1.l0.nyucd.test."),
				test.CNAME("www.example.com.nyud.test. 3600 IN CNAME " + full2)}}},
		{"alias of a bad origin ends at the CNAME", "10.2.0.1", true, test.Case{Qname: "a.nyud.test.nyud.test.", Qtype: dns.TypeANY,
			Answer: []dns.RR{
				test.CNAME("a.nyud.test.nyud.test. 3600 IN CNAME a.nyud.test.http.l2.l1.l0.nyucd.test."),
				test.DNAME("nyud.test. 3600 IN DNAME http.l2.l1.l0.nyucd.test.")}}},
		{"alias target too long", "10.2.0.1", true, test.Case{Qname: longAliasName(), Qtype: dns.TypeANY, Rcode: dns.RcodeYXDomain,
			Answer: []dns.RR{test.DNAME("nyud.test. 3600 IN DNAME http.l2.l1.l0.nyucd.test.")}}},
		{"service label is NODATA", "10.2.0.1", true, test.Case{Qname: "http.l2.l1.l0.nyucd.test.", Qtype: dns.TypeANY,
			Ns: []dns.RR{soa("l2.l1.l0.nyucd.test.", "30")}}},
		{"name above an origin is NODATA", "10.2.0.1", true, test.Case{Qname: "com.http.l2.l1.l0.nyucd.test.", Qtype: dns.TypeANY,
			Ns: []dns.RR{soa("l2.l1.l0.nyucd.test.", "30")}}},
		{"bad origin is NXDOMAIN", "10.2.0.1", true, test.Case{Qname: "-a.example.http.l2.l1.l0.nyucd.test.", Qtype: dns.TypeANY, Rcode: dns.RcodeNameError,
			Ns: []dns.RR{soa("l2.l1.l0.nyucd.test.", "30")}}},
		{"unknown ns host is NXDOMAIN", "10.2.0.1", true, test.Case{Qname: "ns-127-0-0-1.nyucd.test.", Qtype: dns.TypeANY, Rcode: dns.RcodeNameError,
			Ns: []dns.RR{soa("nyucd.test.", "30")}}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkExact(t, c, tc.resolver, tc.aa, tc.Case) })
	}
}

// TestANYSmall: over UDP, the ANY answer is at most 3.5 times the query's
// size, as sent (CoreDNS's server sends a response that fits the client
// uncompressed); the full answers (addresses, NS set, glue) were 5 to 7
// times. The most is a name below the alias zone, whose DNAME and CNAME
// are required.
func TestANYSmall(t *testing.T) {
	c := testCoral(t, testWorld())
	for _, name := range []string{full2, "www.example.com.nyud.test.", "www-example-com.nyud.test.", "nyud.test.", "l0.nyucd.test."} {
		r := new(dns.Msg)
		r.SetQuestion(name, dns.TypeANY)
		r.SetEdns0(4096, false)
		q, _ := r.Pack()
		rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: "10.2.0.1"})
		if _, err := c.ServeDNS(context.Background(), rec, r); err != nil {
			t.Fatal(err)
		}
		b, err := rec.Msg.Pack()
		if err != nil {
			t.Fatal(err)
		}
		if f := float64(len(b)) / float64(len(q)); f > 3.5 {
			t.Errorf("%s ANY: %d octets for a %d-octet query, factor %.1f", name, len(b), len(q), f)
		}
	}
}
