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
// packs, echoes the question, fits what the client can take, advertises
// this server's EDNS size, answers only class IN, opcode QUERY, EDNS
// version 0 requests normally, and never panics. who picks the resolver
// (low bits) and TCP (the top bit).
func FuzzServeDNS(f *testing.F) {
	for _, q := range []struct {
		name  string
		qtype uint16
		mod   func(*dns.Msg)
	}{
		{full2, dns.TypeA, nil}, {"www.example.com.nyud.test.", dns.TypeAAAA, nil}, {"l1.l0.nyucd.test.", dns.TypeNS, nil},
		{"nyud.test.", dns.TypeANY, nil}, {"a.nyud.test.nyud.test.", dns.TypeA, nil}, {longAliasName(), dns.TypeA, nil},
		{"ns-127-0-0-2.nyucd.test.", dns.TypeA, nil}, {"l2.l1.l0.nyucd.test.", dns.TypeDS, nil},
		{"ns-127-0-0-1.nyucd.test.", dns.TypeA, nil},
		{"nyucd.test.", dns.TypeSOA, func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS }},
		{"nyucd.test.", dns.TypeSOA, func(m *dns.Msg) { m.Opcode = dns.OpcodeNotify }},
		{full2, dns.TypeA, func(m *dns.Msg) { m.IsEdns0().SetVersion(1) }},
		{"nyucd.test.", dns.TypeAXFR, nil},
		{"nyucd.test.", dns.TypeIXFR, func(m *dns.Msg) { m.Ns = []dns.RR{soa("nyucd.test.", "30")} }},
		{full2, dns.TypeAAAA, func(m *dns.Msg) { m.IsEdns0().SetUDPSize(4096) }},
		{full2, dns.TypeAAAA, func(m *dns.Msg) { m.Extra = nil }},
	} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		m.SetEdns0(1232, true)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"})
		if q.mod != nil {
			q.mod(m)
		}
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(2))
	}
	// Answers of 16 proxies and 13 name servers do not fit 512 octets, nor
	// 1232 for a level-0 resolver (10.0.0.1): truncation has work to do.
	c := testCoral(f, bigWorld())
	c.set.answers, c.set.nameservers = 16, 13
	resolvers := []string{"10.0.0.1", "10.1.0.1", "10.2.0.1", "192.0.2.1"}
	f.Fuzz(func(t *testing.T, wire []byte, who uint8) {
		r := new(dns.Msg)
		if err := r.Unpack(wire); err != nil || len(r.Question) != 1 {
			return
		}
		tcp := who&0x80 != 0
		rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: resolvers[int(who&0x7f)%len(resolvers)], TCP: tcp})
		ro := r.IsEdns0()
		var clientSize uint16
		if ro != nil {
			clientSize = ro.UDPSize()
		}
		rcode, _ := c.ServeDNS(context.Background(), rec, r)
		if rec.Msg == nil {
			if rcode != dns.RcodeServerFailure { // next plugin (none): out of zone
				t.Fatalf("nothing written, rcode %d", rcode)
			}
			return
		}
		resp := rec.Msg
		out, err := resp.Pack()
		if err != nil {
			t.Fatalf("response does not pack: %v\n%v", err, resp)
		}
		if len(resp.Question) != 1 || resp.Question[0] != r.Question[0] || resp.Id != r.Id {
			t.Fatalf("question or id not echoed: %v", resp)
		}
		if ro != nil && ro.UDPSize() != clientSize {
			t.Fatalf("request's UDP size changed from %d to %d", clientSize, ro.UDPSize())
		}
		limit := dns.MinMsgSize
		if ro != nil {
			limit = min(max(int(clientSize), dns.MinMsgSize), ednsUDPSize)
		}
		if !tcp && len(out) > limit {
			t.Fatalf("%d octets over UDP to a client that takes %d", len(out), limit)
		}
		if o := resp.IsEdns0(); (o != nil) != (ro != nil) || o != nil && (o.UDPSize() != ednsUDPSize || o.Version() != 0) {
			t.Fatalf("request OPT %v, response OPT %v; want one with size %d exactly when the request had one", ro, o, ednsUDPSize)
		}
		if resp.Rcode == dns.RcodeSuccess || resp.Rcode == dns.RcodeNameError {
			if r.Question[0].Qclass != dns.ClassINET || r.Opcode != dns.OpcodeQuery || ro != nil && ro.Version() != 0 {
				t.Fatalf("class %d, opcode %d, EDNS %v answered %s", r.Question[0].Qclass, r.Opcode, ro, dns.RcodeToString[resp.Rcode])
			}
			if qt := r.Question[0].Qtype; qt == dns.TypeAXFR || qt == dns.TypeIXFR {
				t.Fatalf("zone transfer answered %s", dns.RcodeToString[resp.Rcode])
			}
		}
	})
}
