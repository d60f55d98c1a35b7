package wire

import (
	"encoding/binary"
	"net/netip"
	"time"
)

// decodeError says which part of a datagram was rejected.
type decodeError struct {
	field string
	err   error
}

func (e *decodeError) Error() string { return "coraldht: decode " + e.field + ": " + e.err.Error() }
func (e *decodeError) Unwrap() error { return e.err }

type reader struct {
	b   []byte
	err error
}

func (r *reader) fail(field string, err error) {
	if r.err == nil {
		r.err = &decodeError{field, err}
	}
}

func (r *reader) take(n int, field string) []byte {
	if r.err != nil {
		return nil
	}
	if len(r.b) < n {
		r.fail(field, errShort)
		return nil
	}
	p := r.b[:n]
	r.b = r.b[n:]
	return p
}

func (r *reader) u8(field string) uint8 {
	p := r.take(1, field)
	if p == nil {
		return 0
	}
	return p[0]
}

func (r *reader) u16(field string) uint16 {
	p := r.take(2, field)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint16(p)
}

func (r *reader) u32(field string) uint32 {
	p := r.take(4, field)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint32(p)
}

func (r *reader) u64(field string) uint64 {
	p := r.take(8, field)
	if p == nil {
		return 0
	}
	return binary.BigEndian.Uint64(p)
}

func (r *reader) id(field string) ID {
	var id ID
	copy(id[:], r.take(IDLen, field))
	return id
}

func (r *reader) boolean(field string) bool {
	switch r.u8(field) {
	case 0:
		return false
	case 1:
		return true
	}
	r.fail(field, errBadField)
	return false
}

func (r *reader) addr(field string) netip.AddrPort {
	var ip netip.Addr
	switch r.u8(field) {
	case 4:
		p := r.take(4, field)
		if p == nil {
			return netip.AddrPort{}
		}
		ip = netip.AddrFrom4([4]byte(p))
	case 6:
		p := r.take(16, field)
		if p == nil {
			return netip.AddrPort{}
		}
		ip = netip.AddrFrom16([16]byte(p))
		if ip.Is4In6() {
			// IPv4 travels as family 4; one encoding per address.
			r.fail(field, errBadField)
		}
	default:
		r.fail(field, errBadField)
		return netip.AddrPort{}
	}
	ap := netip.AddrPortFrom(ip, r.u16(field))
	if r.err == nil && CheckAddr(ap) != nil {
		r.fail(field, errBadField)
	}
	return ap
}

func (r *reader) contact(field string) Contact {
	c := Contact{ID: r.id(field), Addr: r.addr(field), Services: Services(r.u32(field))}
	if r.err == nil && NodeIDFor(c.Addr) != c.ID {
		r.fail(field, errIDMismatch)
	}
	return c
}

// Decode parses a datagram body (the bytes before the tag). It accepts
// exactly the encodings Encode produces, so decode→encode reproduces the
// input byte for byte; extensions of a later revision are kept unread in
// Message.Unknown.
func Decode(b []byte) (*Message, error) {
	if len(b) > MaxDatagram-TagLen {
		// Encode never produces more; accepting it would let a list
		// decode that no reply could carry.
		return nil, &decodeError{"length", errTooLong}
	}
	r := &reader{b: b}
	if m0, m1 := r.u8("magic"), r.u8("magic"); r.err == nil && (m0 != wireMagic0 || m1 != wireMagic1) {
		return nil, &decodeError{"magic", errMagic}
	}
	if v := r.u8("version"); r.err == nil && v != wireVersion {
		return nil, &decodeError{"version", errVersion}
	}
	m := &Message{Type: Type(r.u8("type"))}
	if r.err == nil && (m.Type < 1 || m.Type >= TypeEnd) {
		return nil, &decodeError{"type", errUnknown}
	}
	flags := r.u8("flags")
	if flags&^flagResponse != 0 {
		r.fail("flags", errBadField)
	}
	m.Response = flags&flagResponse != 0
	m.ReqID = r.u64("request id")
	m.Timestamp = int64(r.u64("timestamp"))
	if r.err == nil && m.Timestamp <= 0 {
		r.fail("timestamp", errBadField)
	}
	m.Recipient = r.id("recipient")
	m.Sender = r.contact("sender")
	nc := int(r.u8("cluster count"))
	if nc > MaxLevels {
		r.fail("cluster count", errBadField)
	}
	for i := 0; i < nc && r.err == nil; i++ {
		lvl := int(r.u8("cluster level"))
		ci := ClusterInfo{Level: lvl, ID: r.id("cluster id")}
		ls := r.u8("cluster size")
		ci.LogSize = float64(ls) / 8
		created := int64(r.u64("cluster created"))
		if created < 0 || created > 1<<40 {
			r.fail("cluster created", errBadField)
		}
		ci.Created = time.Unix(created, 0)
		if lvl >= MaxLevels || (i > 0 && lvl <= m.Clusters[i-1].Level) || (lvl == 0) != ci.ID.IsZero() {
			r.fail("cluster level", errBadField)
		}
		m.Clusters = append(m.Clusters, ci)
	}
	if r.err != nil {
		return nil, r.err
	}
	if m.Response {
		decodeResponseBody(r, m)
	} else {
		decodeRequestBody(r, m)
	}
	// Bytes after the body are the extension area (ext.go; PROTOCOL.md,
	// Versions and Extensions).
	r.ext(m, len(b))
	if r.err != nil {
		return nil, r.err
	}
	return m, nil
}

func (r *reader) level() uint8 {
	l := r.u8("level")
	if l >= MaxLevels {
		r.fail("level", errBadField)
	}
	return l
}

func (r *reader) reqFlags() uint8 {
	f := r.u8("request flags")
	if f&^FlagWantValues != 0 {
		r.fail("request flags", errBadField)
	}
	return f
}

func decodeRequestBody(r *reader, m *Message) {
	switch m.Type {
	case Ping:
	case FindNode, Members:
		m.Level = r.level()
		m.Target = r.id("target")
	case Get:
		m.Level = r.level()
		m.Key = r.id("key")
		m.Target = r.id("target")
	case PutProbe:
		m.Level = r.level()
		m.Flags = r.reqFlags()
		m.Key = r.id("key")
		m.Target = r.id("target")
		m.TTL = r.u32("ttl")
	case Store:
		m.Level = r.level()
		m.Flags = r.reqFlags()
		m.Key = r.id("key")
		m.TTL = r.u32("ttl")
		n := int(r.u16("value length"))
		if n == 0 || n > MaxValueSizeLimit {
			r.fail("value length", errBadField)
			return
		}
		m.Value = append([]byte(nil), r.take(n, "value")...)
	case App:
		m.Kind = r.u8("kind")
		if r.err == nil && m.Kind == 0 {
			r.fail("kind", errBadField)
		}
		m.Payload = r.payload()
	}
}

// payload reads an app payload: length (2), then the bytes.
func (r *reader) payload() []byte {
	n := int(r.u16("payload length"))
	if r.err == nil && n > MaxAppPayload {
		r.fail("payload length", errBadField)
		return nil
	}
	p := r.take(n, "payload")
	if n == 0 {
		return nil
	}
	return append([]byte(nil), p...)
}

func (r *reader) status() uint8 {
	s := r.u8("status")
	if s >= StatusEnd {
		r.fail("status", errBadField)
	}
	return s
}

func (r *reader) values() []Value {
	n := int(r.u8("value count"))
	var vs []Value
	for i := 0; i < n && r.err == nil; i++ {
		v := Value{TTL: r.u32("value ttl")}
		ln := int(r.u16("value length"))
		if ln == 0 || ln > MaxValueSizeLimit {
			r.fail("value length", errBadField)
			return nil
		}
		v.Data = append([]byte(nil), r.take(ln, "value")...)
		vs = append(vs, v)
	}
	return vs
}

func (r *reader) contacts() []Contact {
	n := int(r.u8("contact count"))
	if n > MaxContacts {
		r.fail("contact count", errBadField)
		return nil
	}
	var cs []Contact
	for i := 0; i < n && r.err == nil; i++ {
		cs = append(cs, r.contact("contact"))
	}
	return cs
}

func decodeResponseBody(r *reader, m *Message) {
	switch m.Type {
	case Ping:
	case FindNode, Members:
		m.Status = r.status()
		m.Nodes = r.contacts()
	case Get:
		m.Status = r.status()
		m.Values = r.values()
		m.Nodes = r.contacts()
	case PutProbe:
		m.Status = r.status()
		m.Loaded = r.boolean("loaded")
		m.Count = r.u8("count")
		m.MinRemaining = r.u32("min remaining")
		m.Values = r.values()
		m.Nodes = r.contacts()
	case Store:
		m.Status = r.status()
		m.Result = r.u8("result")
		if m.Result >= StoreResultEnd {
			r.fail("result", errBadField)
		}
		m.Count = r.u8("count")
		m.Values = r.values()
	case App:
		m.AppResult = r.u8("result")
		if m.AppResult >= AppResultEnd {
			r.fail("result", errBadField)
		}
		m.Payload = r.payload()
	}
}
