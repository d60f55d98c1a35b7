package coral

import (
	"encoding/binary"
	"testing"
)

// sipHashVectors are the 64 SipHash-2-4 test vectors of the SipHash paper
// (Appendix A) and reference implementation: vector i is the hash of the
// message 00 01 02 ... (i-1) (i bytes) under the key 00 01 ... 0f, as the
// 64-bit value the reference returns.
var sipHashVectors = [64]uint64{
	0x726fdb47dd0e0e31, 0x74f839c593dc67fd, 0x0d6c8009d9a94f5a, 0x85676696d7fb7e2d,
	0xcf2794e0277187b7, 0x18765564cd99a68d, 0xcbc9466e58fee3ce, 0xab0200f58b01d137,
	0x93f5f5799a932462, 0x9e0082df0ba9e4b0, 0x7a5dbbc594ddb9f3, 0xf4b32f46226bada7,
	0x751e8fbc860ee5fb, 0x14ea5627c0843d90, 0xf723ca908e7af2ee, 0xa129ca6149be45e5,
	0x3f2acc7f57c29bdb, 0x699ae9f52cbe4794, 0x4bc1b3f0968dd39c, 0xbb6dc91da77961bd,
	0xbed65cf21aa2ee98, 0xd0f2cbb02e3b67c7, 0x93536795e3a33e88, 0xa80c038ccd5ccec8,
	0xb8ad50c6f649af94, 0xbce192de8a85b8ea, 0x17d835b85bbb15f3, 0x2f2e6163076bcfad,
	0xde4daaaca71dc9a5, 0xa6a2506687956571, 0xad87a3535c49ef28, 0x32d892fad841c342,
	0x7127512f72f27cce, 0xa7f32346f95978e3, 0x12e0b01abb051238, 0x15e034d40fa197ae,
	0x314dffbe0815a3b4, 0x027990f029623981, 0xcadcd4e59ef40c4d, 0x9abfd8766a33735c,
	0x0e3ea96b5304a7d0, 0xad0c42d6fc585992, 0x187306c89bc215a9, 0xd4a60abcf3792b95,
	0xf935451de4f21df2, 0xa9538f0419755787, 0xdb9acddff56ca510, 0xd06c98cd5c0975eb,
	0xe612a3cb9ecba951, 0xc766e62cfcadaf96, 0xee64435a9752fe72, 0xa192d576b245165a,
	0x0a8787bf8ecb74b2, 0x81b3e73d20b49b6f, 0x7fa8220ba3b2ecea, 0x245731c13ca42499,
	0xb78dbfaf3a8d83bd, 0xea1ad565322a1a0b, 0x60e61c23a3795013, 0x6606d7e446282b93,
	0x6ca4ecb15c5f91e1, 0x9f626da15c9625f3, 0xe51b38608ef25f57, 0x958a324ceb064572,
}

func sipHashTestKey() [16]byte {
	var k [16]byte
	for i := range k {
		k[i] = byte(i)
	}
	return k
}

func TestSipHash24Vectors(t *testing.T) {
	key := sipHashTestKey()
	msg := make([]byte, len(sipHashVectors))
	for i := range msg {
		msg[i] = byte(i)
	}
	for n, want := range sipHashVectors {
		if got := siphash24(key, msg[:n]); got != want {
			t.Errorf("siphash24(key, 00..%02x) [len %d] = %#016x, want %#016x", n-1, n, got, want)
		}
	}
}

// TestSipHash24Bytes checks the byte order of the output. The paper's
// Appendix A example (the 15-byte message 00..0e) gives the output as the
// 64-bit value a129ca6149be45e5; the reference implementation writes it out
// little-endian, e5 45 be 49 61 ca 29 a1, and that byte string is what
// RFC 9018 puts in a server cookie (the RFC 9018 vectors in cookie_test.go
// check this end to end).
func TestSipHash24Bytes(t *testing.T) {
	key := sipHashTestKey()
	msg := []byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14}
	var out [8]byte
	binary.LittleEndian.PutUint64(out[:], siphash24(key, msg))
	want := [8]byte{0xe5, 0x45, 0xbe, 0x49, 0x61, 0xca, 0x29, 0xa1}
	if out != want {
		t.Errorf("output bytes = % x, want % x", out, want)
	}
}

// TestSipHash24DoesNotModify makes sure the input slice is left alone and
// that hashing a sub-slice only reads that sub-slice.
func TestSipHash24DoesNotModify(t *testing.T) {
	key := sipHashTestKey()
	buf := make([]byte, 64)
	for i := range buf {
		buf[i] = byte(i)
	}
	// A slice of length 7 whose capacity extends into bytes that must not
	// be read.
	short := buf[:7]
	if got := siphash24(key, short); got != sipHashVectors[7] {
		t.Errorf("len 7 with spare capacity = %#016x, want %#016x", got, sipHashVectors[7])
	}
	for i := range buf {
		if buf[i] != byte(i) {
			t.Fatalf("input modified at %d", i)
		}
	}
}

func BenchmarkSipHash24Cookie(b *testing.B) {
	key := sipHashTestKey()
	msg := make([]byte, 8+8+16) // client cookie, version..timestamp, IPv6
	b.SetBytes(int64(len(msg)))
	for b.Loop() {
		siphash24(key, msg)
	}
}
