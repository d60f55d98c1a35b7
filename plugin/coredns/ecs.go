package coral

import (
	"errors"
	"net"
	"net/netip"

	"github.com/coralcdn/coral/coraldht"
	"github.com/miekg/dns"
)

// EDNS Client Subnet (RFC 7871). Public resolvers serve clients far from
// themselves, which breaks the paper's assumption that a client sits near
// its resolver; some of them say where the client is with ECS. For
// resolvers the operator trusts (the ecs property), the client subnet takes
// the resolver's place: it is classified, mapped and cached per /24 (/48)
// like a resolver, and the response carries the option back with the scope
// the answer holds for. ECS from any other resolver is ignored and the
// response has no ECS option, as from a server that does not take it
// (RFC 7871 §7.3.1: a response without the option counts as scope 0).

var errECS = errors.New("malformed client subnet option")

// ecsOption returns r's client subnet option, nil when it has none, or
// errECS when it is malformed (RFC 7871 §6: FORMERR): more than one, an
// unknown family, a prefix longer than the address, a nonzero scope in a
// query, or address bits set beyond the source prefix.
func ecsOption(r *dns.Msg) (*dns.EDNS0_SUBNET, error) {
	opt := r.IsEdns0()
	if opt == nil {
		return nil, nil
	}
	var found *dns.EDNS0_SUBNET
	for _, o := range opt.Option {
		e, ok := o.(*dns.EDNS0_SUBNET)
		if !ok {
			continue
		}
		if found != nil {
			return nil, errECS
		}
		found = e
	}
	if found == nil {
		return nil, nil
	}
	if _, err := ecsPrefix(found); err != nil {
		return nil, err
	}
	return found, nil
}

// ecsPrefix is the client subnet an option names; the zero prefix for
// SOURCE PREFIX-LENGTH 0, which asks that no client address be used.
func ecsPrefix(e *dns.EDNS0_SUBNET) (netip.Prefix, error) {
	if e.SourceScope != 0 {
		return netip.Prefix{}, errECS
	}
	var a netip.Addr
	switch e.Family {
	case 0:
		// dig sends family 0 with prefix 0; miekg/dns accepts nothing else.
		return netip.Prefix{}, nil
	case 1:
		ip := e.Address.To4()
		if ip == nil {
			return netip.Prefix{}, errECS
		}
		a = netip.AddrFrom4([4]byte(ip))
	case 2:
		ip := e.Address.To16()
		if ip == nil || len(e.Address) != net.IPv6len {
			return netip.Prefix{}, errECS
		}
		a = netip.AddrFrom16([16]byte(ip))
	default:
		return netip.Prefix{}, errECS
	}
	if int(e.SourceNetmask) > a.BitLen() {
		return netip.Prefix{}, errECS
	}
	p := netip.PrefixFrom(a, int(e.SourceNetmask))
	if p.Masked().Addr() != a {
		return netip.Prefix{}, errECS // bits beyond the prefix
	}
	if p.Bits() == 0 {
		return netip.Prefix{}, nil
	}
	return p, nil
}

// trustsECS reports whether resolver is one whose client subnets are used.
func (c *Coral) trustsECS(resolver netip.Addr) bool {
	for _, p := range c.ecs {
		if p.Contains(resolver) {
			return true
		}
	}
	return false
}

// ecsReply is the option for the response to a query with option e whose
// answer was tailored to target (used: it depended on the target at all).
// RFC 7871 §7.2.1: FAMILY, SOURCE PREFIX-LENGTH and ADDRESS as in the
// query; SCOPE PREFIX-LENGTH the bits of the address the answer covers:
// this server places clients per /24 (IPv6 /48), so that many, or 0 when
// the answer is the same for every client or the query asked that no
// client address be used (source 0).
func ecsReply(e *dns.EDNS0_SUBNET, p netip.Prefix, used bool) *dns.EDNS0_SUBNET {
	out := &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: e.Family, SourceNetmask: e.SourceNetmask, Address: e.Address}
	if used && p.IsValid() {
		out.SourceScope = uint8(coraldht.SitePrefix(p.Addr()).Bits())
	}
	return out
}
