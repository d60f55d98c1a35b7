package wire

import (
	"bytes"
	"testing"
)

// wireSamplesEncoded returns valid encodings of every message type and
// direction.
func wireSamplesEncoded(t testing.TB) [][]byte {
	var out [][]byte
	for _, s := range wireSamples() {
		out = append(out, wireEncode(t, s.m))
	}
	return out
}

func FuzzDecodeMessage(f *testing.F) {
	for _, b := range wireSamplesEncoded(f) {
		f.Add(b)
		// The extension area, with a later revision's extension in it.
		f.Add(append(append([]byte(nil), b...), 1, 0, 16, 1, 2, 3, 4, 5, 6, 7, 8, 0, 0, 0, 0, 0, 0, 0, 1, 9, 0, 1, 0xff))
	}
	for _, s := range wireSamples() {
		if m := withExt(s.m); len(m.Payload) < MaxAppPayload {
			f.Add(wireEncode(f, m))
		}
	}
	f.Add([]byte{})
	f.Add([]byte{0xC0, 0x2A, 1})
	f.Add(wireTooLong(f))
	f.Fuzz(func(t *testing.T, data []byte) {
		// Decode a private copy and scribble over it afterwards: the
		// message must not alias its input.
		in := append([]byte(nil), data...)
		m, err := Decode(in)
		if err != nil {
			if m != nil {
				t.Fatalf("decode returned a message with error %v", err)
			}
			return
		}
		for i := range in {
			in[i] ^= 0xFF
		}
		b, err := Encode(nil, m)
		if err != nil {
			t.Fatalf("decoded %x to %+v, which does not encode: %v", data, m, err)
		}
		if !bytes.Equal(data, b) {
			t.Fatalf("encode(decode(x)) is not x\n   x %x\ngot %x", data, b)
		}
		if _, err := Decode(b); err != nil {
			t.Fatalf("re-encoding does not decode: %v", err)
		}
	})
}
