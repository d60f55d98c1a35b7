//go:build linux

package nfq

import (
	"encoding/binary"
	"testing"
)

// packetMsg builds one NFQNL_MSG_PACKET as the kernel sends it.
func packetMsg(id, out uint32, payload []byte) []byte {
	hdr := make([]byte, 7)
	binary.BigEndian.PutUint32(hdr, id)
	dev := binary.BigEndian.AppendUint32(nil, out)
	return appendMsg(nil, msgPacket, 0, 0, 0, []attr{{attrPacketHdr, hdr}, {attrOutDev, dev}, {attrPayload, payload}})
}

func TestParseMessages(t *testing.T) {
	ip := make([]byte, 20)
	copy(ip[12:], []byte{198, 18, 1, 10, 198, 18, 2, 10})
	b := append(packetMsg(7, 3, ip), packetMsg(8, 4, ip[:5])...)
	ps, err := ParseMessages(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(ps) != 2 || ps[0].ID != 7 || ps[0].OutDev != 3 || len(ps[0].Payload) != 20 || ps[1].ID != 8 || ps[1].OutDev != 4 {
		t.Fatalf("got %+v", ps)
	}
	// A verdict message is not a packet; truncations are errors.
	if ps, err := ParseMessages(appendMsg(nil, msgVerdict, 0, 0, 0, nil)); err != nil || len(ps) != 0 {
		t.Errorf("verdict: %v %v", ps, err)
	}
	for _, n := range []int{3, 17, len(b) - 1} {
		if _, err := ParseMessages(b[:n]); err == nil {
			t.Errorf("%d of %d octets parsed without error", n, len(b))
		}
	}
	if _, err := ParseMessages(appendMsg(nil, msgPacket, 0, 0, 0, nil)); err == nil {
		t.Error("a packet without its header parsed")
	}
}

// The kernel's arrival stamp is seconds and microseconds, big-endian; a
// short one is an error, an absurd one no stamp.
func TestParseTimestamp(t *testing.T) {
	hdr := make([]byte, 7)
	binary.BigEndian.PutUint32(hdr, 9)
	stamp := func(sec, usec uint64) []byte {
		return binary.BigEndian.AppendUint64(binary.BigEndian.AppendUint64(nil, sec), usec)
	}
	for _, tc := range []struct {
		name string
		ts   []byte
		want int64
		err  bool
	}{
		{"stamped", stamp(1_800_000_000, 123_456), 1_800_000_000_123_456_000, false},
		{"usec out of range", stamp(1_800_000_000, 2_000_000), 0, false},
		{"sec out of range", stamp(1<<40, 0), 0, false},
		{"short", stamp(1, 2)[:12], 0, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ps, err := ParseMessages(appendMsg(nil, msgPacket, 0, 0, 0, []attr{{attrPacketHdr, hdr}, {attrTimestamp, tc.ts}}))
			if tc.err {
				if err == nil {
					t.Fatalf("parsed: %+v", ps)
				}
				return
			}
			if err != nil || len(ps) != 1 || ps[0].Stamp != tc.want || ps[0].ID != 9 {
				t.Fatalf("got %+v, %v; want stamp %d", ps, err, tc.want)
			}
		})
	}
}

func FuzzParseMessages(f *testing.F) {
	f.Add(packetMsg(1, 2, make([]byte, 20)))
	f.Add(append(packetMsg(1, 2, nil), packetMsg(3, 4, []byte{1})...))
	f.Add(appendMsg(nil, msgPacket, 0, 0, 0, []attr{{attrPacketHdr, make([]byte, 4)}, {attrTimestamp, make([]byte, 16)}}))
	f.Fuzz(func(t *testing.T, b []byte) {
		ps, _ := ParseMessages(b)
		for _, p := range ps {
			if len(p.Payload) > len(b) {
				t.Fatalf("payload of %d octets from %d", len(p.Payload), len(b))
			}
		}
	})
}
