package diskcache

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"slices"
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

// FuzzReadCheckpoint feeds arbitrary bytes to the checkpoint reader (a
// file Open reads, which a crash or an operator may have damaged): it must
// never panic, must reject with ErrCorrupt, and what it accepts must write
// back to the same bytes.
func FuzzReadCheckpoint(f *testing.F) {
	recs := []checkpointRecord{
		{nameOf(key1), 1, 2},
		{nameOf("not hex"), 1<<64 - 1, -1},
	}
	for n := range len(recs) + 1 {
		var b bytes.Buffer
		if err := writeCheckpointTo(&b, n, slices.Values(recs[:n])); err != nil {
			f.Fatal(err)
		}
		f.Add(b.Bytes())
	}
	f.Add([]byte("CDCX\x01\x00\x00\x00\xff\xff\xff\xff\xff\xff\xff\xff"))
	f.Fuzz(func(t *testing.T, data []byte) {
		var got []checkpointRecord
		err := readCheckpoint(bytes.NewReader(data), func(r checkpointRecord) { got = append(got, r) })
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("error %v does not wrap ErrCorrupt", err)
			}
			return
		}
		var b bytes.Buffer
		if err := writeCheckpointTo(&b, len(got), slices.Values(got)); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b.Bytes(), data) {
			t.Fatalf("accepted % x, writes back % x", data, b.Bytes())
		}
	})
}

// FuzzParseObjectFile feeds arbitrary names to the parser of file names
// in objects/ (which Open trusts for an inline file's sizes): it must
// never panic, and what it accepts must be what the Store writes.
func FuzzParseObjectFile(f *testing.F) {
	n := nameOf(key1)
	f.Add(inlineBase(n, 0x18ea40759d1f2861, 1024, 300) + objSuffix)
	f.Add(inlineBase(nameOf("x"), 1, 0, metaHeaderLen) + objSuffix)
	f.Add(versionBase(n, 7) + bodySuffix)
	f.Add(versionBase(n, 7) + metaSuffix)
	f.Fuzz(func(t *testing.T, s string) {
		of, ok := parseObjectFile(s)
		if !ok {
			return
		}
		var back string
		switch of.kind {
		case kindInline:
			back = inlineBase(of.name, of.gen, of.size, of.metaLen) + objSuffix
			if of.size > InlineMaxSize || of.metaLen < metaHeaderLen {
				t.Fatalf("%q: sizes %d, %d", s, of.size, of.metaLen)
			}
		case kindBody:
			back = versionBase(of.name, of.gen) + bodySuffix
		case kindMeta:
			back = versionBase(of.name, of.gen) + metaSuffix
		}
		if back != s {
			t.Fatalf("parsed %q as %+v, which is %q", s, of, back)
		}
	})
}
