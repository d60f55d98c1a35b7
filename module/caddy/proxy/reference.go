package proxy

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// A reference is what a proxy stores in the DSHT under an object's key:
// "this proxy has (or is fetching) the object; ask it". It is the whole
// value, so it is small and versioned. Version 2 (put by this version)
// also names the proxy's DSHT node, so that a purge can reach it
// (package purge); version 1 (put by older versions, still read) does not.
//
// Version 1, 8 or 20 bytes:
//
//	byte 0     version (1)
//	byte 1     flags: bit 0 complete (set in the long-lived reference put
//	           after the download finished; clear in the 20 s one put while
//	           it runs), bit 1 negative (the object is a cached error such
//	           as 404: peers serve it as such)
//	bytes 2-3  HTTP port, big-endian
//	bytes 4-   IPv4 (4 bytes) or IPv6 (16 bytes)
//
// Version 2, 15, 27 or 39 bytes:
//
//	byte 0     version (2)
//	byte 1     flags, as in version 1
//	byte 2     address families: bit 0 the HTTP address is IPv6, bit 1 the
//	           DSHT address is IPv6 (clear: IPv4); other bits 0
//	bytes 3-4  HTTP port
//	bytes 5-6  DSHT port (UDP)
//	bytes 7-   HTTP IP (4 or 16 bytes), then DSHT IP (4 or 16 bytes)
//
// IPv4 addresses travel as 4 bytes; version 2 refuses IPv4-mapped IPv6
// (one encoding per address), version 1 reads them as IPv4 as it always
// did. An old proxy refuses version 2 (unknown version) and so does not
// use the references of upgraded proxies until it is upgraded itself.
type reference struct {
	Addr     netip.AddrPort // the proxy's HTTP address
	Complete bool
	Negative bool
	// DHT is the UDP address of the proxy's DSHT node, where it takes app
	// messages (purges); invalid in a version 1 reference.
	DHT netip.AddrPort
	// Left is how long the reference had left in the DSHT when it was
	// found (not part of the value; 0 when unknown). A proxy puts its
	// complete reference for no longer than its copy is fresh, so a copy
	// taken through the reference is fresh no longer than this.
	Left time.Duration
}

const (
	referenceV1   = 1
	referenceV2   = 2
	refComplete   = 1 << 0
	refNegative   = 1 << 1
	refKnownFlags = refComplete | refNegative

	refHTTPv6        = 1 << 0
	refDHTv6         = 1 << 1
	refKnownFamilies = refHTTPv6 | refDHTv6
)

var errBadReference = errors.New("coral_proxy: malformed DSHT reference")

// selfReference is the reference this proxy puts for itself: its HTTP
// address self and, when it has one, its DSHT node's address.
func (p *Proxy) selfReference(self netip.AddrPort) reference {
	r := reference{Addr: self}
	if node := p.dhtNode(); node != nil {
		r.DHT = node.Addr()
	}
	return r
}

// encode returns the wire form of r: version 2 when it names a DSHT
// address, version 1 otherwise.
func (r reference) encode() []byte {
	var flags byte
	if r.Complete {
		flags |= refComplete
	}
	if r.Negative {
		flags |= refNegative
	}
	ip := r.Addr.Addr().Unmap()
	if !r.DHT.IsValid() {
		b := make([]byte, 4, 4+16)
		b[0], b[1] = referenceV1, flags
		binary.BigEndian.PutUint16(b[2:], r.Addr.Port())
		return append(b, ip.AsSlice()...)
	}
	dip := r.DHT.Addr().Unmap()
	b := make([]byte, 7, 7+16+16)
	b[0], b[1] = referenceV2, flags
	if ip.Is6() {
		b[2] |= refHTTPv6
	}
	if dip.Is6() {
		b[2] |= refDHTv6
	}
	binary.BigEndian.PutUint16(b[3:], r.Addr.Port())
	binary.BigEndian.PutUint16(b[5:], r.DHT.Port())
	b = append(b, ip.AsSlice()...)
	return append(b, dip.AsSlice()...)
}

// decodeReference parses a value found in the DSHT. Values come from other
// nodes of the network, so anything odd is refused rather than trusted:
// unknown versions, flags and families, wrong lengths, port 0,
// unspecified, multicast or broadcast addresses.
func decodeReference(b []byte) (reference, error) {
	if len(b) < 2 {
		return reference{}, fmt.Errorf("%w: %d bytes", errBadReference, len(b))
	}
	if b[1]&^refKnownFlags != 0 {
		return reference{}, fmt.Errorf("%w: flags %#x", errBadReference, b[1])
	}
	r := reference{Complete: b[1]&refComplete != 0, Negative: b[1]&refNegative != 0}
	switch b[0] {
	case referenceV1:
		if len(b) != 8 && len(b) != 20 {
			return reference{}, fmt.Errorf("%w: %d bytes", errBadReference, len(b))
		}
		ip, _ := netip.AddrFromSlice(b[4:])
		addr := netip.AddrPortFrom(ip.Unmap(), binary.BigEndian.Uint16(b[2:]))
		if err := checkRefAddr(addr); err != nil {
			return reference{}, err
		}
		r.Addr = addr
		return r, nil
	case referenceV2:
		if len(b) < 7 || b[2]&^refKnownFamilies != 0 {
			return reference{}, fmt.Errorf("%w: version 2, %d bytes", errBadReference, len(b))
		}
		hl, dl := 4, 4
		if b[2]&refHTTPv6 != 0 {
			hl = 16
		}
		if b[2]&refDHTv6 != 0 {
			dl = 16
		}
		if len(b) != 7+hl+dl {
			return reference{}, fmt.Errorf("%w: version 2, %d bytes for families %#x", errBadReference, len(b), b[2])
		}
		hip, _ := netip.AddrFromSlice(b[7 : 7+hl])
		dip, _ := netip.AddrFromSlice(b[7+hl:])
		if hip.Is4In6() || dip.Is4In6() {
			return reference{}, fmt.Errorf("%w: IPv4-mapped IPv6 address", errBadReference)
		}
		r.Addr = netip.AddrPortFrom(hip, binary.BigEndian.Uint16(b[3:]))
		r.DHT = netip.AddrPortFrom(dip, binary.BigEndian.Uint16(b[5:]))
		if err := checkRefAddr(r.Addr); err != nil {
			return reference{}, err
		}
		if err := checkRefAddr(r.DHT); err != nil {
			return reference{}, err
		}
		return r, nil
	}
	return reference{}, fmt.Errorf("%w: version %d", errBadReference, b[0])
}

// checkRefAddr refuses addresses no proxy can have: port 0, unspecified,
// multicast or broadcast.
func checkRefAddr(a netip.AddrPort) error {
	ip := a.Addr()
	if a.Port() == 0 || ip.IsUnspecified() || ip.IsMulticast() || ip == netip.AddrFrom4([4]byte{255, 255, 255, 255}) {
		return fmt.Errorf("%w: address %v port %d", errBadReference, ip, a.Port())
	}
	return nil
}
