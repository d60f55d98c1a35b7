package icmpprobe

import (
	"bytes"
	"encoding/binary"
	"net"
	"net/netip"
	"testing"

	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// FuzzParseTimeExceeded feeds the parser what any host on the path may send
// us: it must not panic, and a hop it accepts is in range and is the
// sequence number of an echo request with our id at the end of the quote.
// The trace bookkeeping must survive the same input.
func FuzzParseTimeExceeded(f *testing.F) {
	f.Add(trTE4(f, trID, 1), false, uint16(trID))
	f.Add(trTE6(f, trID, 16), true, uint16(trID))
	f.Add(trError(f, ipv4.ICMPTypeDestinationUnreachable, 3, trQuote4(trEcho(f, false, false, trID, 2), 4)), false, uint16(trID))
	f.Add(trError(f, ipv6.ICMPTypeDestinationUnreachable, 4, trQuote6(trEcho(f, true, false, trID, 2))), true, uint16(trID))
	f.Add(trTE4(f, trID, 33), false, uint16(trID))
	f.Add(trEcho(f, false, true, trID, 1), false, uint16(trID))
	f.Add([]byte{}, true, uint16(0))
	f.Fuzz(func(t *testing.T, msg []byte, v6 bool, id uint16) {
		q, ok := parseTimeExceeded(msg, v6, id, 0)
		hop := q.hop
		if !ok {
			if hop != 0 {
				t.Fatalf("rejected with hop %d", hop)
			}
		} else {
			if hop < 1 || hop > traceMaxHops {
				t.Fatalf("hop %d out of range", hop)
			}
			// The echo header is the last 8 bytes of any shortest
			// accepted prefix; find it by id and seq.
			echo := msg[len(msg)-8:]
			for n := range len(msg) {
				if _, ok := parseTimeExceeded(msg[:n+1], v6, id, 0); ok {
					echo = msg[n-7 : n+1]
					break
				}
			}
			if binary.BigEndian.Uint16(echo[4:6]) != id || int(binary.BigEndian.Uint16(echo[6:8])) != hop {
				t.Fatalf("hop %d from echo header %x, id %#x", hop, echo, id)
			}
			if !bytes.HasSuffix(msg, q.payload) || !q.dst.IsValid() || q.dst.Is4() == v6 {
				t.Fatalf("quoted payload %x, destination %v from %x", q.payload, q.dst, msg)
			}
		}

		s := traceState{dst: netip.MustParseAddr("198.51.100.7"), v6: v6, id: id, first: 1, last: traceMaxHops}
		s.observe(msg, netip.MustParseAddr("192.0.2.1"))
		s.observe(msg, s.dst)
		s.done()
		if rs := s.routers(); len(rs) > 1 {
			t.Fatalf("one message gave routers %v", rs)
		}
	})
}

// FuzzParseEcho feeds the prober's reply parser what any host may send: it
// must not panic, an accepted message is an echo reply of the family whose
// sequence number and payload are those returned, and only a reply with
// the probe's nonce from the probe's destination is delivered.
func FuzzParseEcho(f *testing.F) {
	f.Add(trEchoData(f, false, true, trID, 7, make([]byte, payloadLen)), false, true)
	f.Add(trEchoData(f, true, true, trID, 7, make([]byte, payloadLen)), true, false)
	f.Add(trEcho(f, false, false, trID, 7), false, true)
	f.Add([]byte{0, 0, 0, 0}, false, false)
	f.Fuzz(func(t *testing.T, b []byte, v6, raw bool) {
		seq, payload, ok := parseEcho(b, v6, raw, trID)
		if ok {
			want := byte(icmp4EchoReply)
			if v6 {
				want = icmp6EchoReply
			}
			if len(b) < 8 || b[0] != want || b[1] != 0 || seq != binary.BigEndian.Uint16(b[6:8]) || len(payload) != len(b)-8 {
				t.Fatalf("accepted %x as seq %d payload %x", b, seq, payload)
			}
			if raw && binary.BigEndian.Uint16(b[4:6]) != trID {
				t.Fatalf("accepted identifier %#x on a raw socket", binary.BigEndian.Uint16(b[4:6]))
			}
		}
		kind := kindDatagram
		if raw {
			kind = kindRaw
		}
		c := &socket{kind: kind, ipv6: v6, id: trID, waiters: make(map[uint16]*waiter)}
		w := &waiter{from: netip.MustParseAddr("192.0.2.1"), nonce: [payloadLen]byte{0xc0, 0xa1}, reply: make(chan arrivedReply, 1)}
		c.waiters[seq] = w
		c.deliver(b, &net.IPAddr{IP: net.IPv4(192, 0, 2, 1)}, arrivedReply{})
		select {
		case <-w.reply:
			if !ok || !bytes.Equal(payload, w.nonce[:]) {
				t.Fatalf("delivered %x without the nonce", b)
			}
		default:
		}
	})
}
