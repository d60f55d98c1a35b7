package icmpprobe

import (
	"encoding/binary"
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
		hop, ok := parseTimeExceeded(msg, v6, id)
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
				if _, ok := parseTimeExceeded(msg[:n+1], v6, id); ok {
					echo = msg[n-7 : n+1]
					break
				}
			}
			if binary.BigEndian.Uint16(echo[4:6]) != id || int(binary.BigEndian.Uint16(echo[6:8])) != hop {
				t.Fatalf("hop %d from echo header %x, id %#x", hop, echo, id)
			}
		}

		s := traceState{dst: netip.MustParseAddr("198.51.100.7"), v6: v6, id: id, last: traceMaxHops}
		s.observe(msg, netip.MustParseAddr("192.0.2.1"))
		s.observe(msg, s.dst)
		s.done()
		if rs := s.routers(); len(rs) > 1 {
			t.Fatalf("one message gave routers %v", rs)
		}
	})
}
