package diskcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"testing"
)

// FuzzDecodeMeta feeds arbitrary bytes to the metadata decoder, which reads
// files that a crash, a full disk or an operator may have damaged: it must
// never panic, must reject with ErrCorrupt, and whatever it accepts must
// encode again to a file that decodes to the same thing (re-encoding is
// then stable).
func FuzzDecodeMeta(f *testing.F) {
	for _, m := range []Meta{
		{Key: key1, Status: 200, Size: 0},
		func() Meta { m := testMeta("hello"); m.Key, m.Size = "with/slash", 5; return m }(),
		{Key: "k", Status: 404, Size: 1 << 40, Extra: map[string]string{"": ""}},
	} {
		b, err := encodeMeta(m, 0x18ea40759d1f2861)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte("CDCM\x01\x00\x00\x00"))
	full := testMeta("payload")
	full.Key, full.Size = "k\xff", 7
	full.Header["Content-Disposition"] = []string{"attachment; filename=caf\xe9", ""}
	b, err := encodeMeta(full, 7)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(b[metaHeaderLen:]) // a payload, for the sealed path
	f.Fuzz(func(t *testing.T, data []byte) {
		checkDecode(t, data)
		// The checksum keeps mutations from reaching the JSON decoder, so
		// also try the input as a payload in a valid envelope.
		checkDecode(t, seal(data))
	})
}

// seal wraps payload in a metadata header with its length and checksum.
func seal(payload []byte) []byte {
	b := make([]byte, metaHeaderLen, metaHeaderLen+len(payload))
	copy(b, metaMagic)
	b[4] = metaVersion
	binary.LittleEndian.PutUint32(b[8:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[12:], crc32.Checksum(payload, castagnoli))
	return append(b, payload...)
}

func checkDecode(t *testing.T, data []byte) {
	{
		m, gen, err := decodeMeta(data)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		if m.Key == "" || m.Size < 0 || gen == 0 {
			t.Fatalf("accepted %+v generation %d", m, gen)
		}
		b, err := encodeMeta(m, gen)
		if err != nil {
			t.Fatalf("decoded metadata does not encode: %v", err)
		}
		m2, gen2, err := decodeMeta(b)
		if err != nil || gen2 != gen {
			t.Fatalf("re-encoded metadata does not decode: %v", err)
		}
		b2, err := encodeMeta(m2, gen2)
		if err != nil || !bytes.Equal(b, b2) {
			t.Fatalf("encoding not stable:\n%q\n%q", b, b2)
		}
	}
}
