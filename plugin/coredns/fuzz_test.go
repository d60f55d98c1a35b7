package coral

import (
	"context"
	"testing"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

// FuzzServeDNS sends arbitrary DNS messages through the handler: it must
// answer every one that names our zones with a well-formed response that
// packs, echoes the question and never panics.
func FuzzServeDNS(f *testing.F) {
	for _, q := range []struct {
		name  string
		qtype uint16
	}{
		{full2, dns.TypeA}, {"www.example.com.nyud.test.", dns.TypeAAAA}, {"l1.l0.nyucd.test.", dns.TypeNS},
		{"nyud.test.", dns.TypeANY}, {"a.nyud.test.nyud.test.", dns.TypeA}, {longAliasName(), dns.TypeA},
		{"ns-127-0-0-2.nyucd.test.", dns.TypeA}, {"l2.l1.l0.nyucd.test.", dns.TypeDS},
	} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		m.SetEdns0(1232, true)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"})
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(2))
	}
	c := testCoral(f, testWorld())
	resolvers := []string{"10.0.0.1", "10.1.0.1", "10.2.0.1", "192.0.2.1"}
	f.Fuzz(func(t *testing.T, wire []byte, who uint8) {
		r := new(dns.Msg)
		if err := r.Unpack(wire); err != nil || len(r.Question) != 1 {
			return
		}
		rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: resolvers[int(who)%len(resolvers)]})
		rcode, _ := c.ServeDNS(context.Background(), rec, r)
		if rec.Msg == nil {
			if rcode != dns.RcodeServerFailure { // next plugin (none): out of zone
				t.Fatalf("nothing written, rcode %d", rcode)
			}
			return
		}
		if _, err := rec.Msg.Pack(); err != nil {
			t.Fatalf("response does not pack: %v\n%v", err, rec.Msg)
		}
		if len(rec.Msg.Question) != 1 || rec.Msg.Question[0] != r.Question[0] || rec.Msg.Id != r.Id {
			t.Fatalf("question or id not echoed: %v", rec.Msg)
		}
	})
}
