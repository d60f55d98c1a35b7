// Package fleet holds what node identity mode is made of (coraldht's
// README, "Node identities"): the operator's fleet key, the certificate
// it issues each node, and the revocation lists it signs. A certificate
// names a node's Ed25519 public key, a serial and a validity period; a
// revocation list names the serials no longer valid. Both are small
// binary structures, signed by the fleet key, kept in text files of
// base64 with # comments (files.go).
//
// Certificate, 113 bytes, as it is also carried in every datagram:
//
//	version     1   1
//	serial      8   unique per certificate the fleet issued
//	not before  4   Unix seconds
//	not after   4   Unix seconds
//	public key  32  the node's Ed25519 key
//	signature   64  Ed25519ctx by the fleet key, context "coral node certificate", over the above
//
// Revocation list:
//
//	version     1   1
//	number      8   grows with every list a fleet issues; a node takes no older one
//	issued      8   Unix seconds
//	count       4   then count serials of 8 bytes, increasing
//	signature   64  Ed25519ctx by the fleet key, context "coral revocation list", over the above
package fleet

import (
	"crypto/ed25519"
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"time"
)

const (
	version = 1

	// CertificateLen is the length of an encoded certificate.
	CertificateLen = 1 + 8 + 4 + 4 + ed25519.PublicKeySize + ed25519.SignatureSize

	// MaxRevoked bounds the serials one revocation list may name (64 KiB
	// of them): a fleet that revokes more rotates its fleet key.
	MaxRevoked = 8192

	certContext = "coral node certificate"
	listContext = "coral revocation list"
	// DatagramContext is the Ed25519ctx context of a node's signature on
	// a datagram.
	DatagramContext = "coral dht datagram"
)

// Errors of checking certificates and lists.
var (
	ErrSignature = errors.New("fleet: signature is not by a fleet key")
	ErrExpired   = errors.New("fleet: certificate outside its validity period")
	ErrFormat    = errors.New("fleet: malformed")
)

// A Certificate binds a node's public key to a serial, for a period.
type Certificate struct {
	Serial              uint64
	NotBefore, NotAfter time.Time
	PublicKey           ed25519.PublicKey
	Raw                 []byte // the encoding, CertificateLen bytes
}

func sign(key ed25519.PrivateKey, context string, msg []byte) ([]byte, error) {
	return key.Sign(nil, msg, &ed25519.Options{Context: context})
}

// verifyBy reports whether sig over msg is by one of keys.
func verifyBy(keys []ed25519.PublicKey, context string, msg, sig []byte) bool {
	for _, k := range keys {
		if ed25519.VerifyWithOptions(k, msg, sig, &ed25519.Options{Context: context}) == nil {
			return true
		}
	}
	return false
}

// Issue makes a certificate for the node key pub, signed by the fleet key.
func Issue(fleetKey ed25519.PrivateKey, pub ed25519.PublicKey, serial uint64, notBefore, notAfter time.Time) (*Certificate, error) {
	switch {
	case len(pub) != ed25519.PublicKeySize:
		return nil, fmt.Errorf("fleet: node public key of %d bytes", len(pub))
	case !notAfter.After(notBefore):
		return nil, fmt.Errorf("fleet: validity ends (%v) before it begins (%v)", notAfter, notBefore)
	case notBefore.Unix() < 0 || notAfter.Unix() > 1<<32-1:
		return nil, fmt.Errorf("fleet: validity outside 1970..2106")
	}
	b := make([]byte, 0, CertificateLen)
	b = append(b, version)
	b = binary.BigEndian.AppendUint64(b, serial)
	b = binary.BigEndian.AppendUint32(b, uint32(notBefore.Unix()))
	b = binary.BigEndian.AppendUint32(b, uint32(notAfter.Unix()))
	b = append(b, pub...)
	sig, err := sign(fleetKey, certContext, b)
	if err != nil {
		return nil, err
	}
	return ParseCertificate(append(b, sig...))
}

// ParseCertificate decodes a certificate without checking its signature
// or validity (Check does).
func ParseCertificate(raw []byte) (*Certificate, error) {
	if len(raw) != CertificateLen || raw[0] != version {
		return nil, fmt.Errorf("%w certificate: %d bytes, version %d", ErrFormat, len(raw), firstByte(raw))
	}
	c := &Certificate{Serial: binary.BigEndian.Uint64(raw[1:9]),
		NotBefore: time.Unix(int64(binary.BigEndian.Uint32(raw[9:13])), 0),
		NotAfter:  time.Unix(int64(binary.BigEndian.Uint32(raw[13:17])), 0),
		PublicKey: ed25519.PublicKey(slices.Clone(raw[17 : 17+ed25519.PublicKeySize])),
		Raw:       slices.Clone(raw)}
	return c, nil
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

// Signed reports whether one of the fleet keys signed c.
func (c *Certificate) Signed(fleetKeys []ed25519.PublicKey) bool {
	n := CertificateLen - ed25519.SignatureSize
	return verifyBy(fleetKeys, certContext, c.Raw[:n], c.Raw[n:])
}

// Valid reports whether now lies within c's validity period, widened by
// slack on both sides for clocks that differ.
func (c *Certificate) Valid(now time.Time, slack time.Duration) bool {
	return !now.Before(c.NotBefore.Add(-slack)) && !now.After(c.NotAfter.Add(slack))
}

// Check verifies c's signature by one of the fleet keys and its validity
// at now.
func (c *Certificate) Check(fleetKeys []ed25519.PublicKey, now time.Time) error {
	if !c.Signed(fleetKeys) {
		return ErrSignature
	}
	if !c.Valid(now, 0) {
		return fmt.Errorf("%w: %v to %v", ErrExpired, c.NotBefore.UTC(), c.NotAfter.UTC())
	}
	return nil
}

// A RevocationList names the certificates a fleet no longer honours.
type RevocationList struct {
	Number  uint64
	Issued  time.Time
	Serials []uint64 // increasing
	Raw     []byte
}

// NewRevocationList signs a list of the given serials with the fleet key.
func NewRevocationList(fleetKey ed25519.PrivateKey, number uint64, issued time.Time, serials []uint64) (*RevocationList, error) {
	s := slices.Clone(serials)
	slices.Sort(s)
	s = slices.Compact(s)
	if len(s) > MaxRevoked {
		return nil, fmt.Errorf("fleet: %d serials; a list names at most %d", len(s), MaxRevoked)
	}
	b := []byte{version}
	b = binary.BigEndian.AppendUint64(b, number)
	b = binary.BigEndian.AppendUint64(b, uint64(max(issued.Unix(), 0)))
	b = binary.BigEndian.AppendUint32(b, uint32(len(s)))
	for _, v := range s {
		b = binary.BigEndian.AppendUint64(b, v)
	}
	sig, err := sign(fleetKey, listContext, b)
	if err != nil {
		return nil, err
	}
	return &RevocationList{Number: number, Issued: time.Unix(int64(binary.BigEndian.Uint64(b[9:17])), 0), Serials: s, Raw: append(b, sig...)}, nil
}

// ParseRevocationList decodes a list and checks that one of the fleet
// keys signed it.
func ParseRevocationList(raw []byte, fleetKeys []ed25519.PublicKey) (*RevocationList, error) {
	l, err := DecodeRevocationList(raw)
	if err != nil {
		return nil, err
	}
	n := len(raw) - ed25519.SignatureSize
	if !verifyBy(fleetKeys, listContext, raw[:n], raw[n:]) {
		return nil, ErrSignature
	}
	return l, nil
}

// DecodeRevocationList decodes a list without checking its signature:
// for showing one, never for installing it.
func DecodeRevocationList(raw []byte) (*RevocationList, error) {
	const head = 1 + 8 + 8 + 4
	if len(raw) < head+ed25519.SignatureSize || raw[0] != version {
		return nil, fmt.Errorf("%w revocation list: %d bytes, version %d", ErrFormat, len(raw), firstByte(raw))
	}
	n := int(binary.BigEndian.Uint32(raw[17:21]))
	if n > MaxRevoked || len(raw) != head+8*n+ed25519.SignatureSize {
		return nil, fmt.Errorf("%w revocation list: %d serials in %d bytes", ErrFormat, n, len(raw))
	}
	l := &RevocationList{Number: binary.BigEndian.Uint64(raw[1:9]), Issued: time.Unix(int64(binary.BigEndian.Uint64(raw[9:17])), 0),
		Raw: slices.Clone(raw)}
	for i := range n {
		v := binary.BigEndian.Uint64(raw[head+8*i:])
		if i > 0 && v <= l.Serials[i-1] {
			return nil, fmt.Errorf("%w revocation list: serials not increasing", ErrFormat)
		}
		l.Serials = append(l.Serials, v)
	}
	return l, nil
}

// Revoked reports whether the list names serial. A nil list names none.
func (l *RevocationList) Revoked(serial uint64) bool {
	if l == nil {
		return false
	}
	_, found := slices.BinarySearch(l.Serials, serial)
	return found
}
