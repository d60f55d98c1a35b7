package resolvers

import (
	"fmt"
	"net/netip"

	"github.com/miekg/dns"
)

// AnswerA returns the A records of a resolver's answer to name, in the
// order given, and their smallest TTL; an error when the answer failed or
// holds no address. The labs that resolve through real resolvers share it.
func AnswerA(name string, resp *dns.Msg) ([]netip.Addr, uint32, error) {
	if resp.Rcode != dns.RcodeSuccess {
		return nil, 0, fmt.Errorf("%s: %s", name, dns.RcodeToString[resp.Rcode])
	}
	var out []netip.Addr
	ttl := uint32(0)
	for _, rr := range resp.Answer {
		if a, ok := rr.(*dns.A); ok {
			ad, _ := netip.AddrFromSlice(a.A)
			out = append(out, ad.Unmap())
			if len(out) == 1 || a.Hdr.Ttl < ttl {
				ttl = a.Hdr.Ttl
			}
		}
	}
	if len(out) == 0 {
		return nil, 0, fmt.Errorf("%s: no addresses in the answer", name)
	}
	return out, ttl, nil
}
