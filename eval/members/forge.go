package main

import (
	"crypto/hmac"
	"crypto/sha1"
	"crypto/sha256"
	"encoding/binary"
	"net/netip"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

// A member's forger: the datagrams a malicious member sends that no
// coraldht node would, written from coraldht/PROTOCOL.md alone (this
// experiment does not use the node's codec), and tagged with the network
// key the member holds.

// Message types and request flags of PROTOCOL.md.
const (
	typePing     = 1
	typeFindNode = 2
	typeGet      = 3
	typePutProbe = 4
	typeStore    = 5

	wantValues = 1

	// capExtensions is bit 31 of the services word: the sender reads the
	// extension area.
	capExtensions = 1 << 31
)

// forger tags datagrams with the network key.
type forger struct {
	mac   []byte // the key the tag's HMAC uses, derived from the secret
	stamp int64
}

func newForger(secret string) *forger {
	h := hmac.New(sha256.New, []byte(secret))
	h.Write([]byte("coral dht v1 datagram tag"))
	return &forger{mac: h.Sum(nil)}
}

// request is what a forged request says.
type request struct {
	typ      byte
	sender   netip.AddrPort // the address it claims to come from
	services uint32
	to       netip.AddrPort // the recipient, whose ID is SHA-1 of its address
	key      coraldht.ID
	target   coraldht.ID
	flags    byte
	ttl      uint32 // ms
	value    []byte
	ext      bool // append an empty cookie extension (a current node without a cookie)
}

func nodeID(a netip.AddrPort) coraldht.ID { return coraldht.ID(sha1.Sum([]byte(a.String()))) }

func (f *forger) contact(b []byte, a netip.AddrPort, services uint32) []byte {
	id := nodeID(a)
	b = append(b, id[:]...)
	ip := a.Addr().As4()
	b = append(b, 4)
	b = append(b, ip[:]...)
	b = binary.BigEndian.AppendUint16(b, a.Port())
	return binary.BigEndian.AppendUint32(b, services)
}

// forge encodes and tags r: header, one cluster entry (level 0), body,
// extensions.
func (f *forger) forge(r request) []byte {
	f.stamp = max(f.stamp+1, time.Now().UnixNano())
	b := []byte{0xC0, 0x2A, 1, r.typ, 0}
	b = binary.BigEndian.AppendUint64(b, uint64(f.stamp)) // request ID
	b = binary.BigEndian.AppendUint64(b, uint64(f.stamp)) // timestamp
	to := nodeID(r.to)
	b = append(b, to[:]...)
	b = f.contact(b, r.sender, r.services)
	b = append(b, 1, 0)                  // one cluster: level 0,
	b = append(b, make([]byte, 20+1)...) // ID zero, size 0,
	b = binary.BigEndian.AppendUint64(b, uint64(time.Now().Unix()))
	switch r.typ {
	case typeFindNode:
		b = append(b, 0)
		b = append(b, r.target[:]...)
	case typeGet:
		b = append(b, 0)
		b = append(b, r.key[:]...)
		b = append(b, r.target[:]...)
	case typePutProbe:
		b = append(b, 0, r.flags)
		b = append(b, r.key[:]...)
		b = append(b, r.target[:]...)
		b = binary.BigEndian.AppendUint32(b, r.ttl)
	case typeStore:
		b = append(b, 0, r.flags)
		b = append(b, r.key[:]...)
		b = binary.BigEndian.AppendUint32(b, r.ttl)
		b = binary.BigEndian.AppendUint16(b, uint16(len(r.value)))
		b = append(b, r.value...)
	}
	if r.ext {
		b = append(b, 1, 0, 16)
		b = append(b, make([]byte, 16)...)
	}
	h := hmac.New(sha256.New, f.mac)
	h.Write(b)
	return append(b, h.Sum(nil)[:16]...)
}
