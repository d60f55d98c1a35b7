package wire

import "encoding/binary"

// The extension area (PROTOCOL.md, Extensions): fields appended after a
// message body, which the versioning rule lets a revision add. It is a
// list of type-length-value entries in strictly increasing type order:
//
//	type    1   1 cookie, 2 truncated, 3 padding, 4 load, 255 identity;
//	            others are a later revision's, kept but not read
//	length  2   of the value
//	value
//
// A sender that advertises CapExtensions and knows its peer does too
// always writes the cookie first; the identity, when present, is last, so
// its signature covers every byte before it.

const (
	extCookie    = 1
	extTruncated = 2
	extPadding   = 3
	extLoad      = 4
	extIdentity  = 255

	extHeader = 1 + 2
	cookieLen = 8 + 8
	// loadLen: format (1), bandwidth, requests, disk (1 each).
	loadLen = 4
	// LoadFormat is the format byte of the load entry. A receiver reads
	// only the format it knows; a load in another format is kept unread
	// (like a later revision's extension), so a later release can change
	// the entry without a new type.
	LoadFormat = 1

	// SignatureLen is the length of an identity's signature (Ed25519).
	SignatureLen = 64

	// MaxIdentityLen bounds a certificate carried in a datagram.
	MaxIdentityLen = 256
)

// extLen is the size of m's extension area.
func extLen(m *Message) int {
	if !m.Ext {
		return 0
	}
	n := extHeader + cookieLen
	if m.Truncated {
		n += extHeader
	}
	if m.Pad > 0 {
		n += extHeader + m.Pad
	}
	if m.Load.Present {
		n += extHeader + loadLen
	}
	n += len(m.Unknown)
	if m.Identity != nil {
		n += extHeader + len(m.Identity) + SignatureLen
	}
	return n
}

// ExtLen is the size of the extension area Encode appends for m: what
// lists in the body leave room for.
func ExtLen(m *Message) int { return extLen(m) }

func (w *writer) extension(typ uint8, value []byte) {
	w.u8(typ)
	w.u16(uint16(len(value)))
	w.b = append(w.b, value...)
}

// ext writes m's extension area. An identity's signature is m.Signature
// or, without one, zeros for the caller to fill in (SignatureLen bytes at
// the end).
func (w *writer) ext(m *Message) {
	if !m.Ext {
		return
	}
	w.u8(extCookie)
	w.u16(cookieLen)
	w.u64(m.Grant)
	w.u64(m.Echo)
	if m.Truncated {
		w.extension(extTruncated, nil)
	}
	if m.Pad > 0 {
		w.u8(extPadding)
		w.u16(uint16(m.Pad))
		w.b = append(w.b, make([]byte, m.Pad)...) // no allocation: the compiler extends w.b
	}
	if m.Load.Present {
		w.u8(extLoad)
		w.u16(loadLen)
		w.b = append(w.b, LoadFormat, m.Load.Bandwidth, m.Load.Requests, m.Load.Disk)
	}
	w.b = append(w.b, m.Unknown...)
	if m.Identity != nil {
		w.u8(extIdentity)
		w.u16(uint16(len(m.Identity) + SignatureLen))
		w.b = append(w.b, m.Identity...)
		sig := m.Signature
		if len(sig) != SignatureLen {
			sig = make([]byte, SignatureLen)
		}
		w.b = append(w.b, sig...)
	}
}

// ext reads the extension area: the rest of the datagram, total bytes
// long in all.
func (r *reader) ext(m *Message, total int) {
	if len(r.b) == 0 || r.err != nil {
		return
	}
	m.Ext = true
	last := -1
	for len(r.b) > 0 && r.err == nil {
		typ := int(r.u8("extension type"))
		n := int(r.u16("extension length"))
		v := r.take(n, "extension")
		switch {
		case r.err != nil:
			return
		case typ <= last || (last < 0 && typ != extCookie):
			r.fail("extension", errExtension)
		case typ == extCookie:
			if n != cookieLen {
				r.fail("cookie", errBadField)
				return
			}
			m.Grant = binary.BigEndian.Uint64(v[:8])
			m.Echo = binary.BigEndian.Uint64(v[8:])
		case typ == extTruncated:
			if n != 0 || !m.Response {
				r.fail("truncated", errBadField)
				return
			}
			m.Truncated = true
		case typ == extPadding:
			if n == 0 || !allZero(v) {
				r.fail("padding", errBadField)
				return
			}
			m.Pad = n
		case typ == extLoad && n == loadLen && v[0] == LoadFormat:
			m.Load = Load{Present: true, Bandwidth: v[1], Requests: v[2], Disk: v[3]}
		case typ == extIdentity:
			if n <= SignatureLen || n > MaxIdentityLen+SignatureLen {
				r.fail("identity", errBadField)
				return
			}
			m.Identity = append([]byte(nil), v[:n-SignatureLen]...)
			m.Signature = append([]byte(nil), v[n-SignatureLen:]...)
			m.SignedLen = total - SignatureLen
		default:
			// A later revision's: kept as it came, so that re-encoding
			// reproduces the datagram.
			m.Unknown = append(m.Unknown, byte(typ), byte(n>>8), byte(n))
			m.Unknown = append(m.Unknown, v...)
		}
		last = typ
	}
}

func allZero(b []byte) bool {
	for _, x := range b {
		if x != 0 {
			return false
		}
	}
	return true
}

// Load is the load entry: how loaded the sender, a node running an HTTP
// proxy, says it is, each as a percent of what it may carry (255 is 255 %
// or more). A node that publishes no load sends none (Present false).
type Load struct {
	Present   bool
	Bandwidth uint8 // of its bandwidth budget in the current window (0 without a budget)
	Requests  uint8 // requests in flight, of the number it is configured to carry
	Disk      uint8 // of its cache's room that its file system cannot provide
}
