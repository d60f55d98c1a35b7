package coral

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

// ecsQuery asks c for name from resolver with a client subnet option
// (family from the address) and returns the response, the answer's
// addresses and the response's ECS option (nil: none).
func ecsQuery(c *Coral, resolver, name string, subnet string, scope uint8) (*dns.Msg, []string, *dns.EDNS0_SUBNET) {
	return ecsQueryOver(c, true, resolver, name, subnet, scope)
}

// ecsQueryOver is ecsQuery over TCP or UDP (no cookie).
func ecsQueryOver(c *Coral, tcp bool, resolver, name string, subnet string, scope uint8) (*dns.Msg, []string, *dns.EDNS0_SUBNET) {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.SetEdns0(1232, false)
	if subnet != "" {
		p := netip.MustParsePrefix(subnet)
		e := &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: uint8(p.Bits()), SourceScope: scope, Address: net.IP(p.Addr().AsSlice())}
		if p.Addr().Is6() {
			e.Family = 2
		}
		m.IsEdns0().Option = append(m.IsEdns0().Option, e)
	}
	rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: resolver, TCP: tcp})
	c.ServeDNS(context.Background(), rec, m)
	var got []string
	for _, rr := range rec.Msg.Answer {
		if a, ok := rr.(*dns.A); ok {
			got = append(got, a.A.String())
		}
	}
	var out *dns.EDNS0_SUBNET
	if opt := rec.Msg.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if e, ok := o.(*dns.EDNS0_SUBNET); ok {
				out = e
			}
		}
	}
	return rec.Msg, got, out
}

// TestECS: a trusted resolver's client subnet is classified and mapped in
// the resolver's place and answered with the scope the answer covers (RFC
// 7871 §7.2.1); an untrusted resolver's is ignored and not echoed; a
// malformed one from a trusted resolver is a format error.
func TestECS(t *testing.T) {
	const name = "www.example.com.http.l2.l1.l0.nyucd.test."
	for _, tc := range []struct {
		desc     string
		resolver string
		subnet   string
		scope    uint8 // in the query
		qname    string
		rcode    int
		answer   string // first proxy
		echo     bool   // an ECS option in the response
		outScope uint8
	}{
		{"trusted: the subnet's level (2), scope /24", "10.0.0.1", "10.2.7.0/24", 0, name, dns.RcodeSuccess, "127.0.2.80", true, 24},
		{"trusted: the subnet's hints", "10.0.0.1", "10.0.9.0/24", 0, name, dns.RcodeSuccess, "127.0.8.1", true, 24},
		{"trusted, source /16: scope /24", "10.0.0.1", "10.2.0.0/16", 0, name, dns.RcodeSuccess, "127.0.2.80", true, 24},
		{"trusted, source /32: scope /24", "10.0.0.1", "10.2.7.9/32", 0, name, dns.RcodeSuccess, "127.0.2.80", true, 24},
		{"trusted, source /0: the resolver, scope 0", "10.0.0.1", "0.0.0.0/0", 0, name, dns.RcodeSuccess, "127.0.5.1", true, 0},
		{"trusted, the answer is the same for all: scope 0", "10.0.0.1", "10.2.7.0/24", 0, "nyucd.test.", dns.RcodeSuccess, "", true, 0},
		{"untrusted: ignored, not echoed", "10.1.0.1", "10.2.7.0/24", 0, name, dns.RcodeSuccess, "127.0.1.80", false, 0},
		{"untrusted, malformed: ignored", "10.1.0.1", "10.2.7.1/24", 0, name, dns.RcodeSuccess, "127.0.1.80", false, 0},
		{"trusted, bits beyond the prefix: FORMERR", "10.0.0.1", "10.2.7.1/24", 0, name, dns.RcodeFormatError, "", false, 0},
		{"trusted, nonzero scope in a query: FORMERR", "10.0.0.1", "10.2.7.0/24", 24, name, dns.RcodeFormatError, "", false, 0},
		{"trusted, no option: the resolver", "10.0.0.1", "", 0, name, dns.RcodeSuccess, "127.0.5.1", false, 0},
	} {
		t.Run(tc.desc, func(t *testing.T) {
			w := nearWorld()
			c := testCoral(t, w)
			c.ecs = []netip.Prefix{netip.MustParsePrefix("10.0.0.0/24")}
			p := withProximity(c, hopsTo, fakeHints{"10.0.9.0/24": {"127.0.8.1"}}.find, time.Second)
			defer p.wg.Wait()
			m, got, echo := ecsQuery(c, tc.resolver, tc.qname, tc.subnet, tc.scope)
			if m.Rcode != tc.rcode {
				t.Fatalf("rcode %s, want %s", dns.RcodeToString[m.Rcode], dns.RcodeToString[tc.rcode])
			}
			if tc.answer != "" && (len(got) == 0 || got[0] != tc.answer) {
				t.Errorf("answer %v, want %s first", got, tc.answer)
			}
			switch {
			case !tc.echo && echo != nil:
				t.Errorf("response carries ECS %v, want none", echo)
			case tc.echo && echo == nil:
				t.Errorf("response carries no ECS")
			case tc.echo:
				q := netip.MustParsePrefix(tc.subnet)
				if echo.SourceNetmask != uint8(q.Bits()) || echo.SourceScope != tc.outScope || !strings.HasPrefix(echo.Address.String(), q.Addr().String()) {
					t.Errorf("response ECS %v, want %v/%d/%d", echo, q.Addr(), q.Bits(), tc.outScope)
				}
			}
		})
	}
}

// FuzzECSOption feeds arbitrary client subnet option payloads through the
// wire: whatever miekg/dns accepts, ecsOption either refuses or accepts a
// well-formed subnet, and the option answered for it survives the wire.
func FuzzECSOption(f *testing.F) {
	for _, seed := range [][]byte{
		{0, 1, 24, 0, 198, 51, 100},             // 198.51.100.0/24
		{0, 1, 24, 0, 198, 51, 100, 7},          // bits beyond the prefix
		{0, 1, 24, 24, 198, 51, 100},            // scope in a query
		{0, 1, 33, 0, 1, 2, 3, 4, 5},            // prefix too long
		{0, 2, 48, 0, 0x20, 1, 0xd, 0xb8, 0, 5}, // 2001:db8:5::/48
		{0, 0, 0, 0},                            // dig's family 0
		{0, 3, 8, 0, 1},                         // unknown family
		{0, 1, 0, 0},                            // source 0
		{},
	} {
		f.Add(seed)
	}
	f.Fuzz(func(t *testing.T, payload []byte) {
		m := new(dns.Msg)
		m.SetQuestion("www.example.com.nyud.test.", dns.TypeA)
		m.SetEdns0(1232, false)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_LOCAL{Code: dns.EDNS0SUBNET, Data: payload})
		wire, err := m.Pack()
		if err != nil {
			return
		}
		var r dns.Msg
		if r.Unpack(wire) != nil {
			return
		}
		e, err := ecsOption(&r)
		if err != nil {
			return
		}
		if e == nil {
			t.Fatal("an ECS option was accepted as none")
		}
		p, err := ecsPrefix(e)
		if err != nil {
			t.Fatalf("ecsOption accepted what ecsPrefix refuses: %v", err)
		}
		if p.IsValid() {
			if p != p.Masked() || p.Bits() != int(e.SourceNetmask) || p.Bits() == 0 {
				t.Fatalf("subnet %v from %v", p, e)
			}
			if p.Addr().Is4() != (e.Family == 1) {
				t.Fatalf("subnet %v from family %d", p, e.Family)
			}
		}
		reply := ecsReply(e, p, true)
		if int(reply.SourceScope) > 128 || (!p.IsValid() && reply.SourceScope != 0) {
			t.Fatalf("scope %d for %v", reply.SourceScope, p)
		}
		out := new(dns.Msg)
		out.SetReply(&r)
		out.SetEdns0(1232, false)
		out.IsEdns0().Option = append(out.IsEdns0().Option, reply)
		b, err := out.Pack()
		if err != nil {
			t.Fatalf("the reply's option does not pack: %v (%v)", err, reply)
		}
		var back dns.Msg
		if err := back.Unpack(b); err != nil {
			t.Fatalf("the reply does not unpack: %v", err)
		}
		got, ok := back.IsEdns0().Option[0].(*dns.EDNS0_SUBNET)
		if !ok || got.SourceNetmask != e.SourceNetmask || got.Family != e.Family || got.SourceScope != reply.SourceScope {
			t.Fatalf("reply option %v, sent %v", back.IsEdns0().Option[0], reply)
		}
	})
}
