package coraldht

import (
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
)

// KeyringSize is how many network keys a node holds at once: the one it
// sends with and those it still (or already) accepts. A rotation needs two;
// the rest leave room for a revocation that starts during a rotation.
const KeyringSize = 4

// A Keyring is the set of network keys a node accepts, one of them the
// primary that tags every datagram the node sends. Datagrams carry no key
// ID (the wire format is the one of a single key), so a receiver tries the
// primary first, then the others: nodes of one network rotate keys with no
// split (install the new key as accepted everywhere, make it primary
// everywhere, remove the old one) and a node without a keyring
// interoperates as long as the key it has is installed.
//
// Receiving reads the ring with one atomic load and no lock: it runs for
// every datagram. Changes take a lock and publish a new ring.
type Keyring struct {
	mu  sync.Mutex // serializes changes
	cur atomic.Pointer[ringState]
}

// ringState is one published state of a Keyring; it is never modified.
// entries[0] is the primary.
type ringState struct {
	entries []*ringKey
}

// ringKey is an installed key and its count of datagrams accepted with
// it. The entry survives changes that keep the key, so the count does.
type ringKey struct {
	key      *Key
	accepted atomic.Uint64
}

// KeyInfo describes an installed key without revealing it.
type KeyInfo struct {
	Fingerprint string // Key.Fingerprint
	Primary     bool   // sends with it
	Accepted    uint64 // datagrams accepted under it since it was installed
}

// Errors of keyring changes.
var (
	ErrKeyringFull   = fmt.Errorf("coraldht: keyring full (%d keys); remove one first", KeyringSize)
	ErrKeyNotFound   = errors.New("coraldht: no installed key has that fingerprint")
	ErrRemovePrimary = errors.New("coraldht: cannot remove the primary key; make another key primary first")
)

// Keyring is the node's keyring: install, make primary and remove keys
// on the running node through it.
func (n *Node) Keyring() *Keyring { return n.keys }

func newKeyring(primary *Key, accepted []*Key) (*Keyring, error) {
	r := &Keyring{}
	r.cur.Store(&ringState{})
	if err := r.Set(primary, accepted...); err != nil {
		return nil, err
	}
	return r, nil
}

// Set replaces the whole keyring: primary sends and is accepted, accepted
// are accepted too. Keys that stay keep their counts. Duplicates are
// ignored.
func (r *Keyring) Set(primary *Key, accepted ...*Key) error {
	if primary == nil {
		return errors.New("coraldht: keyring needs a primary key")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.cur.Load()
	var next []*ringKey
	for _, k := range append([]*Key{primary}, accepted...) {
		if k == nil {
			return errors.New("coraldht: nil key")
		}
		if indexOfKey(next, k) >= 0 {
			continue
		}
		if len(next) == KeyringSize {
			return fmt.Errorf("coraldht: %d keys given; a keyring holds at most %d", len(accepted)+1, KeyringSize)
		}
		if i := indexOfKey(old.entries, k); i >= 0 {
			next = append(next, old.entries[i])
		} else {
			next = append(next, &ringKey{key: k})
		}
	}
	r.cur.Store(&ringState{entries: next})
	return nil
}

// Install adds k as an accepted key. Installing a key already held does
// nothing.
func (r *Keyring) Install(k *Key) error {
	if k == nil {
		return errors.New("coraldht: nil key")
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.cur.Load()
	if indexOfKey(old.entries, k) >= 0 {
		return nil
	}
	if len(old.entries) >= KeyringSize {
		return ErrKeyringFull
	}
	next := append(append(make([]*ringKey, 0, len(old.entries)+1), old.entries...), &ringKey{key: k})
	r.cur.Store(&ringState{entries: next})
	return nil
}

// SetPrimary makes the installed key with the given fingerprint (or a
// unique prefix of it) the one the node sends with.
func (r *Keyring) SetPrimary(fingerprint string) error {
	return r.change(fingerprint, func(old []*ringKey, i int) ([]*ringKey, error) {
		next := make([]*ringKey, 0, len(old))
		next = append(next, old[i])
		return append(append(next, old[:i]...), old[i+1:]...), nil
	})
}

// Remove uninstalls the key with the given fingerprint (or a unique
// prefix of it). The primary cannot be removed.
func (r *Keyring) Remove(fingerprint string) error {
	return r.change(fingerprint, func(old []*ringKey, i int) ([]*ringKey, error) {
		if i == 0 {
			return nil, ErrRemovePrimary
		}
		next := make([]*ringKey, 0, len(old)-1)
		return append(append(next, old[:i]...), old[i+1:]...), nil
	})
}

// change publishes the ring edit makes of the current entries, given
// the index of the entry the fingerprint names.
func (r *Keyring) change(fingerprint string, edit func(old []*ringKey, i int) ([]*ringKey, error)) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	old := r.cur.Load()
	i, err := old.find(fingerprint)
	if err != nil {
		return err
	}
	next, err := edit(old.entries, i)
	if err != nil {
		return err
	}
	r.cur.Store(&ringState{entries: next})
	return nil
}

// Keys lists the installed keys, the primary first.
func (r *Keyring) Keys() []KeyInfo {
	st := r.cur.Load()
	out := make([]KeyInfo, len(st.entries))
	for i, e := range st.entries {
		out[i] = KeyInfo{Fingerprint: e.key.Fingerprint(), Primary: i == 0, Accepted: e.accepted.Load()}
	}
	return out
}

// Fingerprints lists the installed keys' fingerprints, the primary first.
func (r *Keyring) Fingerprints() []string {
	st := r.cur.Load()
	out := make([]string, len(st.entries))
	for i, e := range st.entries {
		out[i] = e.key.Fingerprint()
	}
	return out
}

// find returns the index of the entry whose fingerprint is fp or starts
// with it; a prefix must name one key.
func (st *ringState) find(fp string) (int, error) {
	fp = strings.ToLower(strings.TrimSpace(fp))
	if fp == "" {
		return 0, ErrKeyNotFound
	}
	found := -1
	for i, e := range st.entries {
		if strings.HasPrefix(e.key.Fingerprint(), fp) {
			if found >= 0 {
				return 0, fmt.Errorf("coraldht: fingerprint prefix %q names more than one installed key", fp)
			}
			found = i
		}
	}
	if found < 0 {
		return 0, fmt.Errorf("%w: %s", ErrKeyNotFound, fp)
	}
	return found, nil
}

func indexOfKey(entries []*ringKey, k *Key) int {
	for i, e := range entries {
		if e.key.mac == k.mac {
			return i
		}
	}
	return -1
}

// seal appends the primary key's tag to msg.
func (r *Keyring) seal(msg []byte) []byte {
	return r.cur.Load().entries[0].key.seal(msg)
}

// open checks pkt's tag under the primary key, then under the others, and
// returns the message and the entry whose key matched, or ok false.
func (r *Keyring) open(pkt []byte) (msg []byte, e *ringKey, ok bool) {
	for _, e := range r.cur.Load().entries {
		if msg, ok := e.key.open(pkt); ok {
			return msg, e, true
		}
	}
	return nil, nil, false
}
