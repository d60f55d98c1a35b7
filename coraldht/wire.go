package coraldht

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// The wire format is specified in PROTOCOL.md. This file is its only
// implementation: everything that crosses the network is built and checked
// here.

const (
	// MaxDatagram is the largest datagram a node sends or accepts. It stays
	// under the IPv6 minimum MTU so no datagram is ever fragmented.
	MaxDatagram = 1200

	wireMagic0, wireMagic1 = 0xC0, 0x2A
	wireVersion            = 1

	flagResponse = 0x01

	// request flags (body)
	reqFlagWantValues = 0x01
)

// msgType numbers are append-only: a number, once used, keeps its meaning.
type msgType uint8

const (
	msgPing     msgType = 1 // liveness; empty body
	msgFindNode msgType = 2 // contacts near a target
	msgGet      msgType = 3 // values for a key, else contacts near a target
	msgPutProbe msgType = 4 // forward phase of a put: load and fullness, contacts
	msgStore    msgType = 5 // reverse phase of a put: store one value
	msgMembers  msgType = 6 // members of the responder's cluster at a level, asked by any node
	msgApp      msgType = 7 // an application's message: a kind and opaque bytes (HandleApp, CallApp)
	msgTypeEnd  msgType = 8 // first unused number; a new type takes it and this moves up
)

var msgTypeNames = [...]string{msgPing: "ping", msgFindNode: "find_node", msgGet: "get", msgPutProbe: "put_probe", msgStore: "store", msgMembers: "members", msgApp: "app"}

func (t msgType) String() string {
	if t >= 1 && t < msgTypeEnd {
		return msgTypeNames[t]
	}
	return fmt.Sprintf("type%d", uint8(t))
}

// Reply status codes.
const (
	statusOK        uint8 = 0 // served
	statusNotMember uint8 = 1 // responder is not in the sender's cluster at that level
	statusBadLevel  uint8 = 2 // responder has no such level
	statusInvalid   uint8 = 3 // request out of bounds (TTL, value size)
	statusEnd             = 4
)

// Store results.
const (
	storeStored    uint8 = 0 // value added
	storeRefreshed uint8 = 1 // value was there; expiry extended if the new TTL is longer
	storeFull      uint8 = 2 // node is full for the key relative to this value
	storeExhausted uint8 = 3 // node's memory bound reached and nothing could be evicted
	storeResultEnd       = 4
)

// App results: what became of an app request (the reply's result field).
const (
	appOK        uint8 = 0 // the handler answered; the payload is its reply
	appUnknown   uint8 = 1 // no handler for the kind at the responder
	appBusy      uint8 = 2 // too many app requests running at the responder; try later
	appFailed    uint8 = 3 // the handler failed; the payload is its error text
	appResultEnd       = 4
)

const (
	addrLenMax       = 1 + 16 + 2
	contactLenMax    = IDLen + addrLenMax + 4
	clusterEntryLen  = 1 + IDLen + 1 + 8
	headerFixedLen   = 2 + 1 + 1 + 1 + 8 + 8 + IDLen + IDLen
	headerMaxLen     = headerFixedLen + addrLenMax + 4 + 1 + MaxLevels*clusterEntryLen
	bodyBudget       = MaxDatagram - tagLen - headerMaxLen
	storeBodyFixed   = 1 + 1 + IDLen + 4 + 2
	valueEntryHeader = 4 + 2

	// MaxValueSizeLimit is the largest value the wire format can carry in a
	// store request with a full header.
	MaxValueSizeLimit = 512

	maxContactsPerReply = 16
	maxWireTTL          = time.Duration(1<<32-1) * time.Millisecond

	// MaxAppPayload is the largest payload an app request or reply
	// carries (CallApp, HandleApp): what fits a datagram under a full
	// header, rounded down.
	MaxAppPayload = 768
	appBodyFixed  = 1 + 2 // kind or result, payload length
)

func init() {
	// The limits above must leave room, under a full header, for a store
	// request carrying the largest value, a get reply carrying it, and a
	// put_probe reply carrying a bucket and the closing hints.
	switch {
	case storeBodyFixed+MaxValueSizeLimit > bodyBudget:
		panic("coraldht: a store request with the largest value does not fit a datagram")
	case 1+1+valueEntryHeader+MaxValueSizeLimit+1 > bodyBudget:
		panic("coraldht: a get reply with the largest value does not fit a datagram")
	case 1+1+1+4+1+maxContactsPerReply*contactLenMax > bodyBudget:
		panic("coraldht: a put_probe reply with a full contact list does not fit a datagram")
	case appBodyFixed+MaxAppPayload > bodyBudget:
		panic("coraldht: an app message with the largest payload does not fit a datagram")
	}
}

// ClusterInfo describes one cluster a node belongs to, as carried in every
// RPC header.
type ClusterInfo struct {
	Level   int       // 0..MaxLevels-1
	ID      ID        // all zeros at level 0
	LogSize float64   // estimated log2 of the member count, in steps of 1/8
	Created time.Time // creation time, whole seconds
}

// Contact identifies a node: its ID, the address it advertises and the
// services it runs.
type Contact struct {
	ID       ID
	Addr     netip.AddrPort
	Services Services
}

func (c Contact) String() string { return c.ID.Short() + "@" + c.Addr.String() }

// wireValue is a stored value as it travels: bytes and remaining lifetime.
type wireValue struct {
	TTL  uint32 // milliseconds left
	Data []byte
}

// message is one decoded datagram (without its authentication tag). Which
// body fields are meaningful depends on Type and Response; the codec ignores
// the rest.
type message struct {
	Type      msgType
	Response  bool
	ReqID     uint64
	Timestamp int64 // sender's clock, Unix nanoseconds; unique per sender
	// Recipient is the node ID the datagram is addressed to. It is under
	// the tag, so a datagram captured on its way to one node cannot be
	// replayed to another.
	Recipient ID

	Sender   Contact
	Clusters []ClusterInfo

	// requests
	Level  uint8
	Flags  uint8 // reqFlag*
	Key    ID
	Target ID
	TTL    uint32 // milliseconds
	Value  []byte

	// responses
	Status       uint8
	Loaded       bool
	Count        uint8
	MinRemaining uint32 // milliseconds
	Result       uint8
	Values       []wireValue
	Nodes        []Contact

	// app messages (both directions): the request's kind, the reply's
	// result (app*), and the payload (0..MaxAppPayload bytes, opaque here)
	Kind      uint8
	AppResult uint8
	Payload   []byte
}

var (
	errShort      = errors.New("truncated")
	errTrailing   = errors.New("trailing bytes")
	errMagic      = errors.New("not a Coral datagram")
	errVersion    = errors.New("unsupported protocol version")
	errUnknown    = errors.New("unknown message type")
	errBadField   = errors.New("field out of range")
	errIDMismatch = errors.New("node ID is not SHA-1 of its address")
	errTooLong    = errors.New("longer than a datagram")
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
	if r.err == nil && checkContactAddr(ap) != nil {
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

// decodeMessage parses a datagram body (the bytes before the tag). It accepts
// exactly the encodings encodeMessage produces, so decode→encode reproduces
// the input byte for byte.
func decodeMessage(b []byte) (*message, error) {
	if len(b) > MaxDatagram-tagLen {
		// encodeMessage never produces more; accepting it would let a list
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
	m := &message{Type: msgType(r.u8("type"))}
	if r.err == nil && (m.Type < 1 || m.Type >= msgTypeEnd) {
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
	if r.err == nil && len(r.b) != 0 {
		r.fail("body", errTrailing)
	}
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
	if f&^reqFlagWantValues != 0 {
		r.fail("request flags", errBadField)
	}
	return f
}

func decodeRequestBody(r *reader, m *message) {
	switch m.Type {
	case msgPing:
	case msgFindNode, msgMembers:
		m.Level = r.level()
		m.Target = r.id("target")
	case msgGet:
		m.Level = r.level()
		m.Key = r.id("key")
		m.Target = r.id("target")
	case msgPutProbe:
		m.Level = r.level()
		m.Flags = r.reqFlags()
		m.Key = r.id("key")
		m.Target = r.id("target")
		m.TTL = r.u32("ttl")
	case msgStore:
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
	case msgApp:
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
	if s >= statusEnd {
		r.fail("status", errBadField)
	}
	return s
}

func (r *reader) values() []wireValue {
	n := int(r.u8("value count"))
	var vs []wireValue
	for i := 0; i < n && r.err == nil; i++ {
		v := wireValue{TTL: r.u32("value ttl")}
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
	if n > maxContactsPerReply {
		r.fail("contact count", errBadField)
		return nil
	}
	var cs []Contact
	for i := 0; i < n && r.err == nil; i++ {
		cs = append(cs, r.contact("contact"))
	}
	return cs
}

func decodeResponseBody(r *reader, m *message) {
	switch m.Type {
	case msgPing:
	case msgFindNode, msgMembers:
		m.Status = r.status()
		m.Nodes = r.contacts()
	case msgGet:
		m.Status = r.status()
		m.Values = r.values()
		m.Nodes = r.contacts()
	case msgPutProbe:
		m.Status = r.status()
		m.Loaded = r.boolean("loaded")
		m.Count = r.u8("count")
		m.MinRemaining = r.u32("min remaining")
		m.Values = r.values()
		m.Nodes = r.contacts()
	case msgStore:
		m.Status = r.status()
		m.Result = r.u8("result")
		if m.Result >= storeResultEnd {
			r.fail("result", errBadField)
		}
		m.Count = r.u8("count")
		m.Values = r.values()
	case msgApp:
		m.AppResult = r.u8("result")
		if m.AppResult >= appResultEnd {
			r.fail("result", errBadField)
		}
		m.Payload = r.payload()
	}
}

// writer appends to a buffer that never grows past limit bytes.
type writer struct {
	b     []byte
	limit int
}

func (w *writer) u8(v uint8)   { w.b = append(w.b, v) }
func (w *writer) u16(v uint16) { w.b = binary.BigEndian.AppendUint16(w.b, v) }
func (w *writer) u32(v uint32) { w.b = binary.BigEndian.AppendUint32(w.b, v) }
func (w *writer) u64(v uint64) { w.b = binary.BigEndian.AppendUint64(w.b, v) }
func (w *writer) id(v ID)      { w.b = append(w.b, v[:]...) }
func (w *writer) boolean(v bool) {
	if v {
		w.u8(1)
	} else {
		w.u8(0)
	}
}

func addrLen(a netip.AddrPort) int {
	if a.Addr().Is4() {
		return 1 + 4 + 2
	}
	return 1 + 16 + 2
}

func (w *writer) addr(a netip.AddrPort) {
	ip := a.Addr()
	if ip.Is4() {
		w.u8(4)
		b := ip.As4()
		w.b = append(w.b, b[:]...)
	} else {
		w.u8(6)
		b := ip.As16()
		w.b = append(w.b, b[:]...)
	}
	w.u16(a.Port())
}

func (w *writer) contact(c Contact) {
	w.id(c.ID)
	w.addr(c.Addr)
	w.u32(uint32(c.Services))
}

func (w *writer) room() int { return w.limit - len(w.b) }

// values writes as many values as fit, leaving reserve bytes free; it returns
// how many it wrote.
func (w *writer) values(vs []wireValue, reserve int) int {
	at := len(w.b)
	w.u8(0)
	n := 0
	for _, v := range vs {
		if n == 255 || w.room()-reserve < valueEntryHeader+len(v.Data) {
			break
		}
		w.u32(v.TTL)
		w.u16(uint16(len(v.Data)))
		w.b = append(w.b, v.Data...)
		n++
	}
	w.b[at] = uint8(n)
	return n
}

func (w *writer) contacts(cs []Contact) int {
	at := len(w.b)
	w.u8(0)
	n := 0
	for _, c := range cs {
		if n == maxContactsPerReply || w.room() < IDLen+addrLen(c.Addr)+4 {
			break
		}
		w.contact(c)
		n++
	}
	w.b[at] = uint8(n)
	return n
}

// encodeMessage appends m's encoding to dst. Lists of values and contacts are
// cut to what fits in a datagram with its tag; a message that does not fit
// even so is an error. Field ranges are not re-checked here: the node builds
// messages only from validated arguments and decoded input, and
// decodeMessage enforces every range on the way in.
func encodeMessage(dst []byte, m *message) ([]byte, error) {
	if m.Type < 1 || m.Type >= msgTypeEnd {
		return nil, fmt.Errorf("coraldht: encode: %w", errUnknown)
	}
	if len(m.Clusters) > MaxLevels {
		return nil, fmt.Errorf("coraldht: encode: %d clusters", len(m.Clusters))
	}
	if err := checkContactAddr(m.Sender.Addr); err != nil {
		return nil, fmt.Errorf("coraldht: encode sender: %v", err)
	}
	start := len(dst)
	w := &writer{b: dst, limit: start + MaxDatagram - tagLen}
	w.u8(wireMagic0)
	w.u8(wireMagic1)
	w.u8(wireVersion)
	w.u8(uint8(m.Type))
	if m.Response {
		w.u8(flagResponse)
	} else {
		w.u8(0)
	}
	w.u64(m.ReqID)
	w.u64(uint64(m.Timestamp))
	w.id(m.Recipient)
	w.contact(m.Sender)
	w.u8(uint8(len(m.Clusters)))
	for _, c := range m.Clusters {
		w.u8(uint8(c.Level))
		w.id(c.ID)
		ls := c.LogSize * 8
		switch {
		case ls < 0:
			ls = 0
		case ls > 255:
			ls = 255
		}
		w.u8(uint8(ls + 0.5))
		w.u64(uint64(max(c.Created.Unix(), 0)))
	}
	if m.Response {
		switch m.Type {
		case msgPing:
		case msgFindNode, msgMembers:
			w.u8(m.Status)
			w.contacts(m.Nodes)
		case msgGet:
			w.u8(m.Status)
			// Values first, keeping room for at least a few contacts' count byte.
			w.values(m.Values, 1)
			w.contacts(m.Nodes)
		case msgPutProbe:
			w.u8(m.Status)
			w.boolean(m.Loaded)
			w.u8(m.Count)
			w.u32(m.MinRemaining)
			// Contacts matter more than values here: a probe's values are only
			// a shortcut for put+get. Reserve room for the contacts.
			reserve := 1
			for i, c := range m.Nodes {
				if i == maxContactsPerReply {
					break
				}
				reserve += IDLen + addrLen(c.Addr) + 4
			}
			w.values(m.Values, reserve)
			w.contacts(m.Nodes)
		case msgStore:
			w.u8(m.Status)
			w.u8(m.Result)
			w.u8(m.Count)
			w.values(m.Values, 0)
		case msgApp:
			if len(m.Payload) > MaxAppPayload {
				return nil, fmt.Errorf("coraldht: encode: app payload of %d bytes", len(m.Payload))
			}
			w.u8(m.AppResult)
			w.u16(uint16(len(m.Payload)))
			w.b = append(w.b, m.Payload...)
		}
	} else {
		switch m.Type {
		case msgPing:
		case msgFindNode, msgMembers:
			w.u8(m.Level)
			w.id(m.Target)
		case msgGet:
			w.u8(m.Level)
			w.id(m.Key)
			w.id(m.Target)
		case msgPutProbe:
			w.u8(m.Level)
			w.u8(m.Flags)
			w.id(m.Key)
			w.id(m.Target)
			w.u32(m.TTL)
		case msgStore:
			if len(m.Value) == 0 || len(m.Value) > MaxValueSizeLimit {
				return nil, fmt.Errorf("coraldht: encode: value of %d bytes", len(m.Value))
			}
			w.u8(m.Level)
			w.u8(m.Flags)
			w.id(m.Key)
			w.u32(m.TTL)
			w.u16(uint16(len(m.Value)))
			w.b = append(w.b, m.Value...)
		case msgApp:
			if len(m.Payload) > MaxAppPayload {
				return nil, fmt.Errorf("coraldht: encode: app payload of %d bytes", len(m.Payload))
			}
			w.u8(m.Kind)
			w.u16(uint16(len(m.Payload)))
			w.b = append(w.b, m.Payload...)
		}
	}
	if len(w.b)-start > MaxDatagram-tagLen {
		return nil, fmt.Errorf("coraldht: encode: %d bytes exceed the datagram limit", len(w.b)-start)
	}
	return w.b, nil
}
