package coral

import (
	"context"
	"net/netip"
	"strconv"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// Building a response (ServeDNS in coral.go decides which): the builder
// fills in the answer, authority and additional sections for a parsed name
// at a level: proxies, the name servers of a level, SOA, DNAME.

// builder fills in one response.
type builder struct {
	c      *Coral
	m      *dns.Msg
	state  request.Request
	qname  string // the question's name, as asked
	ctx    context.Context
	client netip.Addr // the querying resolver
	target netip.Addr // whom the answer is for: the resolver, or its client's subnet (ECS)
	cls    classification
	done   bool // cls is set

	who       asker      // the query's source and what it proved (proof.go)
	needProof bool       // a probe was needed that who may not start
	place     place      // the metrics' labels
	info      *queryInfo // what the answer was based on, for metadata; nil: none asked

	// The proximity mapping of target, started with the classification so
	// that a new prefix waits for both at once.
	near      []nearNode
	nearCall  *measuring[nearMapping] // a mapping this query may wait for, until nearUntil
	nearUntil time.Time
	nearSrc   string
	nearState int // 0 not started, 1 started, 2 known

	recs *responseRecords // the response's records (records.go)

	at time.Time // the tracker's clock, read once per query (clock)
}

// clock is the tracker's time for this query: every pick of an answer
// judges liveness at the same instant, and reads the clock once.
func (b *builder) clock() time.Time {
	if b.at.IsZero() {
		b.at = b.c.tracker.now()
	}
	return b.at
}

// level classifies the target once per query.
func (b *builder) level() int {
	if !b.done {
		b.startNear()
		b.cls = b.c.classifier.classify(b.ctx, b.target, b.who)
		b.done = true
		if b.cls.source == "unproven" {
			b.needProof = true
		}
		b.place.countClassification(b.cls.source)
		b.info.setLevel(b.cls.level)
	}
	return b.cls.level
}

// levelOrNone is the resolver's level, or -1 when the answer did not
// depend on it.
func (b *builder) levelOrNone() int {
	if !b.done {
		return -1
	}
	return b.cls.level
}

// levelLabel is the level label of the queries metric for level (-1:
// "none").
func levelLabel(level int) string {
	if level < 0 {
		return "none"
	}
	return strconv.Itoa(level)
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
			return b.challenge(b.qname, min(p.level, b.level()))
		case p.above:
			return b.nodata(min(p.level, b.level()), b.c.set.negTTL)
		case p.badOrigin:
			return b.nxdomain(min(p.level, b.level()))
		}
		return b.proxies(b.qname, b.state.QType(), p.level, true)
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
		b.m.Answer = append(b.m.Answer, addrRR(b.qname, a, b.c.set.nsTTL))
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
		Hdr:    dns.RR_Header{Name: b.qname, Rrtype: dns.TypeCNAME, Class: dns.ClassINET, Ttl: b.c.set.nsTTL},
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
	var buf [pickRoom]*coraldht.NodeInfo
	o := b.measuredNear(pickOptions{count: b.c.set.answers, near: b.nearAddr(), services: coraldht.ServiceHTTP, family: family, ranked: b.nearby(), now: b.clock()})
	used, nodes := b.c.pickProxies(b.ctx, b.place, b.level(), o, buf[:0])
	if len(nodes) == 0 {
		return b.nodata(zone, b.c.set.retryTTL)
	}
	ttl := b.c.set.answerTTL[used]
	for _, ni := range nodes {
		b.m.Answer = append(b.m.Answer, b.recs.addr(owner, ni.Addr.Addr(), ttl))
	}
	if withAuthority {
		b.nsSet(b.c.scheme.zoneApex(zone), zone, false)
	}
	return respAnswer
}

// pickProxies chooses proxies for a resolver at level lvl: from the sweep at
// lvl, lvl-1, …, 0, first among the proxies with room (pickUnloaded), then
// among all, then the same levels synchronously. It returns the level
// the proxies came from, and the proxies, appended to buf.
func (c *Coral) pickProxies(ctx context.Context, pl place, lvl int, o pickOptions, buf []*coraldht.NodeInfo) (int, []*coraldht.NodeInfo) {
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
	l, nodes, ok := c.pickUnloaded(pl, lvl, o, buf)
	if ok {
		return l, nodes
	}
	for l := lvl; l >= 0; l-- {
		o.level = l
		if nodes := c.tracker.pick(o, buf); len(nodes) > 0 {
			if c.set.loadThreshold > 0 {
				loadAnswers.WithLabelValues(pl.labels(loadAllLoaded)...).Inc()
			}
			return l, nodes
		}
	}
	for l := lvl; l >= 0; l-- {
		o.level = l
		if nodes := c.tracker.pickSync(ctx, o, buf); len(nodes) > 0 {
			staleAnswers.WithLabelValues(pl.labels()...).Inc()
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
	o := b.measuredNear(pickOptions{level: level, count: b.c.set.nameservers, near: b.nearAddr(), services: coraldht.ServiceDNS, nearOnly: true, ranked: b.nearby(), now: b.clock()})
	var buf, lowerBuf [pickRoom]*coraldht.NodeInfo
	servers := b.c.tracker.pick(o, buf[:0])
	if !containsSelf(servers) && len(servers) < min(o.count, minNear) {
		// This server always serves its own clusters; it is added when the
		// sweep found too few others.
		servers = append(servers, &coraldht.NodeInfo{Contact: coraldht.Contact{Addr: netip.AddrPortFrom(b.c.self, 53)}, Self: true})
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
		for _, ni := range b.c.tracker.pick(lower, lowerBuf[:0]) {
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
	if b.nearSrc == nearPending || b.nearSrc == nearSkipped {
		// Chosen before the client's mapping was in (it is under way,
		// or starts with the next query: proximity_limit mappings were
		// in flight, as when a fleet starts and every resolver comes
		// at once): a resolver locked onto this set for ns_ttl would
		// not see the refined one.
		ttl = min(ttl, b.c.set.retryTTL)
	}
	for _, ni := range servers {
		a := ni.Addr.Addr().Unmap()
		host := b.c.hostName(a)
		ns := b.recs.nameserver(owner, host, ttl)
		if inAnswer {
			b.m.Answer = append(b.m.Answer, ns)
		} else {
			b.m.Ns = append(b.m.Ns, ns)
		}
		b.m.Extra = append(b.m.Extra, b.recs.addr(host, a, ttl))
	}
}

// pickRoom is how many picked members fit the arrays an answer picks into
// on its stack: the default answers and nameservers, and then some. A
// larger setting only costs an allocation.
const pickRoom = 8

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
