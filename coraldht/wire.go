package coraldht

import (
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
)
