// Package coral is the CoreDNS plugin "coral": authoritative DNS for the
// Coral zones. It answers Coralized host names with HTTP proxies near the
// querying resolver, found through this server's own Coral DSHT node, and
// steers resolvers onto Coral name servers near them. See README.md.
package coral

import (
	"context"
	"net"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metrics"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// Coral is the plugin handler.
type Coral struct {
	Next plugin.Handler

	scheme     *scheme
	set        settings
	classifier *classifier
	tracker    *tracker
	prox       *proximity // nil: proximity off
	cookies    *serverCookies
	rrl        *rateLimiter // nil: responses are not rate limited
	self       netip.Addr   // this server's advertised address (SOA MNAME, its own NS glue)

	hosts     sync.Map // netip.Addr → its ns-… host name, built once per server
	hostCount atomic.Int32

	cfg     *config
	entry   *nodeEntry
	cancel  context.CancelFunc
	done    chan struct{}
	closers []func() error
	// drainDone is closed when the drain_file watch has returned.
	drainDone chan struct{}
	// challenges answers the alias zone's ACME challenge (nil without an
	// alias zone).
	challenges *challenges
	// ecs are the resolvers whose EDNS Client Subnet is used (ecs.go).
	ecs []netip.Prefix
	// noTarget makes choices ignore the target's /24: the paper's nodes()
	// without a target, for the experiments' baselines (simulate.go).
	noTarget bool
}

// settings are the response knobs, all parsed from the Corefile.
type settings struct {
	answerTTL   []uint32      // per level
	nsTTL       uint32        // NS, glue, DNAME and CNAME
	negTTL      uint32        // NXDOMAIN and NODATA
	retryTTL    uint32        // NODATA for a level zone above the resolver's level
	answers     int           // proxies per answer
	nameservers int           // name servers per NS set
	caa         []caaProperty // the zone apexes' CAA records
}

// Name implements plugin.Handler.
func (c *Coral) Name() string { return "coral" }

// response kinds, the "kind" label of the queries metric.
const (
	respAnswer   = "answer"
	respReferral = "referral"
	respNoData   = "nodata"
	respNXDomain = "nxdomain"
	respYXDomain = "yxdomain"
	respFormErr  = "formerr"
	respRefused  = "refused"
	respNotImp   = "notimp"
	respBadVers  = "badvers"
	respServFail = "servfail"
)

// ednsUDPSize is the EDNS UDP payload size this server advertises, and the
// most it sends over UDP to any client: the DNS Flag Day 2020 value, which
// an IPv6 path carries unfragmented.
const ednsUDPSize = 1232

// ServeDNS implements plugin.Handler.
func (c *Coral) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	state := request.Request{W: w, Req: r}
	p, ok := c.scheme.parse(state.Name())
	if !ok {
		return plugin.NextOrFailure(c.Name(), c.Next, ctx, w, r)
	}
	server := metrics.WithServer(ctx)
	client := remoteAddr(w)

	rcode, kind := screen(r, state.Proto())
	verdict, clientCookie := cookieNone, []byte(nil)
	if c.cookies != nil && rcode != dns.RcodeBadVers && rcode != dns.RcodeFormatError {
		// The options of an EDNS version we do not know, or of a request
		// with several OPT records, mean nothing.
		verdict, clientCookie = c.cookies.check(r, client)
	}
	if rcode == dns.RcodeSuccess && verdict == cookieMalformed {
		// RFC 7873 §5.2.2: a malformed COOKIE option is a format error,
		// answered without a cookie.
		rcode, kind, clientCookie = dns.RcodeFormatError, respFormErr, nil
	}
	target, ecs, ecsNet := client, (*dns.EDNS0_SUBNET)(nil), netip.Prefix{}
	if rcode == dns.RcodeSuccess && len(c.ecs) > 0 && c.trustsECS(client) {
		var err error
		if ecs, err = ecsOption(r); err != nil {
			rcode, kind = dns.RcodeFormatError, respFormErr // RFC 7871 §6
		} else if ecs != nil {
			if ecsNet, _ = ecsPrefix(ecs); ecsNet.IsValid() {
				target = ecsNet.Addr()
			}
		}
	}
	if rcode != dns.RcodeSuccess {
		m := new(dns.Msg)
		m.SetRcode(r, rcode)
		c.send(server, w, &state, m, kind, clientCookie, client, verdict, nil)
		queryCount.WithLabelValues(server, "none", kind).Inc()
		return dns.RcodeSuccess, nil
	}

	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	m.Compress = true

	b := builder{c: c, m: m, state: &state, ctx: ctx, client: client, target: target}
	kind = b.respond(p)
	var ecsOut *dns.EDNS0_SUBNET
	if ecs != nil {
		ecsOut = ecsReply(ecs, ecsNet, b.done || b.nearState != 0)
	}
	c.send(server, w, &state, m, kind, clientCookie, client, verdict, ecsOut)
	queryCount.WithLabelValues(server, b.levelLabel(), kind).Inc()
	return dns.RcodeSuccess, nil
}

// screen returns the error response a request in our zones gets before its
// name is looked at (RcodeSuccess: none), with its metric kind. The first
// three checks are the ones CoreDNS's server makes itself, in its order, so
// that a request gets the same answer whether it came through the server or
// the plugin was called directly; the server only lets another class
// through when a plugin such as chaos or forward is in the server, and lets
// NOTIFY through always.
func screen(r *dns.Msg, proto string) (int, string) {
	switch {
	case r.Question[0].Qclass != dns.ClassINET:
		// The zones exist in class IN only; CHAOS included.
		return dns.RcodeRefused, respRefused
	case r.IsEdns0() != nil && r.IsEdns0().Version() != 0:
		return dns.RcodeBadVers, respBadVers // RFC 6891 §6.1.3
	case r.Opcode != dns.OpcodeQuery:
		// NOTIFY, UPDATE and the rest: there are no secondaries to notify
		// and nothing to update.
		return dns.RcodeNotImplemented, respNotImp
	case countOPT(r) > 1:
		return dns.RcodeFormatError, respFormErr // RFC 6891 §6.1.1
	}
	switch r.Question[0].Qtype {
	case dns.TypeAXFR, dns.TypeIXFR:
		// The zones are synthesized per resolver: there is nothing to
		// transfer. Over TCP that is policy (REFUSED, as CoreDNS's
		// transfer plugin answers a transfer it does not allow); over UDP,
		// where AXFR is not defined (RFC 5936 §4.2), it is not implemented.
		if proto == "tcp" {
			return dns.RcodeRefused, respRefused
		}
		return dns.RcodeNotImplemented, respNotImp
	}
	return dns.RcodeSuccess, ""
}

// send writes m, of metric kind kind, unless response rate limiting holds
// it back. Only UDP is limited: over TCP, and with a valid server cookie
// (RFC 7873: one this server gave that address), the client has shown that
// it owns its address, so it is no reflector's victim. A dropped response is
// no response at all: CoreDNS writes nothing for a plugin that returns
// success without writing.
func (c *Coral) send(server string, w dns.ResponseWriter, state *request.Request, m *dns.Msg, kind string, clientCookie []byte, client netip.Addr, verdict cookieVerdict, ecs *dns.EDNS0_SUBNET) {
	if c.rrl != nil && state.Proto() == "udp" && verdict != cookieValid {
		cat := rrlCategoryOf(kind)
		switch c.rrl.decide(client, cat) {
		case rrlDrop:
			rrlDropped.WithLabelValues(server, cat.String()).Inc()
			return
		case rrlSlip:
			rrlSlipped.WithLabelValues(server, cat.String()).Inc()
			m, ecs = slipped(state.Req), nil
		}
	}
	c.write(w, state, m, clientCookie, client, ecs)
}

// write sends m. A response to an EDNS request carries an OPT with this
// server's own UDP size (and the cookie, when the request had a usable
// one, and ecs, the client subnet option, when there is one); every response is truncated to what the client takes: 512 octets
// without EDNS, over UDP the smaller of the client's size and ours.
func (c *Coral) write(w dns.ResponseWriter, state *request.Request, m *dns.Msg, clientCookie []byte, client netip.Addr, ecs *dns.EDNS0_SUBNET) {
	limit := dns.MinMsgSize
	ro := state.Req.IsEdns0()
	if ro != nil {
		opt := &dns.OPT{Hdr: dns.RR_Header{Name: ".", Rrtype: dns.TypeOPT}}
		opt.SetUDPSize(ednsUDPSize)
		if ro.Do() && m.Rcode != dns.RcodeBadVers {
			opt.SetDo()
		}
		if ecs != nil {
			opt.Option = append(opt.Option, ecs)
		}
		m.Extra = append(m.Extra, opt)
		if clientCookie != nil {
			c.cookies.attach(m, clientCookie, client)
		}
		limit = min(max(int(ro.UDPSize()), dns.MinMsgSize), ednsUDPSize)
	}
	if state.Proto() == "tcp" {
		limit = dns.MaxMsgSize
	}
	m.Truncate(limit)
	if ro != nil && ro.UDPSize() != ednsUDPSize {
		// CoreDNS's server writes every response through a
		// request.ScrubWriter, which sets the response OPT's size to the
		// one in the request and truncates to that. For the length of the
		// write the request says ours, so the response advertises 1232;
		// the request is as it was again before any plugin in front of
		// this one (log, metrics) looks at it. The scrubber's truncation
		// to 1232 leaves m as it is, except that it turns compression off
		// when m fits 1232 octets without it: for a client that takes
		// less, m must fit uncompressed.
		if limit < ednsUDPSize && m.Compress {
			shrink(m, limit)
		}
		orig := ro.UDPSize()
		ro.SetUDPSize(ednsUDPSize)
		defer ro.SetUDPSize(orig)
	}
	_ = w.WriteMsg(m)
}

// shrink drops records from the end of m until it fits limit octets
// without compression, setting TC when it drops any (as Msg.Truncate does).
func shrink(m *dns.Msg, limit int) {
	m.Compress = false
	opt := m.IsEdns0()
	extra := m.Extra[:0]
	for _, rr := range m.Extra {
		if rr != opt {
			extra = append(extra, rr)
		}
	}
	m.Extra = extra
	if opt != nil {
		limit -= dns.Len(opt)
	}
	for m.Len() > limit {
		var sec *[]dns.RR
		for _, s := range []*[]dns.RR{&m.Extra, &m.Ns, &m.Answer} {
			if len(*s) > 0 {
				sec = s
				break
			}
		}
		if sec == nil {
			break // the question alone
		}
		*sec = (*sec)[:len(*sec)-1]
		m.Truncated = true
	}
	if opt != nil {
		m.Extra = append(m.Extra, opt)
	}
}

// remoteAddr is the querying resolver's address.
func remoteAddr(w dns.ResponseWriter) netip.Addr {
	var ap netip.AddrPort
	switch a := w.RemoteAddr().(type) {
	case *net.UDPAddr:
		ap = a.AddrPort()
	case *net.TCPAddr:
		ap = a.AddrPort()
	default:
		ap, _ = netip.ParseAddrPort(w.RemoteAddr().String())
	}
	return ap.Addr().Unmap()
}

func countOPT(r *dns.Msg) int {
	n := 0
	for _, rr := range r.Extra {
		if rr.Header().Rrtype == dns.TypeOPT {
			n++
		}
	}
	return n
}

// builder fills in one response.
type builder struct {
	c      *Coral
	m      *dns.Msg
	state  *request.Request
	ctx    context.Context
	client netip.Addr // the querying resolver
	target netip.Addr // whom the answer is for: the resolver, or its client's subnet (ECS)
	cls    classification
	done   bool // cls is set

	// The proximity mapping of target, started with the classification so
	// that a new prefix waits for both at once.
	near      []nearNode
	nearCall  *nearCall // a mapping this query may wait for, until nearUntil
	nearUntil time.Time
	nearSrc   string
	nearState int // 0 not started, 1 started, 2 known
}

// level classifies the target once per query.
func (b *builder) level() int {
	if !b.done {
		b.startNear()
		b.cls = b.c.classifier.classify(b.ctx, b.target)
		b.done = true
		classifyCount.WithLabelValues(b.cls.source).Inc()
	}
	return b.cls.level
}

func (b *builder) levelLabel() string {
	if !b.done {
		return "none"
	}
	return strconv.Itoa(b.cls.level)
}

// respond fills in the response for p and returns its metric kind.
func (b *builder) respond(p parsedName) string {
	switch b.state.QType() {
	case dns.TypeANY:
		if kind, ok := b.anyAnswer(p); ok {
			return kind
		}
	case dns.TypeCAA:
		if kind, ok := b.caaAt(p); ok {
			return kind
		}
	}
	switch p.kind {
	case kindNX:
		if p.level < 0 {
			return b.nxdomain(-1)
		}
		return b.nxdomain(min(p.level, b.level()))
	case kindCoralApex:
		return b.coralApex()
	case kindNSHost:
		return b.nsHostAddr(p.nsAddr)
	case kindLevelApex:
		return b.levelApex(p.level)
	case kindServiceENT:
		return b.nodata(min(p.level, b.level()), b.c.set.negTTL)
	case kindProxy:
		switch {
		case p.challenge:
			return b.challenge(b.state.QName(), min(p.level, b.level()))
		case p.above:
			return b.nodata(min(p.level, b.level()), b.c.set.negTTL)
		case p.badOrigin:
			return b.nxdomain(min(p.level, b.level()))
		}
		return b.proxies(b.state.QName(), b.state.QType(), p.level, true)
	case kindAliasApex:
		return b.aliasApex()
	case kindAliasBelow:
		return b.aliasBelow(p)
	}
	return b.nxdomain(-1)
}

// coralApex answers for the coral zone's apex.
func (b *builder) coralApex() string {
	switch b.state.QType() {
	case dns.TypeSOA:
		b.m.Answer = append(b.m.Answer, b.soa(-1, b.c.set.negTTL))
		return respAnswer
	case dns.TypeNS:
		b.nsSet(b.c.scheme.coral, b.level(), true)
		return respAnswer
	}
	return b.nodata(-1, b.c.set.negTTL)
}

// nsHostAddr answers for ns-<ip>.Z, the name server host at a.
func (b *builder) nsHostAddr(a netip.Addr) string {
	qtype := b.state.QType()
	switch b.c.tracker.isNameServer(a, b.c.self) {
	case nsUnknown:
		// Not a Coral name server: the names do not turn the zone into
		// a name for any address (DNS rebinding, borrowed reputation).
		return b.nxdomain(-1)
	case nsNotYet:
		// The node has not yet heard who the name servers are; a
		// negative answer now would be cached. Resolvers try another
		// server.
		b.m.Rcode = dns.RcodeServerFailure
		b.m.Authoritative = false
		return respServFail
	}
	if qtype == dns.TypeANY {
		return b.hinfoAny() // RFC 8482
	}
	if qtype == dns.TypeA && a.Is4() || qtype == dns.TypeAAAA && a.Is6() {
		b.m.Answer = append(b.m.Answer, addrRR(b.state.QName(), a, b.c.set.nsTTL))
		return respAnswer
	}
	return b.nodata(-1, b.c.set.negTTL)
}

// levelApex answers for L<k>…L0.Z, the apex of level k's zone.
func (b *builder) levelApex(k int) string {
	if b.state.QType() == dns.TypeDS {
		// DS lives on the parent side of the cut.
		return b.nodata(min(k-1, b.level()), b.c.set.negTTL)
	}
	if b.level() < k {
		// For this resolver the level-k zone does not exist here: the name
		// is an empty non-terminal of the resolver's own level zone. The
		// short TTL makes the resolver ask again soon, maybe a nearer
		// server by then.
		return b.nodata(b.level(), b.c.set.retryTTL)
	}
	// A genuine referral (not authoritative, NS and glue, no SOA) is the
	// one shape every current resolver accepts for moving to the child
	// zone's servers: these are this node's level-k cluster, chosen near
	// the resolver.
	b.m.Authoritative = false
	b.nsSet(b.c.scheme.levelApex[k], k, false)
	return respReferral
}

// aliasApex answers for the alias zone's apex.
func (b *builder) aliasApex() string {
	switch b.state.QType() {
	case dns.TypeSOA:
		b.m.Answer = append(b.m.Answer, b.aliasSOA())
		return respAnswer
	case dns.TypeNS:
		b.nsSet(b.c.scheme.alias, b.level(), true)
		return respAnswer
	case dns.TypeDNAME:
		b.m.Answer = append(b.m.Answer, b.dname())
		return respAnswer
	}
	b.m.Ns = append(b.m.Ns, b.aliasSOA())
	return respNoData
}

// aliasBelow answers for <origin>.A: the DNAME, the CNAME it synthesizes,
// and the target's answer.
func (b *builder) aliasBelow(p parsedName) string {
	s := b.c.scheme
	qtype := b.state.QType()
	target, ok := s.aliasTarget(p.rel)
	b.m.Answer = append(b.m.Answer, b.dname())
	if !ok {
		// RFC 6672 §2.2: the substituted name would be too long.
		b.m.Rcode = dns.RcodeYXDomain
		return respYXDomain
	}
	b.m.Answer = append(b.m.Answer, &dns.CNAME{
		Hdr:    dns.RR_Header{Name: b.state.QName(), Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: b.c.set.nsTTL},
		Target: target,
	})
	if qtype == dns.TypeANY {
		// ANY matches the CNAME, so the answer ends there (RFC 1034
		// §4.3.2), without the NS set: minimal, as RFC 8482 asks.
		return respAnswer
	}
	top := len(s.levelApex) - 1
	if p.challenge {
		return b.challenge(target, min(top, b.level()))
	}
	if p.badOrigin {
		// No address for an origin the proxy refuses; NODATA where names
		// may lie below (coralname.Zones.Above), else NXDOMAIN.
		b.m.Ns = append(b.m.Ns, b.soa(min(top, b.level()), b.c.set.negTTL))
		if p.above {
			return respNoData
		}
		b.m.Rcode = dns.RcodeNameError
		return respNXDomain
	}
	// This server is authoritative for the target too, so it follows the
	// CNAME itself. Resolvers check that against the target's own servers,
	// which is where their locking happens.
	kind := respAnswer
	if qtype != dns.TypeCNAME && qtype != dns.TypeDNAME {
		kind = b.proxies(target, qtype, top, false)
	}
	if kind == respAnswer {
		// The alias zone's own NS set, from the resolver's level cluster:
		// the NS set of the zone being asked is authority data every
		// resolver keeps, so resolvers that do not synthesize names from
		// a cached DNAME come back to servers near them for the next name.
		b.nsSet(s.alias, min(b.level(), top), false)
	}
	return kind
}

// proxies answers a Coralized host name with HTTP proxies from the
// resolver's level cluster, falling back to lower levels rather than
// answering empty. withAuthority adds the paper's authority section: name
// servers of the same cluster for the resolver's level zone, with a long TTL.
func (b *builder) proxies(owner string, qtype uint16, nameLevel int, withAuthority bool) string {
	zone := min(nameLevel, b.level())
	family := 0
	switch qtype {
	case dns.TypeA:
		family = 4
	case dns.TypeAAAA:
		family = 6
	default:
		return b.nodata(zone, b.c.set.negTTL)
	}
	used, nodes := b.c.pickProxies(b.ctx, b.level(), b.nearAddr(), b.nearby(), family)
	if len(nodes) == 0 {
		return b.nodata(zone, b.c.set.retryTTL)
	}
	ttl := b.c.set.answerTTL[used]
	for _, ni := range nodes {
		b.m.Answer = append(b.m.Answer, addrRR(owner, ni.Addr.Addr(), ttl))
	}
	if withAuthority {
		b.nsSet(b.c.scheme.zoneApex(zone), zone, false)
	}
	return respAnswer
}

// pickProxies chooses proxies for a resolver at level lvl: from the sweep at
// lvl, lvl-1, …, 0, then the same levels synchronously. It returns the level
// the proxies came from.
func (c *Coral) pickProxies(ctx context.Context, lvl int, near netip.Addr, ranked []nearNode, family int) (int, []coraldht.NodeInfo) {
	o := pickOptions{count: c.set.answers, near: near, services: coraldht.ServiceHTTP, family: family, ranked: ranked}
	if !c.tracker.ready() {
		// Just started: the first sweep is under way. Waiting for it (a
		// little) beats answering with nothing, which resolvers would cache.
		t := time.NewTimer(c.tracker.syncWait)
		select {
		case <-c.tracker.swept:
		case <-t.C:
		case <-ctx.Done():
		}
		t.Stop()
	}
	for l := lvl; l >= 0; l-- {
		o.level = l
		if nodes := c.tracker.pick(o); len(nodes) > 0 {
			return l, nodes
		}
	}
	for l := lvl; l >= 0; l-- {
		o.level = l
		if nodes := c.tracker.pickSync(ctx, o); len(nodes) > 0 {
			staleAnswers.Inc()
			return l, nodes
		}
	}
	return 0, nil
}

// nsSet adds an NS RRset for owner with name servers of this node's level
// cluster near the resolver, and their addresses as glue. inAnswer puts the
// NS records in the answer section (a query for them) rather than the
// authority section (a referral or the paper's lock).
func (b *builder) nsSet(owner string, level int, inAnswer bool) {
	o := pickOptions{level: level, count: b.c.set.nameservers, near: b.nearAddr(), services: coraldht.ServiceDNS, nearOnly: true, ranked: b.nearby()}
	servers := b.c.tracker.pick(o)
	if !containsSelf(servers) && len(servers) < min(o.count, minNear) {
		// This server always serves its own clusters; it is added when the
		// sweep found too few others.
		servers = append(servers, coraldht.NodeInfo{Contact: coraldht.Contact{Addr: netip.AddrPortFrom(b.c.self, 53)}, Self: true})
	}
	// A delegation wants two servers (RFC 2182 §5): a resolver caches the
	// set for ns_ttl, and if its only server dies, the resolver has no
	// answer for that long (it does not go back to the parent). So a
	// cluster with one live name server is topped up with the nearest of
	// the levels below; every Coral server answers for every level zone.
	want := min(o.count, minNSSet)
	for l := level - 1; len(servers) < want && l >= 0; l-- {
		lower := o
		lower.level = l
		for _, ni := range b.c.tracker.pick(lower) {
			if len(servers) < want && !containsAddr(servers, ni.Addr.Addr()) {
				servers = append(servers, ni)
			}
		}
	}
	ttl := b.c.set.nsTTL
	if len(servers) < want {
		// This server knows no other (a network starting up, or cut
		// off): the set is provisional, so resolvers ask again after
		// retry_ttl and get the full set once the sweep has found it.
		ttl = min(ttl, b.c.set.retryTTL)
	}
	if b.nearSrc == nearPending {
		// Chosen before the client's mapping was in: a resolver locked
		// onto this set for ns_ttl would not see the refined one.
		ttl = min(ttl, b.c.set.retryTTL)
	}
	for _, ni := range servers {
		a := ni.Addr.Addr().Unmap()
		host := b.c.hostName(a)
		ns := &dns.NS{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: ttl}, Ns: host}
		if inAnswer {
			b.m.Answer = append(b.m.Answer, ns)
		} else {
			b.m.Ns = append(b.m.Ns, ns)
		}
		b.m.Extra = append(b.m.Extra, addrRR(host, a, ttl))
	}
}

// minNSSet is the size of the smallest NS set handed out while this node
// knows that many name servers (RFC 2182 §5), unless nameservers is
// smaller.
const minNSSet = 2

// maxHostNames bounds the remembered name server host names.
const maxHostNames = 4096

// hostName is scheme.nsHost, remembered: name servers recur in every answer.
func (c *Coral) hostName(a netip.Addr) string {
	if h, ok := c.hosts.Load(a); ok {
		return h.(string)
	}
	h := c.scheme.nsHost(a)
	if c.hostCount.Add(1) > maxHostNames {
		// Members come and go over months; start afresh now and then.
		c.hosts.Clear()
		c.hostCount.Store(0)
	}
	c.hosts.Store(a, h)
	return h
}

func addrRR(owner string, a netip.Addr, ttl uint32) dns.RR {
	a = a.Unmap()
	if a.Is4() {
		return &dns.A{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: a.AsSlice()}
	}
	return &dns.AAAA{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeAAAA, Class: dns.ClassINET, Ttl: ttl}, AAAA: a.AsSlice()}
}

// soa is the SOA of level k's zone (k = -1: the coral zone). Its TTL and
// MINIMUM are both ttl, which makes ttl the negative-caching time.
func (b *builder) soa(k int, ttl uint32) dns.RR {
	s := b.c.scheme
	return &dns.SOA{
		Hdr:     dns.RR_Header{Name: s.zoneApex(k), Rrtype: dns.TypeSOA, Class: dns.ClassINET, Ttl: ttl},
		Ns:      s.nsHost(b.c.self),
		Mbox:    "hostmaster." + s.coral,
		Serial:  1,
		Refresh: 3600,
		Retry:   600,
		Expire:  86400,
		Minttl:  ttl,
	}
}

func (b *builder) aliasSOA() dns.RR {
	rr := b.soa(-1, b.c.set.negTTL).(*dns.SOA)
	rr.Hdr.Name = b.c.scheme.alias
	return rr
}

func (b *builder) dname() dns.RR {
	s := b.c.scheme
	return &dns.DNAME{Hdr: dns.RR_Header{Name: s.alias, Rrtype: dns.TypeDNAME, Class: dns.ClassINET, Ttl: b.c.set.nsTTL}, Target: s.target}
}

func (b *builder) nodata(k int, ttl uint32) string {
	b.m.Ns = append(b.m.Ns, b.soa(k, ttl))
	return respNoData
}

func (b *builder) nxdomain(k int) string {
	b.m.Rcode = dns.RcodeNameError
	b.m.Ns = append(b.m.Ns, b.soa(k, b.c.set.negTTL))
	return respNXDomain
}
