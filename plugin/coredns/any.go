package coral

import "github.com/miekg/dns"

// anyAnswer answers QTYPE ANY minimally (RFC 8482) at the names that have
// data: a zone apex, or a Coralized host name (its challenge name too). ok
// is false for the names whose answer does not depend on the type (NXDOMAIN,
// NODATA at empty non-terminals); name server hosts and names below the
// alias zone handle ANY themselves (nsHostAddr, aliasBelow).
//
// A full answer would be the SOA, NS set and glue at an apex, or addresses,
// NS set and glue at a host name: several times the query's size, which
// made ANY the amplifier of choice. The level zone apexes answer from the
// child side of the cut, as for CAA, rather than with a referral.
func (b *builder) anyAnswer(p parsedName) (kind string, ok bool) {
	switch p.kind {
	case kindCoralApex, kindAliasApex, kindLevelApex:
		return b.hinfoAny(), true
	case kindProxy:
		if !p.above && !p.badOrigin {
			return b.hinfoAny(), true
		}
	}
	return "", false
}

// hinfoAny adds the one synthesized HINFO record of RFC 8482 §4.2. Its TTL
// is the long one (ns_ttl): resolvers need not ask again.
func (b *builder) hinfoAny() string {
	b.m.Answer = append(b.m.Answer, &dns.HINFO{
		Hdr: dns.RR_Header{Name: b.qname, Rrtype: dns.TypeHINFO, Class: dns.ClassINET, Ttl: b.c.set.nsTTL},
		Cpu: "RFC8482", Os: "",
	})
	return respAnswer
}
