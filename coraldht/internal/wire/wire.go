// Package wire is the Coral DHT wire format, specified in
// coraldht/PROTOCOL.md. It is its only implementation: everything that
// crosses the network is built and checked here. Authentication (the tag
// that ends every datagram) is the node's business; the codec only leaves
// room for it.
package wire

import (
	"fmt"
	"time"
)

const (
	// MaxDatagram is the largest datagram a node sends or accepts. It stays
	// under the IPv6 minimum MTU so no datagram is ever fragmented.
	MaxDatagram = 1200

	// TagLen is the length of the authentication tag that ends every
	// datagram (a truncated HMAC-SHA256, 128 bits: ample against forgery
	// for datagrams that live seconds). The codec leaves room for it.
	TagLen = 16

	// MaxLevels is the largest number of cluster levels (level 0 included)
	// a header carries.
	MaxLevels = 8

	wireMagic0, wireMagic1 = 0xC0, 0x2A
	wireVersion            = 1

	flagResponse = 0x01

	// request flags (body)
	FlagWantValues = 0x01
)

// Type numbers are append-only: a number, once used, keeps its meaning.
type Type uint8

const (
	Ping     Type = 1 // liveness; empty body
	FindNode Type = 2 // contacts near a target
	Get      Type = 3 // values for a key, else contacts near a target
	PutProbe Type = 4 // forward phase of a put: load and fullness, contacts
	Store    Type = 5 // reverse phase of a put: store one value
	Members  Type = 6 // members of the responder's cluster at a level, asked by any node
	App      Type = 7 // an application's message: a kind and opaque bytes (HandleApp, CallApp)
	TypeEnd  Type = 8 // first unused number; a new type takes it and this moves up
)

var typeNames = [...]string{Ping: "ping", FindNode: "find_node", Get: "get", PutProbe: "put_probe", Store: "store", Members: "members", App: "app"}

func (t Type) String() string {
	if t >= 1 && t < TypeEnd {
		return typeNames[t]
	}
	return fmt.Sprintf("type%d", uint8(t))
}

// Reply status codes.
const (
	StatusOK        uint8 = 0 // served
	StatusNotMember uint8 = 1 // responder is not in the sender's cluster at that level
	StatusBadLevel  uint8 = 2 // responder has no such level
	StatusInvalid   uint8 = 3 // request out of bounds (TTL, value size)
	StatusEnd             = 4
)

// Store results.
const (
	StoreStored    uint8 = 0 // value added
	StoreRefreshed uint8 = 1 // value was there; expiry extended if the new TTL is longer
	StoreFull      uint8 = 2 // node is full for the key relative to this value
	StoreExhausted uint8 = 3 // node's memory bound reached and nothing could be evicted
	StoreResultEnd       = 4
)

// App results: what became of an app request (the reply's result field).
const (
	AppOK        uint8 = 0 // the handler answered; the payload is its reply
	AppUnknown   uint8 = 1 // no handler for the kind at the responder
	AppBusy      uint8 = 2 // too many app requests running at the responder; try later
	AppFailed    uint8 = 3 // the handler failed; the payload is its error text
	AppResultEnd       = 4
)

const (
	addrLenMax       = 1 + 16 + 2
	contactLenMax    = IDLen + addrLenMax + 4
	clusterEntryLen  = 1 + IDLen + 1 + 8
	headerFixedLen   = 2 + 1 + 1 + 1 + 8 + 8 + IDLen + IDLen
	headerMaxLen     = headerFixedLen + addrLenMax + 4 + 1 + MaxLevels*clusterEntryLen
	bodyBudget       = MaxDatagram - TagLen - headerMaxLen
	storeBodyFixed   = 1 + 1 + IDLen + 4 + 2
	valueEntryHeader = 4 + 2

	// MaxValueSizeLimit is the largest value the wire format can carry in a
	// store request with a full header.
	MaxValueSizeLimit = 512

	MaxContacts = 16
	MaxTTL      = time.Duration(1<<32-1) * time.Millisecond

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
	case 1+1+1+4+1+MaxContacts*contactLenMax > bodyBudget:
		panic("coraldht: a put_probe reply with a full contact list does not fit a datagram")
	case appBodyFixed+MaxAppPayload > bodyBudget:
		panic("coraldht: an app message with the largest payload does not fit a datagram")
	}
}

// Value is a stored value as it travels: bytes and remaining lifetime.
type Value struct {
	TTL  uint32 // milliseconds left
	Data []byte
}

// Message is one decoded datagram (without its authentication tag). Which
// body fields are meaningful depends on Type and Response; the codec ignores
// the rest.
type Message struct {
	Type      Type
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
	Values       []Value
	Nodes        []Contact

	// app messages (both directions): the request's kind, the reply's
	// result (app*), and the payload (0..MaxAppPayload bytes, opaque here)
	Kind      uint8
	AppResult uint8
	Payload   []byte

	// The extension area after the body (ext.go; PROTOCOL.md,
	// Extensions), which only senders that advertise CapExtensions use.
	// Ext says it is present; with Ext false the other fields are not
	// encoded.
	Ext       bool
	Grant     uint64 // address cookie the sender grants the recipient (0: none)
	Echo      uint64 // requests: the cookie the recipient granted the sender (0: none)
	Truncated bool   // replies: lists and clusters left out; resend with Echo
	Pad       int    // zero bytes that make a request as large as its reply may be
	Unknown   []byte // extensions of a later revision, kept as they came
	Load      Load   // the sender's load (load entry), if it publishes one
	Identity  []byte // node identity mode: the sender's certificate
	Signature []byte // over the datagram up to itself (SignatureLen bytes)
	// SignedLen (decoded) is how many leading bytes of the datagram the
	// signature covers: everything before it.
	SignedLen int
}

// wireError is why a datagram does not decode (or a message does not
// encode); decodeError wraps it with the field.
type wireError string

func (e wireError) Error() string { return string(e) }

const (
	errShort      wireError = "truncated"
	errMagic      wireError = "not a Coral datagram"
	errVersion    wireError = "unsupported protocol version"
	errUnknown    wireError = "unknown message type"
	errBadField   wireError = "field out of range"
	errIDMismatch wireError = "node ID is not SHA-1 of its address"
	errTooLong    wireError = "longer than a datagram"
	errExtension  wireError = "extension out of order, repeated or malformed"
)
