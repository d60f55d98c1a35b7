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
		// Fields a later revision appended after the body.
		f.Add(append(append([]byte(nil), b...), 1, 0, 0xff))
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
		// Bytes after the body are ignored (a later revision's fields):
		// the encoding is the input up to there.
		if !bytes.HasPrefix(data, b) {
			t.Fatalf("encode(decode(x)) is not a prefix of x\n   x %x\ngot %x", data, b)
		}
		if _, err := Decode(b); err != nil {
			t.Fatalf("re-encoding does not decode: %v", err)
		}
	})
}
