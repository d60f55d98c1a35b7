package coral

import (
	"net/netip"

	"github.com/miekg/dns"
)

// responseRecords holds the records of one response in arrays allocated
// with it. A Coralized answer is 2 A, 3 NS and 3 glue records; built one by
// one they were 13 allocations of the 30 a query made (each record and
// each address its own), and allocation with the garbage collection it
// brings was the largest part of the plugin's work per query. The records
// are the response's own (nothing else points into the arrays), and the
// arrays live as long as any of their records does.
//
// The arrays hold the default answer (answers 2, nameservers 3: 5 A and
// 3 NS records) and no more, and the sections' slots that answer with one
// spare in each (the OPT record's, in the additional section): the whole
// is one 640-octet allocation (with 8 A records and 16 slots it was 1,024,
// the largest thing a query allocated). A larger setting allocates its
// extra records one by one, and a section past its slots reallocates.
type responseRecords struct {
	a   [5]dns.A
	ip  [5][4]byte // a[i]'s address
	ns  [3]dns.NS
	rrs [11]dns.RR // the backing array of the message's sections
	na  int
	nns int
}

// addr is an A or AAAA record for a, from the arrays while they last (or
// any time, for a nil rs).
func (rs *responseRecords) addr(owner string, a netip.Addr, ttl uint32) dns.RR {
	a = a.Unmap()
	if rs == nil || !a.Is4() || rs.na == len(rs.a) {
		return addrRR(owner, a, ttl)
	}
	i := rs.na
	rs.na++
	rs.ip[i] = a.As4()
	rs.a[i] = dns.A{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: rs.ip[i][:]}
	return &rs.a[i]
}

// nameserver is an NS record, from the arrays while they last.
func (rs *responseRecords) nameserver(owner, host string, ttl uint32) dns.RR {
	hdr := dns.RR_Header{Name: owner, Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: ttl}
	if rs == nil || rs.nns == len(rs.ns) {
		return &dns.NS{Hdr: hdr, Ns: host}
	}
	e := &rs.ns[rs.nns]
	rs.nns++
	*e = dns.NS{Hdr: hdr, Ns: host}
	return e
}

// sections gives m empty answer, authority and additional sections with
// room for a usual response: appends past that room reallocate, so no
// section ever writes into another's.
func (rs *responseRecords) sections(m *dns.Msg, answers, nameservers int) {
	answers = min(answers+1, 5)
	nameservers = min(nameservers+1, 5)
	m.Answer = rs.rrs[0:0:answers]
	m.Ns = rs.rrs[answers : answers : answers+nameservers]
	m.Extra = rs.rrs[answers+nameservers : answers+nameservers : len(rs.rrs)]
}
