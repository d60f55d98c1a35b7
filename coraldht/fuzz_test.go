package coraldht

import (
	"bytes"
	"encoding/base64"
	"encoding/binary"
	"encoding/hex"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
	"github.com/coralcdn/coral/coraldht/memnet"
)

func FuzzParseKeyText(f *testing.F) {
	secret := bytes.Repeat([]byte{0xFB, 0xEF, 0x01, 0x80}, 8)
	f.Add([]byte(base64.StdEncoding.EncodeToString(secret) + "\n"))
	f.Add([]byte(base64.RawURLEncoding.EncodeToString(secret)))
	f.Add([]byte(hex.EncodeToString(secret)))
	f.Add([]byte("# comment\n\n  " + hex.EncodeToString(secret) + "  \r\n# end\n"))
	f.Add([]byte(""))
	f.Add([]byte("#\n"))
	f.Add([]byte("not a key"))
	f.Add(GenerateKey())
	f.Fuzz(func(t *testing.T, data []byte) {
		s, err := parseKeyText(data)
		if err != nil {
			if s != nil {
				t.Fatalf("secret %x returned with error %v", s, err)
			}
			return
		}
		if len(s) < KeySize {
			t.Fatalf("accepted a %d-byte secret", len(s))
		}
		// The secret, written back in either canonical form, reads the same;
		// except that base64 text made only of hex digits reads as hex when
		// that gives a whole key (hex is tried first).
		for _, text := range []string{hex.EncodeToString(s), base64.StdEncoding.EncodeToString(s)} {
			want := s
			if h, err := hex.DecodeString(text); err == nil && len(h) >= KeySize {
				want = h
			}
			again, err := parseKeyText([]byte(text))
			if len(want) < KeySize {
				if err == nil {
					t.Fatalf("secret %x written as %q parses as a %d-byte key", s, text, len(again))
				}
				continue
			}
			if err != nil || !bytes.Equal(again, want) {
				t.Fatalf("secret %x written as %q parses as %x, %v", s, text, again, err)
			}
		}
		if _, err := NewKey(s); err != nil {
			t.Fatalf("parsed secret refused by NewKey: %v", err)
		}
	})
}

// fuzzStamp makes timestamps for FuzzHandleDatagram: the wall clock, bumped
// so each is fresh for the replay filter.
var fuzzStamp atomic.Int64

func FuzzHandleDatagram(f *testing.F) {
	for _, b := range fuzzSeeds(f) {
		f.Add(b, true)                                        // sealed (and re-stamped) by the target
		f.Add(testKey.seal(append([]byte(nil), b...)), false) // already sealed, stale stamp
	}
	f.Add([]byte{}, false)
	f.Add(make([]byte, MaxDatagram+1), false)
	f.Add([]byte("garbage"), true)

	// One node for all iterations, on a network without delay, so every
	// reply it sends is in the attacker's inbox when handleDatagram returns.
	mn := memnet.New(memnet.Config{})
	tr, err := mn.Listen(memAddr(1))
	if err != nil {
		f.Fatal(err)
	}
	atk, err := mn.Listen(memAddr(2))
	if err != nil {
		f.Fatal(err)
	}
	cfg := DefaultConfig()
	cfg.Key = testKey
	cfg.Seed = 1
	node, err := NewNode(cfg, tr)
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() {
		node.Close()
		atk.Close()
	})

	f.Fuzz(func(t *testing.T, data []byte, sealValid bool) {
		pkt := append([]byte(nil), data...)
		if sealValid {
			if len(pkt) >= wireOffTimestamp+8 {
				// A fresh stamp gets the message past the replay filter
				// into dispatch.
				now := time.Now().UnixNano()
				ts := fuzzStamp.Add(1)
				if ts < now {
					fuzzStamp.CompareAndSwap(ts, now)
					ts = fuzzStamp.Add(1)
				}
				binary.BigEndian.PutUint64(pkt[wireOffTimestamp:], uint64(ts))
			}
			pkt = testKey.seal(pkt)
		}
		// What the node will accept as a request, if anything.
		var req *wire.Message
		if len(pkt) <= MaxDatagram {
			if body, ok := testKey.open(pkt); ok {
				if m, err := wire.Decode(body); err == nil && !m.Response && m.Sender.ID != node.ID() {
					req = m
				}
			}
		}

		node.handleDatagram(pkt, atk.LocalAddr())

		replies := 0
		for {
			buf := make([]byte, MaxDatagram+1)
			n, _, queued := atk.TryReadFrom(buf)
			if !queued {
				break
			}
			body, ok := testKey.open(buf[:n])
			if !ok {
				t.Fatalf("node sent a datagram that does not authenticate: %x", buf[:n])
			}
			m, err := wire.Decode(body)
			if err != nil {
				t.Fatalf("node sent a datagram that does not parse: %v", err)
			}
			if !m.Response {
				continue // maintenance traffic to a learned contact
			}
			replies++
			if req == nil {
				t.Fatalf("node replied %+v to a datagram it should have dropped", m)
			}
			if m.Type != req.Type || m.ReqID != req.ReqID {
				t.Fatalf("reply %v/%d does not match request %v/%d", m.Type, m.ReqID, req.Type, req.ReqID)
			}
		}
		if replies > 1 {
			t.Fatalf("node sent %d replies to one datagram", replies)
		}
	})
}
