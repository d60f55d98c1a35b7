package coraldht

import (
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"math/bits"
	"math/rand/v2"
	"net/netip"

	"github.com/coralcdn/coral/coraldht/internal/wire"
)

// IDLen is the length of an ID in bytes; IDBits the same in bits.
const (
	IDLen  = wire.IDLen
	IDBits = wire.IDBits
)

// ID is a 160-bit identifier. Node IDs and keys share the space; the distance
// between two IDs is their XOR read as an unsigned big-endian integer. It is
// defined with the wire format that carries it.
type ID = wire.ID

// NodeIDFor returns the ID of the node advertising addr: SHA-1 of the address
// written as "ip:port" ("[v6]:port" for IPv6). The port is part of the input
// so several nodes can share one host.
func NodeIDFor(addr netip.AddrPort) ID { return wire.NodeIDFor(addr) }

// KeyFor returns the key for s: SHA-1 of its bytes. Applications hash their
// own names (a normalized URL, a router prefix) with it.
func KeyFor(s string) ID { return ID(sha1.Sum([]byte(s))) }

// ParseID parses 40 hexadecimal digits.
func ParseID(s string) (ID, error) {
	var id ID
	if len(s) != 2*IDLen {
		return id, fmt.Errorf("coraldht: ID %q: want %d hex digits", s, 2*IDLen)
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return id, fmt.Errorf("coraldht: ID %q: %v", s, err)
	}
	return id, nil
}

// CompareDistance reports whether a is closer to target than b (-1), farther
// (+1) or at the same distance (0, only when a == b).
func CompareDistance(target, a, b ID) int {
	for i := range target {
		da, db := a[i]^target[i], b[i]^target[i]
		if da != db {
			if da < db {
				return -1
			}
			return 1
		}
	}
	return 0
}

// CommonPrefixLen returns the number of leading bits a and b share (IDBits
// when they are equal).
func CommonPrefixLen(a, b ID) int {
	for i := range a {
		if x := a[i] ^ b[i]; x != 0 {
			return i*8 + bits.LeadingZeros8(x)
		}
	}
	return IDBits
}

// Splice returns the top b·i bits of k followed by the remaining low bits of
// t: the paper's splice(k, t, i) for digits of b bits. b·i is capped at
// IDBits.
func Splice(k, t ID, i, b int) ID {
	n := b * i
	if n >= IDBits {
		return k
	}
	if n <= 0 {
		return t
	}
	var out ID
	full := n / 8
	copy(out[:full], k[:full])
	copy(out[full:], t[full:])
	if rem := n % 8; rem != 0 {
		mask := byte(0xff << (8 - uint(rem)))
		out[full] = k[full]&mask | t[full]&^mask
	}
	return out
}

// nextTarget advances an intermediate lookup target one b-bit digit toward
// k: splice(k, t, i) for the smallest i that changes t. It reports false when
// t already equals k.
func nextTarget(k, t ID, b int) (ID, bool) {
	p := CommonPrefixLen(k, t)
	if p == IDBits {
		return t, false
	}
	return Splice(k, t, p/b+1, b), true
}

// randomIDWithPrefix returns a random ID that shares exactly prefixLen leading
// bits with self (bit prefixLen flipped, the rest random): a target inside
// routing-table bucket prefixLen.
func randomIDWithPrefix(self ID, prefixLen int, rng *rand.Rand) ID {
	var r ID
	for i := range r {
		r[i] = byte(rng.Uint32())
	}
	if prefixLen >= IDBits {
		return self
	}
	out := Splice(self, r, prefixLen, 1)
	mask := byte(0x80 >> uint(prefixLen%8))
	if self.Bit(prefixLen) == 1 {
		out[prefixLen/8] &^= mask
	} else {
		out[prefixLen/8] |= mask
	}
	return out
}

// low64 is the ID's last 8 bytes: bits that say nothing about where the
// ID sits in the tree, for pseudo-random orders over nodes.
func low64(id ID) uint64 {
	return binary.BigEndian.Uint64(id[IDBits/8-8:])
}
