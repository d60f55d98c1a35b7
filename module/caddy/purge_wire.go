package coralcaddy

import (
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coralname"
)

// The purge message between proxies (a coraldht app message of kind
// purgeKind; its payload is opaque to coraldht):
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
	purgeWireVersion = 1
	purgeModeExact   = 0
	purgeModePrefix  = 1

	purgeStatusOK      = 0
	purgeStatusRefused = 1
	purgeStatusNoCache = 2
	purgeStatusEnd     = 3

	purgeReplyFixed = 2 + 5*4 + 1
)

var errBadPurge = errors.New("coral purge: malformed purge message")

// encodePurgeRequest is the payload asking a peer to purge spec.
func encodePurgeRequest(spec purgeSpec) ([]byte, error) {
	if spec.prefix {
		if !coralname.IsNormalizedPrefix(spec.norm) {
			return nil, fmt.Errorf("%w: prefix %q", errBadPurge, spec.norm)
		}
		if 2+len(spec.norm) > coraldht.MaxAppPayload {
			return nil, fmt.Errorf("coral purge: a prefix of %d bytes is too long to send to other proxies (at most %d)", len(spec.norm), coraldht.MaxAppPayload-2)
		}
		return append([]byte{purgeWireVersion, purgeModePrefix}, spec.norm...), nil
	}
	k, err := hex.DecodeString(spec.key)
	if err != nil || len(k) != sha1.Size {
		return nil, fmt.Errorf("%w: key %q", errBadPurge, spec.key)
	}
	return append([]byte{purgeWireVersion, purgeModeExact}, k...), nil
}

// decodePurgeRequest parses a peer's purge request. It comes from a member
// of the network, authenticated, but is checked like any input: an exact
// key is 20 bytes; a prefix must name a host ("//host/…"), so that no
// message can empty a cache whole.
func decodePurgeRequest(b []byte) (purgeSpec, error) {
	if len(b) < 2 || b[0] != purgeWireVersion {
		return purgeSpec{}, fmt.Errorf("%w: %d bytes, version %d", errBadPurge, len(b), firstByte(b))
	}
	switch b[1] {
	case purgeModeExact:
		if len(b) != 2+sha1.Size {
			return purgeSpec{}, fmt.Errorf("%w: key of %d bytes", errBadPurge, len(b)-2)
		}
		return purgeSpec{key: hex.EncodeToString(b[2:])}, nil
	case purgeModePrefix:
		p := string(b[2:])
		if !coralname.IsNormalizedPrefix(p) {
			return purgeSpec{}, fmt.Errorf("%w: prefix %s", errBadPurge, quoteTarget(p))
		}
		return purgeSpec{prefix: true, norm: p}, nil
	}
	return purgeSpec{}, fmt.Errorf("%w: mode %d", errBadPurge, b[1])
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

// purgeReply is a peer's answer.
type purgeReply struct {
	status                                      uint8
	purged, variants, aborted, pending, scanned uint32
	complete                                    bool
	detail                                      string
}

func encodePurgeReply(r purgeReply) []byte {
	b := make([]byte, purgeReplyFixed, purgeReplyFixed+len(r.detail))
	b[0], b[1] = purgeWireVersion, r.status
	for i, v := range []uint32{r.purged, r.variants, r.aborted, r.pending, r.scanned} {
		binary.BigEndian.PutUint32(b[2+4*i:], v)
	}
	if r.complete {
		b[purgeReplyFixed-1] = 1
	}
	detail := r.detail
	if max := coraldht.MaxAppPayload - purgeReplyFixed; len(detail) > max {
		detail = detail[:max]
	}
	return append(b, detail...)
}

func decodePurgeReply(b []byte) (purgeReply, error) {
	if len(b) < purgeReplyFixed || b[0] != purgeWireVersion || b[1] >= purgeStatusEnd || b[purgeReplyFixed-1]&^1 != 0 {
		return purgeReply{}, fmt.Errorf("%w: reply of %d bytes", errBadPurge, len(b))
	}
	r := purgeReply{status: b[1], complete: b[purgeReplyFixed-1] == 1, detail: string(b[purgeReplyFixed:])}
	for i, p := range []*uint32{&r.purged, &r.variants, &r.aborted, &r.pending, &r.scanned} {
		*p = binary.BigEndian.Uint32(b[2+4*i:])
	}
	return r, nil
}

func clampU32(n int) uint32 { return uint32(min(max(n, 0), 1<<32-1)) }
