package icmpprobe

import (
	"bytes"
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// Coral groups nodes into clusters partly by where their traffic leaves the
// local network: nodes that share their first few routers are usually close,
// so the /24 prefixes of those routers are cheap locality hints. TraceRouters
// finds them at node start with one burst of ICMP echo probes, one per TTL,
// instead of a classic hop-by-hop traceroute that would take a round trip
// (or a timeout) per hop. TraceLastHops is the same burst aimed at a DNS
// client: the routers nearest the client, which nodes near it published
// hints under.

// traceMaxHops bounds a trace: start-up hints need only the first few hops
// (coraldht's Config.HintHops is at most 16), a trace toward a client reaches across
// the Internet, whose paths are rarely longer. One bit per hop in a uint64.
const traceMaxHops = 32

// TraceRouters sends probes toward dst with IP TTL (hop limit) 1..maxHops,
// all at once, and collects the ICMP time-exceeded and
// destination-unreachable replies until every hop answered or timeout
// passed. It returns the distinct router addresses in hop order (hop 1
// first), without dst itself. maxHops is clamped to 1..32. If ctx is
// cancelled it returns the routers heard so far with ctx.Err().
//
// Loopback, unspecified and invalid destinations have no routers: nil, nil
// without sending anything.
func TraceRouters(ctx context.Context, dst netip.Addr, maxHops int, timeout time.Duration) ([]netip.Addr, error) {
	dst = dst.Unmap()
	if !dst.IsValid() || dst.IsLoopback() || dst.IsUnspecified() {
		return nil, nil
	}
	s, err := trace(ctx, dst, 1, maxHops, timeout)
	return s.routers(), err
}

// LastHops is what a trace toward a destination found.
type LastHops struct {
	// Routers are up to n distinct routers heard nearest the destination,
	// in hop order (the one nearest the destination last), without the
	// destination itself.
	Routers []netip.Addr
	// Distance is the hop limit with which a probe reached the destination
	// (it answered the echo request); 0 when none did.
	Distance int
	// Sent is how many echo requests the trace sent.
	Sent int
}

// TraceLastHops finds the routers on the last hops toward dst: one burst of
// probes with TTL 1..32, all sent at once, and the replies collected until
// every hop short of dst answered or timeout passed (a client that does not
// answer echo requests leaves the hops past it silent, so the timeout is
// the aggressive bound on the trace). It returns up to n distinct routers
// heard nearest dst, in hop order (the one nearest dst last), without dst
// itself. The burst is 32 echo requests of 44 octets (IPv4: 1.4 KiB in
// all); it takes one round trip to dst when dst answers.
//
// Errors are those of TraceRouters: ErrUnavailable without a socket
// to trace with, ctx.Err() with the routers heard so far. Invalid,
// loopback and unspecified destinations have no routers.
func TraceLastHops(ctx context.Context, dst netip.Addr, n int, timeout time.Duration) ([]netip.Addr, error) {
	h, err := TraceToward(ctx, dst, n, 0, timeout)
	return h.Routers, err
}

// TraceToward is TraceLastHops when the destination's distance is known
// (distance > 0: the hop limit a probe needs to reach it, from an echo
// reply's TTL, see Distance, or an earlier trace): then only the hops that
// can be among the last n are probed, from distance-n-traceSlack to
// distance+traceSlack (the slack allows for a forward path a little longer
// or shorter than the reply's): n+2·traceSlack+1 echo requests instead of
// 32. With distance 0 it is TraceLastHops's burst of 32.
func TraceToward(ctx context.Context, dst netip.Addr, n, distance int, timeout time.Duration) (LastHops, error) {
	dst = dst.Unmap()
	if !dst.IsValid() || dst.IsLoopback() || dst.IsUnspecified() || n <= 0 {
		return LastHops{}, nil
	}
	first, last := towardWindow(n, distance)
	s, err := trace(ctx, dst, first, last, timeout)
	rs := s.routers()
	reached := 0
	if s.reached > 0 {
		reached = s.reached
	}
	return LastHops{Routers: rs[max(0, len(rs)-n):], Distance: reached, Sent: s.sent}, err
}

// traceSlack is how many hops beyond a known distance a focused trace
// probes on either side.
const traceSlack = 2

// towardWindow is the range of hop limits TraceToward probes.
func towardWindow(n, distance int) (first, last int) {
	if distance <= 0 || distance > traceMaxHops {
		return 1, traceMaxHops
	}
	return max(1, distance-n-traceSlack), min(traceMaxHops, distance+traceSlack)
}

// CanTrace reports whether this process may open the sockets a trace needs
// for the family of dst (nil), or why not (an error wrapping
// ErrUnavailable).
func CanTrace(v6 bool) error {
	c, _, err := listenTrace(v6)
	if err != nil {
		return err
	}
	return c.Close()
}

// trace is TraceRouters without the destination check, so tests can probe
// loopback addresses, probing hops first..last. It returns what it heard,
// never nil.
//
// Every probe carries a random nonce (traceNonceLen octets) of its own,
// and the trace's probes share a random echo identifier and a random base
// of sequence numbers (the probe for hop h has base+h): an answer counts
// only when it names one of them and, for an echo reply, which quotes the
// probe whole, when it carries its nonce; an error from a router counts
// only when the datagram it quotes went to dst, and when the quote reaches
// into the payload, only with the nonce. So nobody off the path, having
// seen an earlier trace's probes, can make up the routers of this one.
func trace(ctx context.Context, dst netip.Addr, first, last int, timeout time.Duration) (*traceState, error) {
	dst = dst.Unmap()
	v6 := dst.Is6()
	last = min(max(last, 1), traceMaxHops)
	first = min(max(first, 1), last)
	s := &traceState{dst: dst, v6: v6, first: first, last: 0}
	if err := ctx.Err(); err != nil {
		return s, err
	}

	c, dgram, err := listenTrace(v6)
	if err != nil {
		return s, err
	}
	defer c.Close()

	// Raw sockets see every ICMP message on the host, so a random echo id
	// tells our replies from those to other tracers and pings.
	s.id = uint16(rand.Uint32())
	s.seqBase = uint16(rand.Uint32())
	if _, err := crand.Read(s.nonces[:]); err != nil {
		return s, err
	}
	var to net.Addr = &net.IPAddr{IP: dst.AsSlice(), Zone: dst.Zone()}
	if dgram {
		to = &net.UDPAddr{IP: dst.AsSlice(), Zone: dst.Zone()}
	}

	// The deadline goes first so a cancellation that fires at once is not
	// overwritten by it.
	if err := c.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return s, err
	}
	stop := context.AfterFunc(ctx, func() { c.SetReadDeadline(time.Now()) })
	defer stop()

	var echo icmp.Type = ipv4.ICMPTypeEcho
	if v6 {
		echo = ipv6.ICMPTypeEchoRequest
	}
	for h := first; h <= last; h++ {
		if err := sendProbe(c, to, echo, s.id, s.seqBase+uint16(h), s.nonce(h), h); err != nil {
			return s, fmt.Errorf("icmpprobe: trace: %w", err)
		}
		s.sent++
	}

	s.last = last
	buf := make([]byte, 1500)
	for !s.done() {
		n, peer, err := c.ReadFrom(buf)
		if err != nil {
			if ctx.Err() != nil {
				return s, ctx.Err()
			}
			if ne, ok := err.(net.Error); ok && ne.Timeout() {
				break
			}
			return s, fmt.Errorf("icmpprobe: trace: %w", err)
		}
		s.observe(buf[:n], peerAddr(peer))
	}
	return s, nil
}

// sendProbe sends the echo request for hop h: TTL h, sequence number seq,
// the payload nonce.
func sendProbe(c *icmp.PacketConn, to net.Addr, echo icmp.Type, id, seq uint16, nonce []byte, h int) error {
	var err error
	if echo == ipv6.ICMPTypeEchoRequest {
		err = c.IPv6PacketConn().SetHopLimit(h)
	} else {
		err = c.IPv4PacketConn().SetTTL(h)
	}
	if err != nil {
		return err
	}
	// The kernel fills in the ICMPv6 checksum, so no pseudo-header.
	b, err := (&icmp.Message{Type: echo, Body: &icmp.Echo{ID: int(id), Seq: int(seq), Data: nonce}}).Marshal(nil)
	if err != nil {
		return err
	}
	_, err = c.WriteTo(b, to)
	return err
}

// listenTrace opens the socket for a trace: a raw ICMP socket or, failing
// that outside Linux, an unprivileged datagram ICMP socket (dgram=true)
// where those receive ICMP errors as ordinary messages (Darwin). Linux ping
// sockets queue errors on the socket error queue (IP_RECVERR) instead, which
// x/net cannot read: a trace through one would hear no router and wait out
// its timeout, so there tracing is unavailable without raw sockets. Any
// failure to open a socket means the same to the caller: no routers to learn
// from.
func listenTrace(v6 bool) (c *icmp.PacketConn, dgram bool, err error) {
	kinds := []sockKind{kindRaw, kindDatagram}
	if runtime.GOOS == "linux" {
		kinds = kinds[:1]
	}
	c, kind, err := listen(v6, kinds...)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %w", ErrUnavailable, err)
	}
	return c, kind == kindDatagram, nil
}

// traceNonceLen is the length of a trace probe's payload, its nonce.
const traceNonceLen = 8

// traceState collects the replies of one trace.
type traceState struct {
	dst     netip.Addr
	v6      bool
	id      uint16
	seqBase uint16 // the probe for hop h has sequence number seqBase+h
	nonces  [(traceMaxHops + 1) * traceNonceLen]byte
	first   int                          // lowest hop probed
	last    int                          // highest hop that may still be a router
	hops    [traceMaxHops + 1]netip.Addr // first router heard per hop; [0] unused
	heard   uint64                       // bit h: hop h answered
	reached int                          // lowest hop whose probe reached dst; 0: none
	sent    int                          // probes sent
}

// nonce is the payload of hop h's probe.
func (s *traceState) nonce(h int) []byte {
	return s.nonces[h*traceNonceLen : (h+1)*traceNonceLen]
}

// observe takes one received ICMP message from the given peer.
func (s *traceState) observe(msg []byte, from netip.Addr) {
	if h, payload, ok := parseEchoReply(msg, s.v6, s.id, s.seqBase); ok {
		if from.WithZone("") != s.dst.WithZone("") || !bytes.Equal(payload, s.nonce(h)) {
			return
		}
		// Probe h reached dst, so hops h and beyond are dst, not routers.
		s.last = min(s.last, h-1)
		if s.reached == 0 || h < s.reached {
			s.reached = h
		}
		return
	}
	q, ok := parseTimeExceeded(msg, s.v6, s.id, s.seqBase)
	if !ok || q.dst != s.dst.WithZone("") {
		return
	}
	if n := min(len(q.payload), traceNonceLen); !bytes.Equal(q.payload[:n], s.nonce(q.hop)[:n]) {
		return
	}
	h := q.hop
	if from.WithZone("") == s.dst.WithZone("") {
		// dst refused probe h itself: it is at most h hops away.
		s.last = min(s.last, h-1)
		return
	}
	s.heard |= 1 << h
	if !s.hops[h].IsValid() {
		s.hops[h] = from
	}
	if msg[0] == unreachType(s.v6) {
		// The path ends at this router; higher probes die here too.
		s.last = min(s.last, h)
	}
}

// done reports whether every hop probed that may be a router has
// answered.
func (s *traceState) done() bool {
	if s.last < s.first {
		return true
	}
	want := uint64(1)<<(s.last+1) - uint64(1)<<s.first // bits first..last
	return s.heard&want == want
}

// routers returns the distinct routers heard, in hop order.
func (s *traceState) routers() []netip.Addr {
	var rs []netip.Addr
	for _, a := range s.hops[1 : s.last+1] {
		if a.IsValid() && !slices.Contains(rs, a) {
			rs = append(rs, a)
		}
	}
	return rs
}

func unreachType(v6 bool) byte {
	if v6 {
		return icmp6Unreach
	}
	return icmp4Unreach
}

// quotedProbe is what an ICMP error tells of the probe it quotes.
type quotedProbe struct {
	hop     int        // 1..32
	dst     netip.Addr // where the quoted datagram was going
	payload []byte     // the quoted probe's payload, as much as was quoted
}

// parseTimeExceeded parses one ICMP (v4) or ICMPv6 message as received on
// the raw socket (message starting at the ICMP header; note Linux raw ICMPv4
// sockets via x/net/icmp.ListenPacket("ip4:icmp") deliver the ICMP message
// without IP header) and, if it is a time-exceeded or
// destination-unreachable error quoting one of our probes, returns the
// probe's hop number (1..32), the quoted datagram's destination and the
// part of the probe's payload quoted (routers quote at least the first 8
// octets of the ICMP message, RFC 792, and usually more, RFC 1812 §4.3.2.3).
// A probe is ours when the quoted echo request carries id probeID and a
// sequence number seqBase+hop. Hostile or truncated input returns
// ok=false.
func parseTimeExceeded(msg []byte, v6 bool, probeID, seqBase uint16) (q quotedProbe, ok bool) {
	// Type, code, checksum, 4 bytes unused (or RFC 4884 length), then
	// the start of the datagram that provoked the error.
	if len(msg) < 8 {
		return quotedProbe{}, false
	}
	typ, code, orig := msg[0], msg[1], msg[8:]
	var probe []byte
	if v6 {
		// Hop limit exceeded in transit is code 0; code 1 is reassembly.
		if !(typ == icmp6TimeExceed && code == 0 || typ == icmp6Unreach) {
			return quotedProbe{}, false
		}
		// We send no extension headers, so ICMPv6 follows the fixed header.
		if len(orig) < ipv6HeaderLength || orig[0]>>4 != 6 || orig[6] != protoICMP6 {
			return quotedProbe{}, false
		}
		q.dst = netip.AddrFrom16([16]byte(orig[24:40]))
		probe = orig[ipv6HeaderLength:]
	} else {
		if !(typ == icmp4TimeExceed && code == 0 || typ == icmp4Unreach) {
			return quotedProbe{}, false
		}
		if len(orig) < 20 || orig[0]>>4 != 4 || orig[9] != protoICMP4 {
			return quotedProbe{}, false
		}
		// A later fragment would not start with our ICMP header.
		if binary.BigEndian.Uint16(orig[6:8])&0x1fff != 0 {
			return quotedProbe{}, false
		}
		ihl := int(orig[0]&0x0f) * 4
		if ihl < 20 || len(orig) < ihl {
			return quotedProbe{}, false
		}
		q.dst = netip.AddrFrom4([4]byte(orig[16:20]))
		probe = orig[ihl:]
	}
	echo := byte(icmp4Echo)
	if v6 {
		echo = icmp6Echo
	}
	q.hop, q.payload, ok = echoHop(probe, echo, probeID, seqBase)
	if !ok {
		return quotedProbe{}, false
	}
	return q, true
}

// parseEchoReply returns the hop number and payload of an echo reply to
// one of our probes: the probe with that TTL reached the destination.
func parseEchoReply(msg []byte, v6 bool, probeID, seqBase uint16) (hop int, payload []byte, ok bool) {
	reply := byte(icmp4EchoReply)
	if v6 {
		reply = icmp6EchoReply
	}
	return echoHop(msg, reply, probeID, seqBase)
}

// echoHop checks that b starts with an ICMP echo header of type typ and id
// probeID and returns its hop, its sequence number less seqBase if that is
// a valid hop, and what follows the header.
func echoHop(b []byte, typ byte, probeID, seqBase uint16) (int, []byte, bool) {
	if len(b) < 8 || b[0] != typ || b[1] != 0 || binary.BigEndian.Uint16(b[4:6]) != probeID {
		return 0, nil, false
	}
	hop := int(binary.BigEndian.Uint16(b[6:8]) - seqBase)
	if hop < 1 || hop > traceMaxHops {
		return 0, nil, false
	}
	return hop, b[8:], true
}
