package proxy

import (
	"bytes"
	"net/netip"
	"testing"

	"github.com/coralcdn/coral/module/caddy/diskcache"
)

func TestReferenceRoundTrip(t *testing.T) {
	dht4, dht6 := netip.MustParseAddrPort("192.0.2.8:4000"), netip.MustParseAddrPort("[2001:db8::8]:4000")
	for _, tc := range []struct {
		r   reference
		len int
	}{
		{reference{Addr: netip.MustParseAddrPort("192.0.2.7:8090")}, 8},
		{reference{Addr: netip.MustParseAddrPort("192.0.2.7:80"), Complete: true}, 8},
		{reference{Addr: netip.MustParseAddrPort("[2001:db8::7]:443"), Complete: true, Negative: true}, 20},
		{reference{Addr: netip.AddrPortFrom(netip.MustParseAddr("::ffff:192.0.2.7"), 80)}, 8}, // mapped: travels as IPv4
		// Version 2: with the DSHT node's address, every family mix.
		{reference{Addr: netip.MustParseAddrPort("192.0.2.7:80"), DHT: dht4}, 15},
		{reference{Addr: netip.MustParseAddrPort("192.0.2.7:80"), DHT: dht6, Complete: true}, 27},
		{reference{Addr: netip.MustParseAddrPort("[2001:db8::7]:80"), DHT: dht4, Negative: true}, 27},
		{reference{Addr: netip.MustParseAddrPort("[2001:db8::7]:80"), DHT: dht6, Complete: true, Negative: true}, 39},
		{reference{Addr: netip.AddrPortFrom(netip.MustParseAddr("::ffff:192.0.2.7"), 80),
			DHT: netip.AddrPortFrom(netip.MustParseAddr("::ffff:192.0.2.8"), 4000)}, 15},
	} {
		b := tc.r.encode()
		got, err := decodeReference(b)
		want := tc.r
		want.Addr = netip.AddrPortFrom(tc.r.Addr.Addr().Unmap(), tc.r.Addr.Port())
		if tc.r.DHT.IsValid() {
			want.DHT = netip.AddrPortFrom(tc.r.DHT.Addr().Unmap(), tc.r.DHT.Port())
		}
		if err != nil || got != want || len(b) != tc.len {
			t.Errorf("%+v → %x (%d bytes, want %d) → %+v, %v", tc.r, b, len(b), tc.len, got, err)
		}
		if wantV := byte(1 + btoi(tc.r.DHT.IsValid())); b[0] != wantV {
			t.Errorf("%+v encoded as version %d", tc.r, b[0])
		}
	}
	// The layout, byte by byte.
	b := reference{Addr: netip.MustParseAddrPort("192.0.2.7:8090"), DHT: dht6, Complete: true}.encode()
	want := append([]byte{2, 1, 2, 0x1f, 0x9a, 0x0f, 0xa0, 192, 0, 2, 7}, dht6.Addr().AsSlice()...)
	if !bytes.Equal(b, want) {
		t.Errorf("version 2 layout: %x, want %x", b, want)
	}
}

func btoi(b bool) int {
	if b {
		return 1
	}
	return 0
}

// TestSelfReference: the references a proxy puts name its DSHT node when
// it has one.
func TestSelfReference(t *testing.T) {
	self := netip.MustParseAddrPort("127.0.6.30:8090")
	cfg := testConfig()
	cfg.Store = openTestStore(t, diskcache.Options{Dir: t.TempDir(), MaxBytes: 1 << 20, NoSync: true})
	without, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r := without.selfReference(self); r != (reference{Addr: self}) || r.encode()[0] != 1 {
		t.Errorf("without a node: %+v", r)
	}
	node := testNode(t, "127.0.6.30:4000")
	cfg.Node = func() DHT { return node }
	with, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	if r := with.selfReference(self); r.DHT != node.Addr() || r.Addr != self || r.encode()[0] != 2 {
		t.Errorf("with a node: %+v", r)
	}
}

func TestReferenceRefused(t *testing.T) {
	good := reference{Addr: netip.MustParseAddrPort("192.0.2.7:80")}.encode()
	mut := func(f func([]byte) []byte) []byte { return f(bytes.Clone(good)) }
	good2 := reference{Addr: netip.MustParseAddrPort("192.0.2.7:80"), DHT: netip.MustParseAddrPort("192.0.2.8:4000")}.encode()
	mut2 := func(f func([]byte) []byte) []byte { return f(bytes.Clone(good2)) }
	mapped2 := append(append([]byte{2, 0, 1, 0, 80, 0x0f, 0xa0}, netip.MustParseAddr("::ffff:192.0.2.7").AsSlice()...), 192, 0, 2, 8)
	for name, b := range map[string][]byte{
		"empty":        nil,
		"one byte":     {1},
		"short":        good[:7],
		"long":         append(bytes.Clone(good), 0),
		"version 0":    mut(func(b []byte) []byte { b[0] = 0; return b }),
		"version 3":    mut2(func(b []byte) []byte { b[0] = 3; return b }),
		"v1 of 15":     mut2(func(b []byte) []byte { b[0] = 1; return b }),
		"v2 of 8":      mut(func(b []byte) []byte { b[0] = 2; return b }),
		"v2 short":     good2[:14],
		"v2 long":      append(bytes.Clone(good2), 0),
		"v2 header":    good2[:7],
		"v2 family 4":  mut2(func(b []byte) []byte { b[2] = 4; return b }),
		"v2 families":  mut2(func(b []byte) []byte { b[2] = 1; return b }), // says IPv6, carries 4
		"v2 mapped":    mapped2,
		"v2 flags":     mut2(func(b []byte) []byte { b[1] = 4; return b }),
		"v2 port 0":    mut2(func(b []byte) []byte { b[3], b[4] = 0, 0; return b }),
		"v2 dht port":  mut2(func(b []byte) []byte { b[5], b[6] = 0, 0; return b }),
		"v2 dht 0.0.0": mut2(func(b []byte) []byte { copy(b[11:], []byte{0, 0, 0, 0}); return b }),
		"v2 multicast": mut2(func(b []byte) []byte { copy(b[7:], []byte{224, 0, 0, 1}); return b }),
		"v2 broadcast": mut2(func(b []byte) []byte { copy(b[11:], []byte{255, 255, 255, 255}); return b }),
		"unknown flag": mut(func(b []byte) []byte { b[1] = 0x80; return b }),
		"port 0":       mut(func(b []byte) []byte { b[2], b[3] = 0, 0; return b }),
		"unspecified":  mut(func(b []byte) []byte { copy(b[4:], []byte{0, 0, 0, 0}); return b }),
		"multicast":    mut(func(b []byte) []byte { copy(b[4:], []byte{224, 0, 0, 1}); return b }),
		"broadcast":    mut(func(b []byte) []byte { copy(b[4:], []byte{255, 255, 255, 255}); return b }),
	} {
		if _, err := decodeReference(b); err == nil {
			t.Errorf("%s: %x accepted", name, b)
		}
	}
}

// FuzzDecodeReference: whatever the DSHT returns, decoding never panics,
// and what it accepts re-encodes to the same bytes.
func FuzzDecodeReference(f *testing.F) {
	f.Add(reference{Addr: netip.MustParseAddrPort("192.0.2.7:8090"), Complete: true}.encode())
	f.Add(reference{Addr: netip.MustParseAddrPort("[2001:db8::7]:80")}.encode())
	f.Add([]byte{1, 0, 0, 80, 127, 0, 0, 1})
	f.Add(reference{Addr: netip.MustParseAddrPort("192.0.2.7:8090"), DHT: netip.MustParseAddrPort("192.0.2.7:4000"), Complete: true}.encode())
	f.Add(reference{Addr: netip.MustParseAddrPort("[2001:db8::7]:80"), DHT: netip.MustParseAddrPort("192.0.2.7:4000")}.encode())
	f.Add(reference{Addr: netip.MustParseAddrPort("192.0.2.7:80"), DHT: netip.MustParseAddrPort("[2001:db8::7]:4000"), Negative: true}.encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeReference(b)
		if err != nil {
			return
		}
		if (b[0] == 2) != r.DHT.IsValid() {
			t.Fatalf("%x: version %d, DSHT address %v", b, b[0], r.DHT)
		}
		again := r.encode()
		// An IPv4-mapped IPv6 address in a 20-byte version 1 reference
		// decodes to IPv4 and re-encodes in 8; anything else must
		// round-trip exactly.
		if !bytes.Equal(again, b) && !(len(b) == 20 && b[0] == 1 && r.Addr.Addr().Is4()) {
			t.Fatalf("%x → %+v → %x", b, r, again)
		}
	})
}
