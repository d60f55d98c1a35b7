package coraldht

import (
	"crypto/ed25519"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coraldht/fleet"
	"github.com/coralcdn/coral/coraldht/internal/wire"
)

// Node identity mode (README, "Node identities"): besides the network
// key's tag, every datagram carries its sender's certificate, issued by
// the operator's fleet key, and the sender's Ed25519 signature over the
// datagram. A receiver drops a datagram whose certificate the fleet did
// not sign, that has expired, that a revocation list names, or whose
// signature does not verify: removing one node from a fleet is one new
// revocation list, not a new network key for everyone.

// Identity is a node's identity and what it trusts, for Config.Identity.
type Identity struct {
	// Certificate is this node's certificate; Key its private key, whose
	// public half the certificate names.
	Certificate *fleet.Certificate
	Key         ed25519.PrivateKey

	// Fleet are the fleet public keys whose certificates and revocation
	// lists this node accepts (two while the fleet key is rotated).
	Fleet []ed25519.PublicKey

	// Revoked is the revocation list to start with (nil: none); later
	// ones are installed with Node.SetRevocations.
	Revoked *fleet.RevocationList

	// Optional accepts datagrams that carry no identity, from nodes not
	// yet given one (the middle step of moving a fleet to identities);
	// those that carry one are checked all the same. Default false.
	Optional bool
}

// ErrNotIdentityMode: the node runs without Config.Identity.
var ErrNotIdentityMode = errors.New("coraldht: the node has no identity (Config.Identity)")

// Check checks an identity against its fleet at now: the certificate is
// the fleet's, the key the certificate's, and neither expired nor revoked.
func (id *Identity) Check(now time.Time) error {
	switch {
	case id.Certificate == nil || id.Key == nil:
		return errors.New("a certificate and its private key are required")
	case len(id.Fleet) == 0:
		return errors.New("no fleet public key")
	case !id.Key.Public().(ed25519.PublicKey).Equal(id.Certificate.PublicKey):
		return fmt.Errorf("the private key is not the one certificate %d names", id.Certificate.Serial)
	case !id.Certificate.Signed(id.Fleet):
		return fmt.Errorf("certificate %d is not signed by a fleet key given", id.Certificate.Serial)
	case !id.Certificate.Valid(now, 0):
		return fmt.Errorf("certificate %d is valid from %v to %v, not now", id.Certificate.Serial,
			id.Certificate.NotBefore.UTC().Format(time.RFC3339), id.Certificate.NotAfter.UTC().Format(time.RFC3339))
	case id.Revoked.Revoked(id.Certificate.Serial):
		return fmt.Errorf("certificate %d is revoked by revocation list %d", id.Certificate.Serial, id.Revoked.Number)
	}
	return nil
}

// maxKnownCertificates bounds the verified certificates a node keeps, so
// that it verifies a peer's certificate once, not with every datagram.
const maxKnownCertificates = 4096

// maxRevokedAddrs bounds the addresses a node remembers as those of
// revoked nodes, to keep them out of its lookups.
const maxRevokedAddrs = 4096

// identityState is a node's identity at run time.
type identityState struct {
	Identity
	revoked atomic.Pointer[fleet.RevocationList]

	mu    sync.Mutex
	known *boundedMap[[fleet.CertificateLen]byte, struct{}, *fleet.Certificate]
	gone  *boundedMap[netip.AddrPort, netip.Prefix, struct{}] // addresses of revoked nodes
}

func newIdentityState(id *Identity) *identityState {
	if id == nil {
		return nil
	}
	s := &identityState{Identity: *id,
		known: newBoundedMap[[fleet.CertificateLen]byte, struct{}, *fleet.Certificate](maxKnownCertificates, 0),
		gone:  newBoundedMap[netip.AddrPort, netip.Prefix, struct{}](maxRevokedAddrs, 0)}
	s.revoked.Store(id.Revoked)
	return s
}

// certificate returns raw as a certificate a fleet key signed, verifying
// it once.
func (s *identityState) certificate(raw []byte) (*fleet.Certificate, bool) {
	if len(raw) != fleet.CertificateLen {
		return nil, false
	}
	k := [fleet.CertificateLen]byte(raw)
	s.mu.Lock()
	c, ok := s.known.get(k)
	s.mu.Unlock()
	if ok {
		return c, true
	}
	c, err := fleet.ParseCertificate(raw)
	if err != nil || !c.Signed(s.Fleet) {
		return nil, false
	}
	s.mu.Lock()
	if _, ok := s.known.get(k); !ok {
		s.known.put(k, struct{}{}, c)
	}
	s.mu.Unlock()
	return c, true
}

// check authenticates a decoded datagram (body: the bytes before the
// network key's tag) by its sender's identity, returning the sender's
// certificate serial (0 for an accepted datagram without an identity).
func (s *identityState) check(m *wire.Message, body []byte, now time.Time, skew time.Duration) (uint64, DropReason) {
	if m.Identity == nil {
		if s.Optional {
			return 0, dropNone
		}
		return 0, DropBadIdentity
	}
	c, ok := s.certificate(m.Identity)
	if !ok || !c.Valid(now, skew) {
		return 0, DropBadIdentity
	}
	if s.revoked.Load().Revoked(c.Serial) {
		return c.Serial, DropRevoked
	}
	if ed25519.VerifyWithOptions(c.PublicKey, body[:m.SignedLen], m.Signature, &ed25519.Options{Context: fleet.DatagramContext}) != nil {
		return 0, DropBadIdentity
	}
	return c.Serial, dropNone
}

// sign fills in the signature of the datagram b, whose identity
// extension ends it.
func (s *identityState) sign(b []byte) error {
	sig, err := s.Key.Sign(nil, b[:len(b)-wire.SignatureLen], &ed25519.Options{Context: fleet.DatagramContext})
	if err != nil {
		return err
	}
	copy(b[len(b)-wire.SignatureLen:], sig)
	return nil
}

// revokedAddr reports whether addr was last heard from under a revoked
// certificate.
func (s *identityState) revokedAddr(addr netip.AddrPort) bool {
	if s == nil {
		return false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.gone.get(addr)
	return ok
}

// IdentityInfo describes a node's identity.
type IdentityInfo struct {
	Serial              uint64 // of this node's certificate
	NotBefore, NotAfter time.Time
	Optional            bool   // datagrams without an identity accepted
	RevocationList      uint64 // number of the list installed (0: none)
	Revoked             int    // serials it names
}

// selfRevoked reports whether the installed revocation list names this
// node's own certificate.
func (n *Node) selfRevoked() bool {
	return n.identity != nil && n.identity.revoked.Load().Revoked(n.identity.Certificate.Serial)
}

// Revocations is the revocation list installed; nil without one (or
// without an identity).
func (n *Node) Revocations() *fleet.RevocationList {
	if n.identity == nil {
		return nil
	}
	return n.identity.revoked.Load()
}

// Identity describes the node's identity; ok is false without one.
func (n *Node) Identity() (info IdentityInfo, ok bool) {
	s := n.identity
	if s == nil {
		return IdentityInfo{}, false
	}
	info = IdentityInfo{Serial: s.Certificate.Serial, NotBefore: s.Certificate.NotBefore, NotAfter: s.Certificate.NotAfter, Optional: s.Optional}
	if l := s.revoked.Load(); l != nil {
		info.RevocationList, info.Revoked = l.Number, len(l.Serials)
	}
	return info, true
}

// SetRevocations installs a revocation list, which its fleet key signed
// (fleet.ParseRevocationList checks it): datagrams under the certificates
// it names are dropped from now on, the nodes last heard under them leave
// the routing tables and are no longer contacted, and the values they
// stored here are dropped. It reports whether the list was new; a list
// numbered below the installed one is refused (a list never goes back),
// one numbered the same changes nothing.
func (n *Node) SetRevocations(l *fleet.RevocationList) (installed bool, err error) {
	s := n.identity
	if s == nil {
		return false, ErrNotIdentityMode
	}
	if l == nil {
		return false, errors.New("coraldht: nil revocation list")
	}
	s.mu.Lock()
	cur := s.revoked.Load()
	switch {
	case cur != nil && l.Number < cur.Number:
		s.mu.Unlock()
		return false, fmt.Errorf("coraldht: revocation list %d is older than the installed list %d", l.Number, cur.Number)
	case cur != nil && l.Number == cur.Number:
		s.mu.Unlock()
		return false, nil
	}
	s.revoked.Store(l)
	s.mu.Unlock()
	n.purgeRevoked(l)
	if l.Revoked(s.Certificate.Serial) {
		n.log.Error("this node's own certificate is revoked: every other node now drops its datagrams", "serial", s.Certificate.Serial, "list", l.Number)
	}
	return true, nil
}

// SetRevocationsText installs the revocation list of a revocation-list
// file's text (coral-fleet revoke), checked against this node's fleet
// keys: for lists that arrive another way than the file the servers
// poll, such as an admin call.
func (n *Node) SetRevocationsText(text []byte) (installed bool, err error) {
	if n.identity == nil {
		return false, ErrNotIdentityMode
	}
	l, err := fleet.ParseRevocationListText(text, n.identity.Fleet)
	if err != nil {
		return false, err
	}
	return n.SetRevocations(l)
}

// purgeRevoked forgets the nodes and values of the certificates l names.
func (n *Node) purgeRevoked(l *fleet.RevocationList) {
	s := n.identity
	addrs := n.peers.withSerial(l.Revoked)
	s.mu.Lock()
	for _, a := range addrs {
		if _, ok := s.gone.get(a); !ok {
			s.gone.put(a, SitePrefix(a.Addr()), struct{}{})
		}
	}
	s.mu.Unlock()
	for _, a := range addrs {
		for _, lv := range n.levels {
			lv.rt.remove(NodeIDFor(a))
		}
	}
	values := n.store.dropWhere(func(v *storedValue) bool { return l.Revoked(v.from.serial) })
	n.log.Info("revocation list installed", "number", l.Number, "serials", len(l.Serials), "nodes", len(addrs), "values", values)
}
