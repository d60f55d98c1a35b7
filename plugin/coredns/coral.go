// Package coral is the CoreDNS plugin "coral": authoritative DNS for the
// Coral zones. It answers Coralized host names with HTTP proxies near the
// querying resolver, found through this server's own Coral DSHT node, and
// steers resolvers onto Coral name servers near them. See README.md.
package coral

import (
	"context"
	"net"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"

	"github.com/coredns/coredns/plugin"
	"github.com/coredns/coredns/plugin/metrics"
	"github.com/coredns/coredns/request"
	"github.com/miekg/dns"
)

// Coral is the plugin handler. The coral directive makes one per server
// block with New's constructor (setup.go); a program that embeds the
// handler makes one with New.
type Coral struct {
	Next plugin.Handler

	opts Options
	gate *probeGate // who may make this server send probes (proof.go)

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
	// loadThreshold is the load (percent) at which a proxy gets no new
	// clients while another has room (load.go); 0: load is ignored.
	loadThreshold int
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
	// respTruncated is an empty truncated response to a UDP query that
	// needed a probe its source had not proven it may start (proof.go).
	respTruncated = "truncated"
)

// ednsUDPSize is the EDNS UDP payload size this server advertises, and the
// most it sends over UDP to any client: the DNS Flag Day 2020 value, which
// an IPv6 path carries unfragmented.
const ednsUDPSize = 1232

// ServeDNS implements plugin.Handler.
func (c *Coral) ServeDNS(ctx context.Context, w dns.ResponseWriter, r *dns.Msg) (int, error) {
	// The request's state lives in the builder, so that neither escapes:
	// one allocation fewer per query.
	b := builder{c: c, ctx: ctx, state: request.Request{W: w, Req: r}}
	state := &b.state
	// The name as asked, for owner names (they keep the query's case), and
	// in lower case for parsing: request.Request's Name would format it a
	// second time.
	b.qname = state.QName()
	p, ok := c.scheme.parse(strings.ToLower(b.qname))
	if !ok {
		return plugin.NextOrFailure(c.Name(), c.Next, ctx, w, r)
	}
	pl := place{server: metrics.WithServer(ctx), zone: c.scheme.zoneOf(p), view: metrics.WithView(ctx)}
	client := remoteAddr(w)
	info, _ := ctx.Value(infoKey{}).(*queryInfo)

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
	udp := state.Proto() == "udp"
	who := asker{addr: client, proof: c.gate.proofOf(client, !udp || verdict == cookieValid)}
	info.setProof(who.proof)
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
		c.send(pl, w, state, m, kind, clientCookie, client, verdict, nil)
		c.gate.answered(client, who.proof)
		pl.countQuery(-1, kind)
		return dns.RcodeSuccess, nil
	}

	m := new(dns.Msg)
	m.SetReply(r)
	m.Authoritative = true
	m.Compress = true
	recs := new(responseRecords)
	recs.sections(m, c.set.answers, c.set.nameservers)

	b.m, b.client, b.target, b.recs, b.who, b.place, b.info = m, client, target, recs, who, pl, info
	if ecsNet.IsValid() && who.proof == proofNone && udp {
		// A client subnet from a source that has shown nothing: the
		// answer would be made for whatever subnet a forger names.
		b.needProof = true
	} else {
		kind = b.respond(p)
	}
	var ecsOut *dns.EDNS0_SUBNET
	if ecs != nil {
		ecsOut = ecsReply(ecs, ecsNet, b.done || b.nearState != 0)
	}
	if b.needProof && udp {
		// A probe was needed that this source may not start: an empty
		// truncated response, so that a real resolver asks again over TCP
		// (which proves its address) and a forged source gets no probe
		// and no more octets than it sent.
		m, kind, ecsOut = slipped(r), respTruncated, nil
	}
	c.send(pl, w, state, m, kind, clientCookie, client, verdict, ecsOut)
	c.gate.answered(client, who.proof)
	pl.countQuery(b.levelOrNone(), kind)
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
func (c *Coral) send(pl place, w dns.ResponseWriter, state *request.Request, m *dns.Msg, kind string, clientCookie []byte, client netip.Addr, verdict cookieVerdict, ecs *dns.EDNS0_SUBNET) {
	if c.rrl != nil && state.Proto() == "udp" && verdict != cookieValid {
		cat := rrlCategoryOf(kind)
		switch c.rrl.decide(client, cat) {
		case rrlDrop:
			rrlDropped.WithLabelValues(pl.labels(cat.String())...).Inc()
			return
		case rrlSlip:
			rrlSlipped.WithLabelValues(pl.labels(cat.String())...).Inc()
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
