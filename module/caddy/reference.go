package coralcaddy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
)

// A reference is what a proxy stores in the DSHT under an object's key:
// "this proxy has (or is fetching) the object; ask it". It is the whole
// value, so it is small and versioned.
//
//	byte 0     version (1)
//	byte 1     flags: bit 0 complete (set in the long-lived reference put
//	           after the download finished; clear in the 20 s one put while
//	           it runs), bit 1 negative (the object is a cached error such
//	           as 404: peers serve it as such)
//	bytes 2-3  HTTP port, big-endian
//	bytes 4-   IPv4 (4 bytes) or IPv6 (16 bytes)
type reference struct {
	Addr     netip.AddrPort // the proxy's HTTP address
	Complete bool
	Negative bool
}

const (
	referenceVersion = 1
	refComplete      = 1 << 0
	refNegative      = 1 << 1
	refKnownFlags    = refComplete | refNegative
)

var errBadReference = errors.New("coral_proxy: malformed DSHT reference")

// encode returns the wire form of r.
func (r reference) encode() []byte {
	ip := r.Addr.Addr().Unmap()
	b := make([]byte, 4, 4+16)
	b[0] = referenceVersion
	if r.Complete {
		b[1] |= refComplete
	}
	if r.Negative {
		b[1] |= refNegative
	}
	binary.BigEndian.PutUint16(b[2:], r.Addr.Port())
	return append(b, ip.AsSlice()...)
}

// decodeReference parses a value found in the DSHT. Values come from other
// nodes of the network, so anything odd is refused rather than trusted:
// unknown versions and flags, port 0, unspecified, multicast or broadcast
// addresses.
func decodeReference(b []byte) (reference, error) {
	if len(b) != 8 && len(b) != 20 {
		return reference{}, fmt.Errorf("%w: %d bytes", errBadReference, len(b))
	}
	if b[0] != referenceVersion {
		return reference{}, fmt.Errorf("%w: version %d", errBadReference, b[0])
	}
	if b[1]&^refKnownFlags != 0 {
		return reference{}, fmt.Errorf("%w: flags %#x", errBadReference, b[1])
	}
	port := binary.BigEndian.Uint16(b[2:])
	ip, _ := netip.AddrFromSlice(b[4:])
	ip = ip.Unmap()
	if port == 0 || ip.IsUnspecified() || ip.IsMulticast() || ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return reference{}, fmt.Errorf("%w: address %v port %d", errBadReference, ip, port)
	}
	return reference{Addr: netip.AddrPortFrom(ip, port), Complete: b[1]&refComplete != 0, Negative: b[1]&refNegative != 0}, nil
}
