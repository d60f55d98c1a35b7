package coralcaddy

import (
	"bytes"
	"net/netip"
	"testing"
)

func TestReferenceRoundTrip(t *testing.T) {
	for _, r := range []reference{
		{Addr: netip.MustParseAddrPort("192.0.2.7:8090")},
		{Addr: netip.MustParseAddrPort("192.0.2.7:80"), Complete: true},
		{Addr: netip.MustParseAddrPort("[2001:db8::7]:443"), Complete: true, Negative: true},
		{Addr: netip.AddrPortFrom(netip.MustParseAddr("::ffff:192.0.2.7"), 80)}, // mapped: travels as IPv4
	} {
		b := r.encode()
		got, err := decodeReference(b)
		want := r
		want.Addr = netip.AddrPortFrom(r.Addr.Addr().Unmap(), r.Addr.Port())
		if err != nil || got != want {
			t.Errorf("%+v → %x → %+v, %v", r, b, got, err)
		}
	}
}

func TestReferenceRefused(t *testing.T) {
	good := reference{Addr: netip.MustParseAddrPort("192.0.2.7:80")}.encode()
	mut := func(f func([]byte) []byte) []byte { return f(bytes.Clone(good)) }
	for name, b := range map[string][]byte{
		"empty":        nil,
		"short":        good[:7],
		"long":         append(bytes.Clone(good), 0),
		"version 2":    mut(func(b []byte) []byte { b[0] = 2; return b }),
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
	f.Fuzz(func(t *testing.T, b []byte) {
		r, err := decodeReference(b)
		if err != nil {
			return
		}
		again := r.encode()
		// An IPv4-mapped IPv6 address in 20 bytes decodes to IPv4 and
		// re-encodes in 8; anything else must round-trip exactly.
		if !bytes.Equal(again, b) && !(len(b) == 20 && r.Addr.Addr().Is4()) {
			t.Fatalf("%x → %+v → %x", b, r, again)
		}
	})
}
