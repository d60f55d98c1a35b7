package wire

import (
	"crypto/sha1"
	"encoding/hex"
	"net/netip"
)

// IDLen is the length of an ID in bytes; IDBits the same in bits.
const (
	IDLen  = 20
	IDBits = IDLen * 8
)

// ID is a 160-bit identifier. Node IDs and keys share the space; the distance
// between two IDs is their XOR read as an unsigned big-endian integer.
type ID [IDLen]byte

// NodeIDFor returns the ID of the node advertising addr: SHA-1 of the address
// written as "ip:port" ("[v6]:port" for IPv6). The port is part of the input
// so several nodes can share one host.
func NodeIDFor(addr netip.AddrPort) ID {
	return ID(sha1.Sum([]byte(addr.String())))
}

// String returns the ID as 40 hexadecimal digits.
func (id ID) String() string { return hex.EncodeToString(id[:]) }

// Short returns the first 8 hexadecimal digits, for logs and tables.
func (id ID) Short() string { return hex.EncodeToString(id[:4]) }

// IsZero reports whether id is all zeros (the level-0 cluster ID).
func (id ID) IsZero() bool { return id == ID{} }

// Xor returns id XOR o, the distance between them.
func (id ID) Xor(o ID) ID {
	var d ID
	for i := range d {
		d[i] = id[i] ^ o[i]
	}
	return d
}

// Cmp compares id and o as unsigned big-endian integers.
func (id ID) Cmp(o ID) int {
	for i := range id {
		if id[i] != o[i] {
			if id[i] < o[i] {
				return -1
			}
			return 1
		}
	}
	return 0
}

// Bit returns bit i of id, counting from the most significant bit (0).
func (id ID) Bit(i int) uint {
	return uint(id[i/8]>>(7-uint(i%8))) & 1
}
