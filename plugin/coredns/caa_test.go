package coral

import (
	"context"
	"slices"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

const testAccount = "https://acme.test/acct/1"

// testCAA is "caa letsencrypt.org validationmethods=dns-01
// accounturi=https://acme.test/acct/1" and "caa iodef mailto:sec@nyud.test".
func testCAA() []caaProperty {
	v := "letsencrypt.org; validationmethods=dns-01; accounturi=" + testAccount
	return []caaProperty{{"issue", v}, {"issuewild", v}, {"iodef", "mailto:sec@nyud.test"}}
}

func caaRRs(owner string) []dns.RR {
	v := `"letsencrypt.org; validationmethods=dns-01; accounturi=` + testAccount + `"`
	return []dns.RR{
		test.CAA(owner + " 3600 IN CAA 0 issue " + v),
		test.CAA(owner + " 3600 IN CAA 0 issuewild " + v),
		test.CAA(owner + ` 3600 IN CAA 0 iodef "mailto:sec@nyud.test"`),
	}
}

// checkExact runs tc against c from resolver and checks the response with
// SortAndCheck, the AA bit, and the answer records whole (SortAndCheck
// does not look inside CAA or HINFO records).
func checkExact(t *testing.T, c *Coral, resolver string, aa bool, tc test.Case) {
	t.Helper()
	rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: resolver})
	if _, err := c.ServeDNS(context.Background(), rec, tc.Msg()); err != nil {
		t.Fatal(err)
	}
	if rec.Msg == nil {
		t.Fatal("no response written")
	}
	if err := test.SortAndCheck(rec.Msg, tc); err != nil {
		t.Errorf("%v\n%v", err, rec.Msg)
	}
	if rec.Msg.Authoritative != aa {
		t.Errorf("AA = %v, want %v", rec.Msg.Authoritative, aa)
	}
	var got, want []string
	for _, rr := range rec.Msg.Answer {
		got = append(got, rr.String())
	}
	for _, rr := range tc.Answer {
		want = append(want, rr.String())
	}
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("answer\n%v\nwant\n%v", got, want)
	}
}

// TestCAA: the CAA set is answered at every zone apex the plugin serves,
// from every resolver level, authoritatively; names below the apexes are
// NODATA (or NXDOMAIN), so a CA's climb (RFC 8659 §3) goes on to the apex.
func TestCAA(t *testing.T) {
	c := testCoral(t, testWorld())
	c.set.caa = testCAA()
	for _, tc := range []struct {
		name, resolver string
		aa             bool
		test.Case
	}{
		{"coral apex", "10.2.0.1", true, test.Case{Qname: "nyucd.test.", Qtype: dns.TypeCAA, Answer: caaRRs("nyucd.test.")}},
		{"alias apex", "10.0.0.1", true, test.Case{Qname: "nyud.test.", Qtype: dns.TypeCAA, Answer: caaRRs("nyud.test.")}},
		{"alias apex keeps the query's case", "10.0.0.1", true, test.Case{Qname: "NyuD.test.", Qtype: dns.TypeCAA, Answer: caaRRs("NyuD.test.")}},
		{"level 0 apex", "10.0.0.1", true, test.Case{Qname: "l0.nyucd.test.", Qtype: dns.TypeCAA, Answer: caaRRs("l0.nyucd.test.")}},
		{"level 2 apex, level-2 resolver", "10.2.0.1", true, test.Case{Qname: "l2.l1.l0.nyucd.test.", Qtype: dns.TypeCAA, Answer: caaRRs("l2.l1.l0.nyucd.test.")}},
		{"level 2 apex, level-0 resolver", "10.0.0.1", true, test.Case{Qname: "l2.l1.l0.nyucd.test.", Qtype: dns.TypeCAA, Answer: caaRRs("l2.l1.l0.nyucd.test.")}},
		{"proxy name is NODATA", "10.2.0.1", true, test.Case{Qname: full2, Qtype: dns.TypeCAA,
			Ns: []dns.RR{soa("l2.l1.l0.nyucd.test.", "30")}}},
		{"one-label alias name: DNAME, CNAME, NODATA", "10.2.0.1", true, test.Case{Qname: "www-example-com.nyud.test.", Qtype: dns.TypeCAA,
			Answer: []dns.RR{
				test.DNAME("nyud.test. 3600 IN DNAME http.l2.l1.l0.nyucd.test."),
				test.CNAME("www-example-com.nyud.test. 3600 IN CNAME www-example-com.http.l2.l1.l0.nyucd.test.")},
			Ns: []dns.RR{soa("l2.l1.l0.nyucd.test.", "30")}}},
		{"name above an origin is NODATA", "10.2.0.1", true, test.Case{Qname: "com.http.l2.l1.l0.nyucd.test.", Qtype: dns.TypeCAA,
			Ns: []dns.RR{soa("l2.l1.l0.nyucd.test.", "30")}}},
		{"service label is NODATA", "10.2.0.1", true, test.Case{Qname: "http.l2.l1.l0.nyucd.test.", Qtype: dns.TypeCAA,
			Ns: []dns.RR{soa("l2.l1.l0.nyucd.test.", "30")}}},
		{"ns host is NODATA", "10.2.0.1", true, test.Case{Qname: "ns-127-0-2-1.nyucd.test.", Qtype: dns.TypeCAA,
			Ns: []dns.RR{soa("nyucd.test.", "30")}}},
		{"challenge name is NODATA", "10.2.0.1", true, test.Case{Qname: "_acme-challenge.http.l2.l1.l0.nyucd.test.", Qtype: dns.TypeCAA,
			Ns: []dns.RR{soa("l2.l1.l0.nyucd.test.", "1")}}},
		{"unknown name is NXDOMAIN", "10.2.0.1", true, test.Case{Qname: "www.nyucd.test.", Qtype: dns.TypeCAA, Rcode: dns.RcodeNameError,
			Ns: []dns.RR{soa("nyucd.test.", "30")}}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkExact(t, c, tc.resolver, tc.aa, tc.Case) })
	}
}

// TestCAAUnset: without caa lines the apexes are NODATA, as a zone without
// CAA records is, and a level zone apex asked for CAA is answered from the
// child side rather than referred to itself (a lame referral to a CA's
// resolver that is already there).
func TestCAAUnset(t *testing.T) {
	c := testCoral(t, testWorld())
	for _, tc := range []struct {
		name, resolver string
		test.Case
	}{
		{"coral apex", "10.2.0.1", test.Case{Qname: "nyucd.test.", Qtype: dns.TypeCAA, Ns: []dns.RR{soa("nyucd.test.", "30")}}},
		{"alias apex", "10.2.0.1", test.Case{Qname: "nyud.test.", Qtype: dns.TypeCAA,
			Ns: []dns.RR{test.SOA("nyud.test. 30 IN SOA" + soaTail + "30")}}},
		{"level 1 apex, level-2 resolver", "10.2.0.1", test.Case{Qname: "l1.l0.nyucd.test.", Qtype: dns.TypeCAA, Ns: []dns.RR{soa("l1.l0.nyucd.test.", "30")}}},
		{"level 2 apex, level-1 resolver", "10.1.0.1", test.Case{Qname: "l2.l1.l0.nyucd.test.", Qtype: dns.TypeCAA, Ns: []dns.RR{soa("l1.l0.nyucd.test.", "30")}}},
	} {
		t.Run(tc.name, func(t *testing.T) { checkExact(t, c, tc.resolver, true, tc.Case) })
	}
}
