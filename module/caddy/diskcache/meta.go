package diskcache

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"maps"
	"net/http"
	"slices"
	"time"
)

// Meta is what the store keeps next to an object's body. Apart from Key and
// Size the store does not interpret it; the HTTP layer decides what
// Status, Header, Expires and Extra mean.
//
// A Meta returned by the store (Reader.Meta, Peek) may share its Header and
// Extra maps with other readers of the same object: treat it as read-only,
// and Clone it before changing anything.
type Meta struct {
	// Key is the cache key. Create, Commit and UpdateMeta fill it in when
	// empty and reject a different one.
	Key string
	// Status is the HTTP status code of the stored response.
	Status int
	// Header is the stored response header.
	Header http.Header
	// Stored is when the response was stored; Create sets it to Now when zero.
	Stored time.Time
	// Expires is caller-managed freshness; the store only keeps it.
	Expires time.Time
	// Size is the body length: -1 while unknown (a chunked response still
	// being written), the declared length when the caller passed one to
	// Create, and always the exact length once committed.
	Size int64
	// Extra is room for the caller: validators, the origin's scheme, ...
	Extra map[string]string
}

// Clone returns a deep copy of m.
func (m Meta) Clone() Meta {
	m.Header = m.Header.Clone()
	m.Extra = maps.Clone(m.Extra)
	return m
}

// On-disk metadata file ("<name>-<gen>.meta"):
//
//	offset  size  field
//	0       4     magic "CDCM"
//	4       1     format version (1)
//	5       3     reserved, zero
//	8       4     payload length, little endian
//	12      4     CRC-32C (Castagnoli) of the payload, little endian
//	16      n     payload
//
// The length must match the file exactly, so a truncated or extended file
// is rejected, and the checksum catches torn or bit-flipped payloads. The
// payload is binary, so that keys and header values keep arbitrary bytes
// (HTTP allows non-UTF-8 obs-text, which JSON would mangle):
//
//	uvarint  generation (must match the file name)
//	string   key
//	varint   status
//	time     stored
//	time     expires
//	varint   size
//	uvarint  number of header fields, then for each, names strictly
//	         increasing: string name, uvarint number of values, strings
//	uvarint  number of Extra entries, then for each, keys strictly
//	         increasing: string key, string value
//
// where string is a uvarint length and the bytes, and time is a byte 0
// (the zero time) or 1 followed by varint Unix seconds and uvarint
// nanoseconds (years 1 to 9999; decoded in UTC). Nothing may follow. An
// incompatible change bumps the version byte.
const (
	metaMagic     = "CDCM"
	metaVersion   = 1
	metaHeaderLen = 16

	// MaxMetaSize bounds an encoded metadata payload (headers and Extra).
	MaxMetaSize = 1 << 20
	// MaxKeyLen bounds the length of a key.
	MaxKeyLen = 4096
)

var (
	castagnoli = crc32.MakeTable(crc32.Castagnoli)
	minTime    = time.Date(1, 1, 1, 0, 0, 0, 0, time.UTC).Unix()
	maxTime    = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC).Unix() // exclusive
)

// encodeMeta encodes a committed object's metadata (Size must be known).
func encodeMeta(m Meta, gen uint64) ([]byte, error) {
	if m.Key == "" || len(m.Key) > MaxKeyLen || m.Size < 0 || gen == 0 {
		return nil, fmt.Errorf("%w: key %q, size %d, generation %d", ErrInvalidMeta, m.Key, m.Size, gen)
	}
	for _, t := range []time.Time{m.Stored, m.Expires} {
		if !t.IsZero() && (t.Unix() < minTime || t.Unix() >= maxTime) {
			return nil, fmt.Errorf("%w: time %v outside years 1 to 9999", ErrInvalidMeta, t)
		}
	}
	b := make([]byte, metaHeaderLen, 256)
	copy(b, metaMagic)
	b[4] = metaVersion
	b = binary.AppendUvarint(b, gen)
	b = appendString(b, m.Key)
	b = binary.AppendVarint(b, int64(m.Status))
	b = appendTime(b, m.Stored)
	b = appendTime(b, m.Expires)
	b = binary.AppendVarint(b, m.Size)
	b = binary.AppendUvarint(b, uint64(len(m.Header)))
	for _, name := range slices.Sorted(maps.Keys(m.Header)) {
		b = appendString(b, name)
		b = binary.AppendUvarint(b, uint64(len(m.Header[name])))
		for _, v := range m.Header[name] {
			b = appendString(b, v)
		}
	}
	b = binary.AppendUvarint(b, uint64(len(m.Extra)))
	for _, k := range slices.Sorted(maps.Keys(m.Extra)) {
		b = appendString(b, k)
		b = appendString(b, m.Extra[k])
	}
	payload := b[metaHeaderLen:]
	if len(payload) > MaxMetaSize {
		return nil, fmt.Errorf("%w: %d bytes encoded, limit %d", ErrInvalidMeta, len(payload), MaxMetaSize)
	}
	binary.LittleEndian.PutUint32(b[8:], uint32(len(payload)))
	binary.LittleEndian.PutUint32(b[12:], crc32.Checksum(payload, castagnoli))
	return b, nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return append(b, 0)
	}
	b = append(b, 1)
	b = binary.AppendVarint(b, t.Unix())
	return binary.AppendUvarint(b, uint64(t.Nanosecond()))
}

// decodeMeta decodes and validates a metadata file. Every error wraps
// ErrCorrupt.
func decodeMeta(b []byte) (Meta, uint64, error) {
	if len(b) < metaHeaderLen {
		return Meta{}, 0, fmt.Errorf("%w: %d bytes, shorter than the header", ErrCorrupt, len(b))
	}
	if string(b[:4]) != metaMagic {
		return Meta{}, 0, fmt.Errorf("%w: bad magic %q", ErrCorrupt, b[:4])
	}
	if b[4] != metaVersion || b[5] != 0 || b[6] != 0 || b[7] != 0 {
		return Meta{}, 0, fmt.Errorf("%w: unsupported version %d.%d.%d.%d", ErrCorrupt, b[4], b[5], b[6], b[7])
	}
	n := binary.LittleEndian.Uint32(b[8:])
	payload := b[metaHeaderLen:]
	if n > MaxMetaSize || uint64(n) != uint64(len(payload)) {
		return Meta{}, 0, fmt.Errorf("%w: payload length %d, file has %d", ErrCorrupt, n, len(payload))
	}
	if sum := crc32.Checksum(payload, castagnoli); sum != binary.LittleEndian.Uint32(b[12:]) {
		return Meta{}, 0, fmt.Errorf("%w: checksum mismatch", ErrCorrupt)
	}
	d := metaDecoder{b: payload}
	var m Meta
	gen := d.uvarint()
	m.Key = d.string()
	status := d.varint()
	m.Status = int(status)
	m.Stored = d.time()
	m.Expires = d.time()
	m.Size = d.varint()
	if nh := d.count(); nh > 0 {
		m.Header = make(http.Header, nh)
		prev := ""
		for i := range nh {
			name := d.string()
			if i > 0 && name <= prev {
				d.fail("header names out of order")
			}
			prev = name
			vals := make([]string, d.count())
			for j := range vals {
				vals[j] = d.string()
			}
			if d.err != nil {
				break
			}
			m.Header[name] = vals
		}
	}
	if ne := d.count(); ne > 0 {
		m.Extra = make(map[string]string, ne)
		prev := ""
		for i := range ne {
			k, v := d.string(), d.string()
			if i > 0 && k <= prev {
				d.fail("extra keys out of order")
			}
			if d.err != nil {
				break
			}
			prev, m.Extra[k] = k, v
		}
	}
	switch {
	case d.err != nil:
		return Meta{}, 0, d.err
	case len(d.b) != 0:
		return Meta{}, 0, fmt.Errorf("%w: %d bytes after the payload", ErrCorrupt, len(d.b))
	case m.Key == "" || len(m.Key) > MaxKeyLen || m.Size < 0 || gen == 0 || int64(m.Status) != status:
		return Meta{}, 0, fmt.Errorf("%w: key %q, size %d, generation %d, status %d", ErrCorrupt, m.Key, m.Size, gen, status)
	}
	return m, gen, nil
}

// metaDecoder reads a payload; the first error sticks.
type metaDecoder struct {
	b   []byte
	err error
}

func (d *metaDecoder) fail(what string) {
	if d.err == nil {
		d.err = fmt.Errorf("%w: %s", ErrCorrupt, what)
	}
	d.b = nil
}

func (d *metaDecoder) uvarint() uint64 {
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.fail("bad or truncated number")
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *metaDecoder) varint() int64 {
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.fail("bad or truncated number")
		return 0
	}
	d.b = d.b[n:]
	return v
}

// count reads a number of elements, each at least one byte long, so it
// cannot exceed what is left.
func (d *metaDecoder) count() int {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("count exceeds the payload")
		return 0
	}
	return int(n)
}

func (d *metaDecoder) string() string {
	n := d.uvarint()
	if n > uint64(len(d.b)) {
		d.fail("string exceeds the payload")
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}

func (d *metaDecoder) time() time.Time {
	if len(d.b) == 0 {
		d.fail("truncated time")
		return time.Time{}
	}
	flag := d.b[0]
	d.b = d.b[1:]
	if flag == 0 {
		return time.Time{}
	}
	sec, nsec := d.varint(), d.uvarint()
	if flag != 1 || sec < minTime || sec >= maxTime || nsec >= 1e9 || (sec == minTime && nsec == 0) {
		d.fail("bad time")
		return time.Time{}
	}
	return time.Unix(sec, int64(nsec)).UTC()
}
