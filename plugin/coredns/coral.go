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
	cookies    *serverCookies
	self       netip.Addr // this server's advertised address (SOA MNAME, its own NS glue)

	hosts     sync.Map // netip.Addr → its ns-… host name, built once per server
	hostCount atomic.Int32

	cfg     *config
	entry   *nodeEntry
	cancel  context.CancelFunc
	done    chan struct{}
	closers []func() error
}

// settings are the response knobs, all parsed from the Corefile.
type settings struct {
	answerTTL   []uint32 // per level
	nsTTL       uint32   // NS, glue, DNAME and CNAME
	negTTL      uint32   // NXDOMAIN and NODATA
	retryTTL    uint32   // NODATA for a level zone above the resolver's level
	answers     int      // proxies per answer
	nameservers int      // name servers per NS set
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
)

// ServeDNS implements plugin.Handler.
func (c *Coral) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	state := request.Request{W: w, Req: r}
	p, ok := c.scheme.parse(state.Name())
	if !ok {
		return plugin.NextOrFailure(c.Name(), c.Next, ctx, w, r)
	}
	server := metrics.WithServer(ctx)
	client := remoteAddr(w)

	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	m.Compress = true

	verdict, clientCookie := cookieNone, []byte(nil)
	if c.cookies != nil {
		verdict, clientCookie = c.cookies.check(r, client)
	}
	if verdict == cookieMalformed || countOPT(r) > 1 {
		// RFC 7873 §5.2.2 and RFC 6891 §6.1.1: a malformed COOKIE option or
		// more than one OPT record is a format error.
		m.SetRcode(r, dns.RcodeFormatError)
		m.Authoritative = false
		_ = w.WriteMsg(m)
		queryCount.WithLabelValues(server, "none", respFormErr).Inc()
		return dns.RcodeSuccess, nil
	}

	b := builder{c: c, m: m, state: &state, ctx: ctx, client: client}
	kind := b.respond(p)

	if o := r.IsEdns0(); o != nil {
		m.SetEdns0(max(o.UDPSize(), dns.MinMsgSize), o.Do())
		if clientCookie != nil {
			c.cookies.attach(m, clientCookie, client)
		}
	}
	_ = w.WriteMsg(m)
	queryCount.WithLabelValues(server, b.levelLabel(), kind).Inc()
	return dns.RcodeSuccess, nil
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
	client netip.Addr
	cls    classification
	done   bool // cls is set
}

// level classifies the resolver once per query.
func (b *builder) level() int {
	if !b.done {
		b.cls = b.c.classifier.classify(b.ctx, b.client)
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

func (b *builder) respond(p parsedName) string {
	qtype := b.state.QType()
	s := b.c.scheme
	switch p.kind {
	case kindNX:
		if p.level < 0 {
			return b.nxdomain(-1)
		}
		return b.nxdomain(min(p.level, b.level()))

	case kindCoralApex:
		switch qtype {
		case dns.TypeSOA, dns.TypeANY:
			b.m.Answer = append(b.m.Answer, b.soa(-1, b.c.set.negTTL))
			return respAnswer
		case dns.TypeNS:
			b.nsSet(s.coral, b.level(), true)
			return respAnswer
		}
		return b.nodata(-1, b.c.set.negTTL)

	case kindNSHost:
		a := p.nsAddr
		if (qtype == dns.TypeA || qtype == dns.TypeANY) && a.Is4() || (qtype == dns.TypeAAAA || qtype == dns.TypeANY) && a.Is6() {
			b.m.Answer = append(b.m.Answer, addrRR(b.state.QName(), a, b.c.set.nsTTL))
			return respAnswer
		}
		return b.nodata(-1, b.c.set.negTTL)

	case kindLevelApex:
		k := p.level
		if qtype == dns.TypeDS {
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
		b.nsSet(s.levelApex[k], k, false)
		return respReferral

	case kindServiceENT:
		return b.nodata(min(p.level, b.level()), b.c.set.negTTL)

	case kindProxy:
		if p.badOrigin {
			return b.nxdomain(min(p.level, b.level()))
		}
		return b.proxies(b.state.QName(), qtype, p.level, true)

	case kindAliasApex:
		switch qtype {
		case dns.TypeSOA, dns.TypeANY:
			b.m.Answer = append(b.m.Answer, b.aliasSOA())
			return respAnswer
		case dns.TypeNS:
			b.nsSet(s.alias, b.level(), true)
			return respAnswer
		case dns.TypeDNAME:
			b.m.Answer = append(b.m.Answer, b.dname())
			return respAnswer
		}
		b.m.Ns = append(b.m.Ns, b.aliasSOA())
		return respNoData

	case kindAliasBelow:
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
		top := len(s.levelApex) - 1
		if p.badOrigin {
			b.m.Rcode = dns.RcodeNameError
			b.m.Ns = append(b.m.Ns, b.soa(min(top, b.level()), b.c.set.negTTL))
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
	return b.nxdomain(-1)
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
	case dns.TypeANY:
		family = 4 // RFC 8482: one RRset is enough
	default:
		return b.nodata(zone, b.c.set.negTTL)
	}
	used, nodes := b.c.pickProxies(b.ctx, b.level(), b.client, family)
	if len(nodes) == 0 && qtype == dns.TypeANY {
		family = 6
		used, nodes = b.c.pickProxies(b.ctx, b.level(), b.client, family)
	}
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
func (c *Coral) pickProxies(ctx context.Context, lvl int, near netip.Addr, family int) (int, []coraldht.NodeInfo) {
	o := pickOptions{count: c.set.answers, near: near, services: coraldht.ServiceHTTP, family: family}
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
	o := pickOptions{level: level, count: b.c.set.nameservers, near: b.client, services: coraldht.ServiceDNS, nearOnly: true}
	servers := b.c.tracker.pick(o)
	if !containsSelf(servers) && len(servers) < min(o.count, minNear) {
		// This server always serves its own clusters; it is added when the
		// sweep found too few others.
		servers = append(servers, coraldht.NodeInfo{Contact: coraldht.Contact{Addr: netip.AddrPortFrom(b.c.self, 53)}, Self: true})
	}
	for _, ni := range servers {
		a := ni.Addr.Addr().Unmap()
		host := b.c.hostName(a)
		ns := &dns.NS{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: b.c.set.nsTTL}, Ns: host}
		if inAnswer {
			b.m.Answer = append(b.m.Answer, ns)
		} else {
			b.m.Ns = append(b.m.Ns, ns)
		}
		b.m.Extra = append(b.m.Extra, addrRR(host, a, b.c.set.nsTTL))
	}
}

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

func containsSelf(nodes []coraldht.NodeInfo) bool {
	for _, ni := range nodes {
		if ni.Self {
			return true
		}
	}
	return false
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
