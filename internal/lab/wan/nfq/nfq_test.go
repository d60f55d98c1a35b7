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

func FuzzParseMessages(f *testing.F) {
	f.Add(packetMsg(1, 2, make([]byte, 20)))
	f.Add(append(packetMsg(1, 2, nil), packetMsg(3, 4, []byte{1})...))
	f.Fuzz(func(t *testing.T, b []byte) {
		ps, _ := ParseMessages(b)
		for _, p := range ps {
			if len(p.Payload) > len(b) {
				t.Fatalf("payload of %d octets from %d", len(p.Payload), len(b))
			}
		}
	})
}
