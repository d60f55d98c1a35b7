package coraldht

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"hash"
	"net/netip"
	"sync"
	"time"
)

// Address cookies (PROTOCOL.md, Address cookies), as DNS cookies do it:
// every datagram a node sends to a peer that speaks the extensions grants
// that peer's address a cookie, a MAC of the address under a secret only
// this node knows. The peer echoes the latest cookie it was granted in its
// requests, which proves its requests come from the address the cookie
// was sent to: a source that could not receive there (a spoofed one)
// cannot echo it. A reply larger than its request goes only to a proven
// source; others get a reply truncated to the request's size, with a
// cookie to retry with.

// cookieLifetime is how long one secret epoch lasts; a cookie is valid in
// the epoch it was granted and the next, so for 30 to 60 minutes. Peers
// refresh theirs with every datagram they receive.
const cookieLifetime = 30 * time.Minute

type cookieJar struct {
	pool sync.Pool // HMAC-SHA256 under the secret
}

func newCookieJar() *cookieJar {
	var secret [32]byte
	if _, err := rand.Read(secret[:]); err != nil {
		panic("coraldht: crypto/rand: " + err.Error())
	}
	return &cookieJar{pool: sync.Pool{New: func() any { return hmac.New(sha256.New, secret[:]) }}}
}

func (j *cookieJar) cookie(addr netip.AddrPort, epoch int64) uint64 {
	var in [8 + 16 + 2]byte
	binary.BigEndian.PutUint64(in[:8], uint64(epoch))
	ip := addr.Addr().Unmap().As16()
	copy(in[8:24], ip[:])
	binary.BigEndian.PutUint16(in[24:], addr.Port())
	h := j.pool.Get().(hash.Hash)
	h.Reset()
	h.Write(in[:])
	var sum [sha256.Size]byte
	c := binary.BigEndian.Uint64(h.Sum(sum[:0]))
	j.pool.Put(h)
	if c == 0 {
		c = 1 // 0 means "no cookie" on the wire
	}
	return c
}

func epochOf(now time.Time) int64 { return now.Unix() / int64(cookieLifetime/time.Second) }

// grant is the cookie for a peer at addr.
func (j *cookieJar) grant(addr netip.AddrPort, now time.Time) uint64 {
	return j.cookie(addr, epochOf(now))
}

// valid reports whether echo is a cookie this node granted to addr in
// this epoch or the previous one.
func (j *cookieJar) valid(echo uint64, addr netip.AddrPort, now time.Time) bool {
	if echo == 0 {
		return false
	}
	e := epochOf(now)
	return hmac.Equal(u64bytes(echo), u64bytes(j.cookie(addr, e))) || hmac.Equal(u64bytes(echo), u64bytes(j.cookie(addr, e-1)))
}

func u64bytes(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

// A first request to a peer that has granted this node no cookie yet
// would get a truncated reply (its source is unproven there) and cost a
// round trip more. So it is padded to a full datagram, as QUIC pads a
// client's first packet: the peer may answer in full, and the reply
// brings a cookie for the next ones. Padding costs bytes toward an
// address this node learned from others (a member could name any
// address in its replies), so at most firstContactPads padded requests
// a minute go to one /24 (/48); beyond that the first contact costs the
// round trip.
const firstContactPads = 16

type padBudget struct {
	mu      sync.Mutex
	windows *boundedMap[netip.Prefix, struct{}, *padWindow]
}

type padWindow struct {
	start time.Time
	n     int
}

func newPadBudget() *padBudget {
	return &padBudget{windows: newBoundedMap[netip.Prefix, struct{}, *padWindow](4096, 0)}
}

// allow spends one padded request toward addr's prefix, if any is left
// this minute.
func (b *padBudget) allow(addr netip.AddrPort, now time.Time) bool {
	p := SitePrefix(addr.Addr())
	b.mu.Lock()
	defer b.mu.Unlock()
	w, ok := b.windows.get(p)
	if !ok {
		w = &padWindow{start: now}
		b.windows.put(p, struct{}{}, w)
	} else {
		b.windows.touch(p)
	}
	if now.Sub(w.start) >= time.Minute {
		w.start, w.n = now, 0
	}
	if w.n >= firstContactPads {
		return false
	}
	w.n++
	return true
}
