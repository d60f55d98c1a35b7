package purge

import (
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coralname"
)

// The purge message between proxies (a coraldht app message of kind Kind;
// its payload is opaque to coraldht):
//
//	request  byte 0  version (1)
//	         byte 1  mode: 0 exact, 1 prefix
//	         exact:  20 bytes, the cache key (binary SHA-1)
//	         prefix: the normalized prefix, "//host[:port]/…", 4..766 bytes
//	reply    byte 0  version (1)
//	         byte 1  status: 0 purged, 1 request refused (malformed),
//	                 2 no coral_proxy cache runs there
//	         bytes 2-21  purged, variants, downloads aborted, downloads
//	                 pending, objects scanned: five uint32, big-endian
//	         byte 22     bit 0: complete
//	         bytes 23-   for status 1: why (text)
const (
	wireVersion = 1
	modeExact   = 0
	modePrefix  = 1

	StatusOK      = 0
	StatusRefused = 1
	StatusNoCache = 2
	statusEnd     = 3

	ReplyFixed = 2 + 5*4 + 1
)

// ErrBadMessage is the cause of every malformed purge message.
var ErrBadMessage = errors.New("coral purge: malformed purge message")

// EncodeRequest is the payload asking a peer to purge spec.
func EncodeRequest(spec Spec) ([]byte, error) {
	if spec.Prefix {
		if !coralname.IsNormalizedPrefix(spec.Norm) {
			return nil, fmt.Errorf("%w: prefix %q", ErrBadMessage, spec.Norm)
		}
		if 2+len(spec.Norm) > coraldht.MaxAppPayload {
			return nil, fmt.Errorf("coral purge: a prefix of %d bytes is too long to send to other proxies (at most %d)", len(spec.Norm), coraldht.MaxAppPayload-2)
		}
		return append([]byte{wireVersion, modePrefix}, spec.Norm...), nil
	}
	k, err := hex.DecodeString(spec.Key)
	if err != nil || len(k) != sha1.Size {
		return nil, fmt.Errorf("%w: key %q", ErrBadMessage, spec.Key)
	}
	return append([]byte{wireVersion, modeExact}, k...), nil
}

// DecodeRequest parses a peer's purge request. It comes from a member of
// the network, authenticated, but is checked like any input: an exact key
// is 20 bytes; a prefix must name a host ("//host/…"), so that no message
// can empty a cache whole.
func DecodeRequest(b []byte) (Spec, error) {
	if len(b) < 2 || b[0] != wireVersion {
		return Spec{}, fmt.Errorf("%w: %d bytes, version %d", ErrBadMessage, len(b), firstByte(b))
	}
	switch b[1] {
	case modeExact:
		if len(b) != 2+sha1.Size {
			return Spec{}, fmt.Errorf("%w: key of %d bytes", ErrBadMessage, len(b)-2)
		}
		return Spec{Key: hex.EncodeToString(b[2:])}, nil
	case modePrefix:
		p := string(b[2:])
		if !coralname.IsNormalizedPrefix(p) {
			return Spec{}, fmt.Errorf("%w: prefix %s", ErrBadMessage, quote(p))
		}
		return Spec{Prefix: true, Norm: p}, nil
	}
	return Spec{}, fmt.Errorf("%w: mode %d", ErrBadMessage, b[1])
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

// Reply is a peer's answer.
type Reply struct {
	Status                                      uint8
	Purged, Variants, Aborted, Pending, Scanned uint32
	Complete                                    bool
	Detail                                      string
}

// EncodeReply is r as a reply payload, its detail cut to what fits.
func EncodeReply(r Reply) []byte {
	b := make([]byte, ReplyFixed, ReplyFixed+len(r.Detail))
	b[0], b[1] = wireVersion, r.Status
	for i, v := range []uint32{r.Purged, r.Variants, r.Aborted, r.Pending, r.Scanned} {
		binary.BigEndian.PutUint32(b[2+4*i:], v)
	}
	if r.Complete {
		b[ReplyFixed-1] = 1
	}
	detail := r.Detail
	if max := coraldht.MaxAppPayload - ReplyFixed; len(detail) > max {
		detail = detail[:max]
	}
	return append(b, detail...)
}

// DecodeReply parses a peer's reply.
func DecodeReply(b []byte) (Reply, error) {
	if len(b) < ReplyFixed || b[0] != wireVersion || b[1] >= statusEnd || b[ReplyFixed-1]&^1 != 0 {
		return Reply{}, fmt.Errorf("%w: reply of %d bytes", ErrBadMessage, len(b))
	}
	r := Reply{Status: b[1], Complete: b[ReplyFixed-1] == 1, Detail: string(b[ReplyFixed:])}
	for i, p := range []*uint32{&r.Purged, &r.Variants, &r.Aborted, &r.Pending, &r.Scanned} {
		*p = binary.BigEndian.Uint32(b[2+4*i:])
	}
	return r, nil
}

func clampU32(n int) uint32 { return uint32(min(max(n, 0), 1<<32-1)) }
