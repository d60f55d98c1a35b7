package icmpprobe

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// trEcho returns an ICMP echo request (or reply) as our probes carry it,
// with the payload of a trace whose nonces are all zero.
func trEcho(t testing.TB, v6, reply bool, id, seq int) []byte {
	return trEchoData(t, v6, reply, id, seq, make([]byte, traceNonceLen))
}

func trEchoData(t testing.TB, v6, reply bool, id, seq int, data []byte) []byte {
	t.Helper()
	var typ icmp.Type = ipv4.ICMPTypeEcho
	switch {
	case v6 && reply:
		typ = ipv6.ICMPTypeEchoReply
	case v6:
		typ = ipv6.ICMPTypeEchoRequest
	case reply:
		typ = ipv4.ICMPTypeEchoReply
	}
	b, err := (&icmp.Message{Type: typ, Body: &icmp.Echo{ID: id, Seq: seq, Data: data}}).Marshal(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// trQuote4 wraps an ICMP message in an IPv4 header with options bytes of
// options, as a router quotes it. Built by hand: ipv4.Header.Marshal
// writes some fields in host order on a few platforms.
func trQuote4(payload []byte, options int) []byte {
	hl := 20 + options
	h := make([]byte, hl, hl+len(payload))
	h[0] = 4<<4 | byte(hl/4)
	h[2], h[3] = byte((hl+len(payload))>>8), byte(hl+len(payload))
	h[8] = 1 // TTL as it arrived at the router
	h[9] = protoICMP4
	copy(h[12:16], []byte{192, 0, 2, 1})
	copy(h[16:20], []byte{198, 51, 100, 7})
	return append(h, payload...)
}

// trQuote6 wraps an ICMPv6 message in an IPv6 header.
func trQuote6(payload []byte) []byte {
	h := make([]byte, ipv6HeaderLength, ipv6HeaderLength+len(payload))
	h[0] = 6 << 4
	h[4], h[5] = byte(len(payload)>>8), byte(len(payload))
	h[6] = protoICMP6
	h[7] = 1
	copy(h[8:24], netip.MustParseAddr("2001:db8::1").AsSlice())
	copy(h[24:40], netip.MustParseAddr("2001:db8:ffff::7").AsSlice())
	return append(h, payload...)
}

// trError returns an ICMP error message of type typ quoting orig.
func trError(t testing.TB, typ icmp.Type, code int, orig []byte) []byte {
	t.Helper()
	var body icmp.MessageBody
	switch typ {
	case ipv4.ICMPTypeDestinationUnreachable, ipv6.ICMPTypeDestinationUnreachable:
		body = &icmp.DstUnreach{Data: orig}
	case ipv4.ICMPTypeParameterProblem, ipv6.ICMPTypeParameterProblem:
		body = &icmp.ParamProb{Data: orig}
	default:
		body = &icmp.TimeExceeded{Data: orig}
	}
	b, err := (&icmp.Message{Type: typ, Code: code, Body: body}).Marshal(nil)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// trTE4 and trTE6 are time-exceeded messages quoting probe seq with id.
func trTE4(t testing.TB, id, seq int) []byte {
	return trError(t, ipv4.ICMPTypeTimeExceeded, 0, trQuote4(trEcho(t, false, false, id, seq), 0))
}

func trTE6(t testing.TB, id, seq int) []byte {
	return trError(t, ipv6.ICMPTypeTimeExceeded, 0, trQuote6(trEcho(t, true, false, id, seq)))
}

const trID = 0xC0A1

// trBase is a base of sequence numbers for the tests that use one.
const trBase uint16 = 0xfff0

func TestParseTimeExceeded(t *testing.T) {
	probe4 := trEcho(t, false, false, trID, 3)
	probe6 := trEcho(t, true, false, trID, 3)
	fragment := trQuote4(probe4, 0)
	fragment[7] = 1 // fragment offset 8 bytes
	badIHL := trQuote4(probe4, 0)
	badIHL[0] = 4<<4 | 4
	udp4 := trQuote4(probe4, 0)
	udp4[9] = 17
	notV4 := trQuote4(probe4, 0)
	notV4[0] = 6<<4 | 5
	udp6 := trQuote6(probe6)
	udp6[6] = 17
	withExt, err := (&icmp.Message{Type: ipv4.ICMPTypeTimeExceeded, Body: &icmp.TimeExceeded{
		Data:       trQuote4(probe4, 0),
		Extensions: []icmp.Extension{&icmp.MPLSLabelStack{Class: 1, Type: 1, Labels: []icmp.MPLSLabel{{Label: 16, TC: 0, S: true, TTL: 1}}}},
	}}).Marshal(nil)
	if err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name string
		msg  []byte
		v6   bool
		hop  int // 0: not ours
	}{
		{"v4 time exceeded", trTE4(t, trID, 3), false, 3},
		{"v4 hop 1", trTE4(t, trID, 1), false, 1},
		{"v4 hop 32", trTE4(t, trID, 32), false, 32},
		{"v4 host unreachable", trError(t, ipv4.ICMPTypeDestinationUnreachable, 1, trQuote4(probe4, 0)), false, 3},
		{"v4 admin prohibited", trError(t, ipv4.ICMPTypeDestinationUnreachable, 13, trQuote4(probe4, 0)), false, 3},
		{"v4 quoted IP options", trError(t, ipv4.ICMPTypeTimeExceeded, 0, trQuote4(probe4, 8)), false, 3},
		{"v4 only 8 bytes quoted", trError(t, ipv4.ICMPTypeTimeExceeded, 0, trQuote4(probe4[:8], 0)), false, 3},
		{"v4 RFC 4884 extensions", withExt, false, 3},
		{"v6 time exceeded", trTE6(t, trID, 3), true, 3},
		{"v6 hop 32", trTE6(t, trID, 32), true, 32},
		{"v6 address unreachable", trError(t, ipv6.ICMPTypeDestinationUnreachable, 3, trQuote6(probe6)), true, 3},

		{"v4 wrong id", trTE4(t, trID+1, 3), false, 0},
		{"v6 wrong id", trTE6(t, trID^0x8000, 3), true, 0},
		{"v4 seq 0", trTE4(t, trID, 0), false, 0},
		{"v4 seq 33", trTE4(t, trID, 33), false, 0},
		{"v6 seq 33", trTE6(t, trID, 33), true, 0},
		{"v4 seq 0x0103", trTE4(t, trID, 0x0103), false, 0},
		{"v4 message read as v6", trTE4(t, trID, 3), true, 0},
		{"v6 message read as v4", trTE6(t, trID, 3), false, 0},
		{"v4 reassembly timeout", trError(t, ipv4.ICMPTypeTimeExceeded, 1, trQuote4(probe4, 0)), false, 0},
		{"v6 reassembly timeout", trError(t, ipv6.ICMPTypeTimeExceeded, 1, trQuote6(probe6)), true, 0},
		{"v4 parameter problem", trError(t, ipv4.ICMPTypeParameterProblem, 0, trQuote4(probe4, 0)), false, 0},
		{"v6 parameter problem", trError(t, ipv6.ICMPTypeParameterProblem, 0, trQuote6(probe6)), true, 0},
		{"v4 bare echo request", probe4, false, 0},
		{"v4 bare echo reply", trEcho(t, false, true, trID, 3), false, 0},
		{"v6 bare echo reply", trEcho(t, true, true, trID, 3), true, 0},
		{"v4 quoting an echo reply", trError(t, ipv4.ICMPTypeTimeExceeded, 0, trQuote4(trEcho(t, false, true, trID, 3), 0)), false, 0},
		{"v4 quoting ICMPv6 echo", trError(t, ipv4.ICMPTypeTimeExceeded, 0, trQuote4(probe6, 0)), false, 0},
		{"v4 quoting UDP", trError(t, ipv4.ICMPTypeTimeExceeded, 0, udp4), false, 0},
		{"v4 quoting a later fragment", trError(t, ipv4.ICMPTypeTimeExceeded, 0, fragment), false, 0},
		{"v4 quoted IHL 4", trError(t, ipv4.ICMPTypeTimeExceeded, 0, badIHL), false, 0},
		{"v4 quoting not IPv4", trError(t, ipv4.ICMPTypeTimeExceeded, 0, notV4), false, 0},
		{"v4 with an IP header in front", trQuote4(trTE4(t, trID, 3), 0), false, 0},
		{"v6 quoting UDP", trError(t, ipv6.ICMPTypeTimeExceeded, 0, udp6), true, 0},
		{"v6 quoting v4", trError(t, ipv6.ICMPTypeTimeExceeded, 0, trQuote4(probe6, 0)), true, 0},
		{"v4 sequence below the base", trTE4(t, trID, int(trBase)), false, 0},
		{"nil", nil, false, 0},
		{"nil v6", nil, true, 0},
		{"garbage", []byte("\x0b\x00\xff\xffgarbage that is long enough to be read as a message"), false, 0},
		{"all ones", bytes.Repeat([]byte{0xff}, 64), true, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			q, ok := parseTimeExceeded(tt.msg, tt.v6, trID, 0)
			if ok != (tt.hop != 0) || q.hop != tt.hop {
				t.Fatalf("parseTimeExceeded = %d, %v; want %d, %v", q.hop, ok, tt.hop, tt.hop != 0)
			}
			if ok {
				want := netip.MustParseAddr("198.51.100.7")
				if tt.v6 {
					want = netip.MustParseAddr("2001:db8:ffff::7")
				}
				if q.dst != want {
					t.Errorf("quoted destination %v, want %v", q.dst, want)
				}
			}
			if tt.hop == 0 {
				return
			}
			// Every prefix short of the probe's echo header is rejected;
			// every longer one parses the same (the echo data is optional).
			need := 8 + ipv6HeaderLength + 8
			if !tt.v6 {
				need = 8 + int(tt.msg[8]&0x0f)*4 + 8
			}
			for n := range len(tt.msg) {
				q, ok := parseTimeExceeded(tt.msg[:n], tt.v6, trID, 0)
				if want := n >= need; ok != want || ok && q.hop != tt.hop {
					t.Fatalf("first %d of %d bytes: %d, %v; want ok=%v", n, len(tt.msg), q.hop, ok, want)
				}
			}
		})
	}
}

func TestParseEchoReply(t *testing.T) {
	for _, v6 := range []bool{false, true} {
		if hop, _, ok := parseEchoReply(trEcho(t, v6, true, trID, 5), v6, trID, 0); !ok || hop != 5 {
			t.Errorf("v6=%v: echo reply: %d, %v", v6, hop, ok)
		}
		for name, msg := range map[string][]byte{
			"request":    trEcho(t, v6, false, trID, 5),
			"wrong id":   trEcho(t, v6, true, trID+1, 5),
			"seq 0":      trEcho(t, v6, true, trID, 0),
			"other v":    trEcho(t, !v6, true, trID, 5),
			"truncated":  trEcho(t, v6, true, trID, 5)[:7],
			"error type": trTE4(t, trID, 5),
		} {
			if hop, _, ok := parseEchoReply(msg, v6, trID, 0); ok {
				t.Errorf("v6=%v: %s parsed as reply to hop %d", v6, name, hop)
			}
		}
	}
}

// TestTraceState feeds one trace's bookkeeping a made-up exchange: replies
// out of order, noise, a router on two hops, and the destination answering.
func TestTraceState(t *testing.T) {
	a := netip.MustParseAddr
	dst := a("198.51.100.7")
	s := traceState{dst: dst, id: trID, first: 1, last: 6}
	step := func(msg []byte, from string, done bool) {
		t.Helper()
		s.observe(msg, a(from))
		if s.done() != done {
			t.Fatalf("after %x from %s: done = %v", msg, from, !done)
		}
	}
	step(trTE4(t, trID, 3), "10.0.3.1", false)
	step(trTE4(t, trID+1, 1), "10.9.9.9", false) // someone else's trace
	step(trTE6(t, trID, 2), "10.9.9.9", false)   // wrong family
	step(trEcho(t, false, false, trID, 1), "10.9.9.9", false)
	step(trTE4(t, trID, 1), "10.0.1.1", false)
	step(trTE4(t, trID, 1), "10.0.1.2", false) // a late duplicate keeps the first
	step(trTE4(t, trID, 4), "10.0.3.1", false) // same router twice
	step(trEcho(t, false, true, trID, 6), "198.51.100.7", false)
	step(trEcho(t, false, true, trID, 5), "198.51.100.7", false)
	step(trTE4(t, trID, 2), "10.0.2.1", true)

	want := []netip.Addr{a("10.0.1.1"), a("10.0.2.1"), a("10.0.3.1")}
	if got := s.routers(); !slices.Equal(got, want) {
		t.Fatalf("routers = %v, want %v", got, want)
	}

	// A router that cannot forward ends the path at its hop; dst refusing
	// a probe puts dst within that many hops.
	s = traceState{dst: dst, id: trID, first: 1, last: 8}
	step(trError(t, ipv4.ICMPTypeDestinationUnreachable, 1, trQuote4(trEcho(t, false, false, trID, 3), 0)), "10.0.3.1", false)
	step(trTE4(t, trID, 2), "10.0.2.1", false)
	step(trError(t, ipv4.ICMPTypeDestinationUnreachable, 13, trQuote4(trEcho(t, false, false, trID, 2), 0)), "198.51.100.7", false)
	step(trTE4(t, trID, 1), "10.0.1.1", true)
	want = []netip.Addr{a("10.0.1.1")}
	if got := s.routers(); !slices.Equal(got, want) {
		t.Fatalf("routers = %v, want %v", got, want)
	}

	// Destination at hop 1: nothing to wait for.
	s = traceState{dst: a("2001:db8::7"), v6: true, id: trID, first: 1, last: 16}
	step(trEcho(t, true, true, trID, 1), "2001:db8::7", true)
	if got := s.routers(); len(got) != 0 {
		t.Fatalf("routers = %v, want none", got)
	}
}

// TestTraceStateForged: what someone off the path can send, having seen
// the probes of another trace (the identifier, the nonces of that trace,
// sequence numbers from 1 up), counts for nothing: only the probe's own
// sequence number (base + hop), its nonce, its destination and, for an
// echo reply, the destination as source make an answer.
func TestTraceStateForged(t *testing.T) {
	a := netip.MustParseAddr
	dst := a("198.51.100.7")
	nonce := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	newState := func() *traceState {
		s := &traceState{dst: dst, id: trID, seqBase: trBase, first: 1, last: 6}
		for h := 1; h <= traceMaxHops; h++ {
			copy(s.nonce(h), nonce)
			s.nonce(h)[0] = byte(h)
		}
		return s
	}
	probe := func(h int) []byte {
		n := slices.Clone(nonce)
		n[0] = byte(h)
		return n
	}
	seq := func(h int) int { return int(trBase + uint16(h)) }
	quote := func(payload []byte, to string) []byte {
		b := trQuote4(payload, 0)
		copy(b[16:20], a(to).AsSlice())
		return trError(t, ipv4.ICMPTypeTimeExceeded, 0, b)
	}
	forged := map[string]struct {
		msg  []byte
		from string
	}{
		"echo reply, sequence without the base": {trEchoData(t, false, true, trID, 3, probe(3)), "198.51.100.7"},
		"echo reply, another trace's nonce":     {trEchoData(t, false, true, trID, seq(3), nonce), "198.51.100.7"},
		"echo reply, short payload":             {trEchoData(t, false, true, trID, seq(3), probe(3)[:4]), "198.51.100.7"},
		"echo reply from another host":          {trEchoData(t, false, true, trID, seq(3), probe(3)), "198.51.100.8"},
		"router error quoting another dst":      {quote(trEchoData(t, false, false, trID, seq(2), probe(2)), "198.51.100.8"), "10.0.2.1"},
		"router error quoting another nonce":    {quote(trEchoData(t, false, false, trID, seq(2), nonce), "198.51.100.7"), "10.0.2.1"},
		"router error, sequence without base":   {quote(trEchoData(t, false, false, trID, 2, probe(2)), "198.51.100.7"), "10.0.2.1"},
	}
	for name, f := range forged {
		s := newState()
		s.observe(f.msg, a(f.from))
		if s.last != 6 || s.reached != 0 || s.heard != 0 || len(s.routers()) != 0 {
			t.Errorf("%s: counted (last %d, reached %d, routers %v)", name, s.last, s.reached, s.routers())
		}
	}
	// The genuine ones count, also when only 8 octets of the probe are
	// quoted (nothing of the nonce to check).
	s := newState()
	s.observe(quote(trEchoData(t, false, false, trID, seq(2), probe(2))[:8], "198.51.100.7"), a("10.0.2.1"))
	s.observe(quote(trEchoData(t, false, false, trID, seq(1), probe(1)), "198.51.100.7"), a("10.0.1.1"))
	s.observe(trEchoData(t, false, true, trID, seq(3), probe(3)), dst)
	if want := []netip.Addr{a("10.0.1.1"), a("10.0.2.1")}; !slices.Equal(s.routers(), want) || s.reached != 3 || !s.done() {
		t.Errorf("routers %v, reached %d, done %v; want %v, 3, true", s.routers(), s.reached, s.done(), want)
	}
}

// TestTowardWindow: a known distance narrows the trace to the hops that
// can be among the last n, with the slack on both sides.
func TestTowardWindow(t *testing.T) {
	for _, tc := range []struct{ n, distance, first, last int }{
		{5, 0, 1, traceMaxHops},
		{5, -3, 1, traceMaxHops},
		{5, 33, 1, traceMaxHops},
		{5, 15, 8, 17},
		{5, 3, 1, 5},
		{5, 1, 1, 3},
		{5, 31, 24, 32},
		{1, 10, 7, 12},
	} {
		first, last := towardWindow(tc.n, tc.distance)
		if first != tc.first || last != tc.last {
			t.Errorf("towardWindow(%d, %d) = %d..%d, want %d..%d", tc.n, tc.distance, first, last, tc.first, tc.last)
		}
	}
	// A trace from hop 8 is done once hops 8.. have answered.
	s := traceState{dst: netip.MustParseAddr("198.51.100.7"), id: trID, first: 8, last: 9}
	for h := 8; h <= 9; h++ {
		if s.done() {
			t.Fatalf("done before hop %d answered", h)
		}
		s.observe(trTE4(t, trID, h), netip.MustParseAddr(fmt.Sprintf("10.0.%d.1", h)))
	}
	if !s.done() {
		t.Error("not done with hops 8 and 9 heard")
	}
}

func TestTraceRoutersNoRouters(t *testing.T) {
	for _, dst := range []netip.Addr{
		{},
		netip.MustParseAddr("127.0.0.1"),
		netip.MustParseAddr("127.255.0.9"),
		netip.MustParseAddr("::1"),
		netip.MustParseAddr("::ffff:127.0.0.1"),
		netip.MustParseAddr("0.0.0.0"),
		netip.MustParseAddr("::"),
	} {
		start := time.Now()
		rs, err := TraceRouters(context.Background(), dst, 8, 10*time.Second)
		if rs != nil || err != nil {
			t.Errorf("TraceRouters(%v) = %v, %v; want nil, nil", dst, rs, err)
		}
		if d := time.Since(start); d > time.Second {
			t.Errorf("TraceRouters(%v) took %v", dst, d)
		}
	}
}

func TestTraceCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	start := time.Now()
	// trace skips the loopback check, so this exercises the cancellation
	// path; an address in 127/8 keeps any probe on this host regardless.
	s, err := trace(ctx, netip.MustParseAddr("127.0.0.5"), 1, 16, 10*time.Second)
	rs := s.routers()
	if len(rs) != 0 || !errors.Is(err, context.Canceled) {
		t.Errorf("trace with a cancelled context = %v, %v; want no routers, %v", rs, err, context.Canceled)
	}
	if d := time.Since(start); d > time.Second {
		t.Errorf("trace with a cancelled context took %v", d)
	}
}

// icmpPermitted reports whether this process may trace: it can open a raw
// ICMP socket of the family or, except on Linux (see listenTrace), an
// unprivileged datagram ICMP socket.
func icmpPermitted(v6 bool) bool {
	nets, addr := []string{"ip4:icmp", "udp4"}, "0.0.0.0"
	if v6 {
		nets, addr = []string{"ip6:ipv6-icmp", "udp6"}, "::"
	}
	if runtime.GOOS == "linux" {
		nets = nets[:1]
	}
	for _, n := range nets {
		if c, err := icmp.ListenPacket(n, addr); err == nil {
			c.Close()
			return true
		}
	}
	return false
}

// TestTraceLoopback traces real loopback addresses with real sockets when
// the process may open them (e.g. as root): the destination answers the
// hop-1 probe, so there are no routers and the trace ends at once. Without
// permission the trace must say it is unavailable.
func TestTraceLoopback(t *testing.T) {
	for _, dst := range []netip.Addr{netip.MustParseAddr("127.0.0.5"), netip.MustParseAddr("::1")} {
		t.Run(dst.String(), func(t *testing.T) {
			if dst.Is6() {
				// No IPv6 in this sandbox is no failure of ours.
				c, err := net.ListenPacket("udp6", "[::1]:0")
				if err != nil {
					t.Skipf("no IPv6 loopback: %v", err)
				}
				c.Close()
			}
			ok := icmpPermitted(dst.Is6())
			start := time.Now()
			for _, hops := range []int{3, -1, 1000} {
				s, err := trace(context.Background(), dst, 1, hops, 10*time.Second)
				rs := s.routers()
				switch {
				case !ok && !errors.Is(err, ErrUnavailable):
					t.Fatalf("maxHops %d: ICMP sockets are not permitted, yet trace = %v, %v", hops, rs, err)
				case ok && (err != nil || len(rs) != 0):
					t.Fatalf("maxHops %d: trace = %v, %v; want no routers, no error", hops, rs, err)
				}
			}
			// Without the echo reply stopping it, each trace would wait
			// out the full timeout.
			if d := time.Since(start); d > 5*time.Second {
				t.Errorf("three traces took %v", d)
			}
			t.Logf("ICMP sockets permitted: %v", ok)
		})
	}
}
