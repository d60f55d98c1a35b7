package resolvers

import (
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// RootServerName is the name the i-th entry of Options.RootHints gets in the
// root hints each resolver is given: "a.root-servers.test.",
// "b.root-servers.test.", and so on. A fake root zone must use the same names
// in its apex NS set (RootZone does), or resolvers will re-prime onto
// different names.
func RootServerName(i int) string {
	if i < 0 || i >= 26 {
		panic(fmt.Sprintf("resolvers: root server index %d out of range", i))
	}
	return fmt.Sprintf("%c.root-servers.test.", 'a'+i)
}

// RootZone returns the text of a minimal root zone whose apex SOA and NS
// match the root hints generated for roots (see RootServerName), with glue.
// Append delegations (NS + glue lines) to it and pass it to ParseZone.
func RootZone(roots []netip.Addr) string {
	var b strings.Builder
	b.WriteString("$TTL 86400\n")
	b.WriteString(". 86400 IN SOA a.root-servers.test. hostmaster.root-servers.test. 1 1800 900 604800 300\n")
	for i := range roots {
		fmt.Fprintf(&b, ". 518400 IN NS %s\n", RootServerName(i))
	}
	for i, a := range roots {
		fmt.Fprintf(&b, "%s 518400 IN %s %s\n", RootServerName(i), addrType(a), a.Unmap())
	}
	return b.String()
}

func addrType(a netip.Addr) string {
	if a.Unmap().Is4() {
		return "A"
	}
	return "AAAA"
}

// Zone is the data of one authoritative zone: its apex and every record at
// or below it, including delegation NS sets and their glue.
type Zone struct {
	Origin  string
	Records []dns.RR
}

// ParseZone parses zone-file text (relative names are relative to origin).
// The zone must have an SOA and NS set at its apex.
func ParseZone(origin, text string) (Zone, error) {
	origin = dns.CanonicalName(origin)
	z := Zone{Origin: origin}
	zp := dns.NewZoneParser(strings.NewReader(text), origin, "")
	for rr, ok := zp.Next(); ok; rr, ok = zp.Next() {
		if !dns.IsSubDomain(origin, rr.Header().Name) {
			return Zone{}, fmt.Errorf("zone %s: record out of zone: %s", origin, rr)
		}
		z.Records = append(z.Records, rr)
	}
	if err := zp.Err(); err != nil {
		return Zone{}, fmt.Errorf("zone %s: %w", origin, err)
	}
	var soa, ns bool
	for _, rr := range z.Records {
		if dns.CanonicalName(rr.Header().Name) == origin {
			soa = soa || rr.Header().Rrtype == dns.TypeSOA
			ns = ns || rr.Header().Rrtype == dns.TypeNS
		}
	}
	if !soa || !ns {
		return Zone{}, fmt.Errorf("zone %s: apex needs SOA and NS", origin)
	}
	return z, nil
}

// MustParseZone is ParseZone that panics on error, for tests.
func MustParseZone(origin, text string) Zone {
	z, err := ParseZone(origin, text)
	if err != nil {
		panic(err)
	}
	return z
}

// Query is one query an Authority received.
type Query struct {
	At       time.Time
	From     netip.AddrPort
	Net      string // "udp" or "tcp"
	Name     string // as sent (case preserved, so 0x20 randomisation shows)
	Type     uint16
	DO       bool // EDNS DO bit
	EDNS     bool
	Rcode    int
	Referral bool
}

func (q Query) String() string {
	kind := ""
	if q.Referral {
		kind = " referral"
	}
	return fmt.Sprintf("%s %s %s %s -> %s%s", q.At.Format("15:04:05.000"), q.Net, q.From,
		q.Name+" "+dns.TypeToString[q.Type], dns.RcodeToString[q.Rcode], kind)
}

// Authority is a tiny in-process authoritative DNS server on addr:53 (UDP and
// TCP) serving fixed zones: authoritative answers, NODATA and NXDOMAIN with
// the SOA, referrals (AA=0, NS in authority, glue in additional) at
// delegation points, DS answered by the parent side. No wildcards, no
// DNSSEC. It records every query it gets, so tests can see which resolver
// address asked what.
type Authority struct {
	Addr netip.Addr

	zones map[string]*zoneData // by canonical origin
	udp   *dns.Server
	tcp   *dns.Server
	wg    sync.WaitGroup

	mu       sync.Mutex
	queries  []Query
	closeErr error
	closed   bool
}

type zoneData struct {
	origin string
	rrs    map[string]map[uint16][]dns.RR // canonical owner -> type -> rrset
	exists map[string]bool                // owners and empty non-terminals
}

func newZoneData(z Zone) *zoneData {
	zd := &zoneData{origin: dns.CanonicalName(z.Origin), rrs: map[string]map[uint16][]dns.RR{}, exists: map[string]bool{}}
	for _, rr := range z.Records {
		name := dns.CanonicalName(rr.Header().Name)
		if zd.rrs[name] == nil {
			zd.rrs[name] = map[uint16][]dns.RR{}
		}
		t := rr.Header().Rrtype
		zd.rrs[name][t] = append(zd.rrs[name][t], dns.Copy(rr))
		for n := name; ; {
			zd.exists[n] = true
			if n == zd.origin {
				break
			}
			i, end := dns.NextLabel(n, 0)
			if end {
				break
			}
			n = n[i:]
		}
	}
	return zd
}

// StartAuthority serves zones on addr port 53, UDP and TCP, until Close.
func StartAuthority(addr netip.Addr, zones ...Zone) (*Authority, error) {
	a := &Authority{Addr: addr, zones: map[string]*zoneData{}}
	for _, z := range zones {
		zd := newZoneData(z)
		if _, dup := a.zones[zd.origin]; dup {
			return nil, fmt.Errorf("duplicate zone %s", zd.origin)
		}
		a.zones[zd.origin] = zd
	}
	ap := netip.AddrPortFrom(addr, 53).String()
	pc, err := net.ListenPacket("udp", ap)
	if err != nil {
		return nil, fmt.Errorf("authority %s: %w", ap, err)
	}
	ln, err := net.Listen("tcp", ap)
	if err != nil {
		pc.Close()
		return nil, fmt.Errorf("authority %s: %w", ap, err)
	}
	started := make(chan struct{}, 2)
	notify := func() { started <- struct{}{} }
	a.udp = &dns.Server{PacketConn: pc, Handler: dns.HandlerFunc(a.serve), NotifyStartedFunc: notify, UDPSize: 65535}
	a.tcp = &dns.Server{Listener: ln, Handler: dns.HandlerFunc(a.serve), NotifyStartedFunc: notify}
	errc := make(chan error, 2)
	for _, s := range []*dns.Server{a.udp, a.tcp} {
		a.wg.Add(1)
		go func() {
			defer a.wg.Done()
			if err := s.ActivateAndServe(); err != nil {
				errc <- err
			}
		}()
	}
	for range 2 {
		select {
		case <-started:
		case err := <-errc:
			a.Close()
			return nil, fmt.Errorf("authority %s: %w", ap, err)
		}
	}
	return a, nil
}

// Close stops serving and waits for the server goroutines. Idempotent.
func (a *Authority) Close() error {
	a.mu.Lock()
	if a.closed {
		defer a.mu.Unlock()
		return a.closeErr
	}
	a.closed = true
	a.mu.Unlock()
	err := errors.Join(a.udp.Shutdown(), a.tcp.Shutdown())
	a.wg.Wait()
	a.mu.Lock()
	a.closeErr = err
	a.mu.Unlock()
	return err
}

// Queries returns a copy of every query received so far.
func (a *Authority) Queries() []Query {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.queries)
}

// QueriesFrom returns the queries received from source address from.
func (a *Authority) QueriesFrom(from netip.Addr) []Query {
	var out []Query
	for _, q := range a.Queries() {
		if q.From.Addr().Unmap() == from.Unmap() {
			out = append(out, q)
		}
	}
	return out
}

// QueryLog formats every query received so far, one per line.
func (a *Authority) QueryLog() string {
	var b strings.Builder
	for _, q := range a.Queries() {
		fmt.Fprintf(&b, "%s <- %s\n", a.Addr, q)
	}
	return b.String()
}

// Reset forgets the queries received so far.
func (a *Authority) Reset() {
	a.mu.Lock()
	a.queries = nil
	a.mu.Unlock()
}

func (a *Authority) serve(w dns.ResponseWriter, req *dns.Msg) {
	resp, referral := a.answer(req)
	q := Query{At: time.Now(), Rcode: resp.Rcode, Referral: referral}
	if ap, err := netip.ParseAddrPort(w.RemoteAddr().String()); err == nil {
		q.From = ap
	}
	q.Net = w.RemoteAddr().Network()
	if len(req.Question) > 0 {
		q.Name, q.Type = req.Question[0].Name, req.Question[0].Qtype
	}
	if opt := req.IsEdns0(); opt != nil {
		q.EDNS, q.DO = true, opt.Do()
	}
	a.mu.Lock()
	a.queries = append(a.queries, q)
	a.mu.Unlock()

	if q.Net == "udp" {
		size := dns.MinMsgSize
		if opt := req.IsEdns0(); opt != nil {
			size = max(int(min(opt.UDPSize(), 1232)), dns.MinMsgSize)
		}
		resp.Truncate(size)
	}
	_ = w.WriteMsg(resp)
}

// answer builds the response; referral reports whether it is one.
func (a *Authority) answer(req *dns.Msg) (*dns.Msg, bool) {
	resp := new(dns.Msg)
	resp.SetReply(req)
	resp.Compress = true
	if opt := req.IsEdns0(); opt != nil {
		if opt.Version() != 0 {
			resp.SetRcode(req, dns.RcodeBadVers)
			resp.SetEdns0(1232, false)
			return resp, false
		}
		resp.SetEdns0(1232, opt.Do())
	}
	if req.Opcode != dns.OpcodeQuery {
		resp.Rcode = dns.RcodeNotImplemented
		return resp, false
	}
	if len(req.Question) != 1 || req.Question[0].Qclass != dns.ClassINET {
		resp.Rcode = dns.RcodeRefused
		return resp, false
	}
	q := req.Question[0]
	qname := dns.CanonicalName(q.Name)
	zd := a.findZone(qname)
	if zd == nil {
		resp.Rcode = dns.RcodeRefused
		return resp, false
	}

	// Delegations: the cut closest to the apex wins. At the cut itself, DS
	// belongs to the parent and is answered here.
	if cut := zd.findCut(qname); cut != "" && !(cut == qname && q.Qtype == dns.TypeDS) {
		resp.Authoritative = false
		resp.Ns = append(resp.Ns, zd.rrs[cut][dns.TypeNS]...)
		resp.Extra = append(resp.Extra, zd.glue(zd.rrs[cut][dns.TypeNS])...)
		return resp, true
	}

	resp.Authoritative = true
	name := qname
	for range 8 { // follow in-zone CNAMEs a few times
		set := zd.rrs[name]
		if rrs := set[q.Qtype]; len(rrs) > 0 {
			resp.Answer = append(resp.Answer, rrs...)
			if q.Qtype == dns.TypeNS {
				resp.Extra = append(resp.Extra, zd.glue(rrs)...)
			}
			return resp, false
		}
		if q.Qtype == dns.TypeANY && len(set) > 0 {
			for _, t := range slices.Sorted(maps.Keys(set)) {
				resp.Answer = append(resp.Answer, set[t]...)
			}
			return resp, false
		}
		if cn := set[dns.TypeCNAME]; len(cn) > 0 {
			resp.Answer = append(resp.Answer, cn...)
			target := dns.CanonicalName(cn[0].(*dns.CNAME).Target)
			if !dns.IsSubDomain(zd.origin, target) || zd.findCut(target) != "" {
				return resp, false
			}
			name = target
			continue
		}
		if !zd.exists[name] {
			resp.Rcode = dns.RcodeNameError
		}
		resp.Ns = append(resp.Ns, zd.negativeSOA())
		return resp, false
	}
	return resp, false
}

func (a *Authority) findZone(qname string) *zoneData {
	var best *zoneData
	for origin, zd := range a.zones {
		if dns.IsSubDomain(origin, qname) && (best == nil || dns.CountLabel(origin) > dns.CountLabel(best.origin)) {
			best = zd
		}
	}
	return best
}

// findCut returns the delegation point at or above qname (below the apex)
// closest to the apex, or "".
func (zd *zoneData) findCut(qname string) string {
	labels := dns.SplitDomainName(qname)
	apexLabels := dns.CountLabel(zd.origin)
	for n := apexLabels + 1; n <= len(labels); n++ {
		name := dns.Fqdn(strings.Join(labels[len(labels)-n:], "."))
		if len(zd.rrs[name][dns.TypeNS]) > 0 {
			return name
		}
	}
	return ""
}

func (zd *zoneData) glue(ns []dns.RR) []dns.RR {
	var out []dns.RR
	for _, rr := range ns {
		target := dns.CanonicalName(rr.(*dns.NS).Ns)
		out = append(out, zd.rrs[target][dns.TypeA]...)
		out = append(out, zd.rrs[target][dns.TypeAAAA]...)
	}
	return out
}

func (zd *zoneData) negativeSOA() dns.RR {
	soa := dns.Copy(zd.rrs[zd.origin][dns.TypeSOA][0]).(*dns.SOA)
	soa.Hdr.Ttl = min(soa.Hdr.Ttl, soa.Minttl)
	return soa
}
