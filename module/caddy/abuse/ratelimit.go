package abuse

import (
	"math"
	"net/netip"
	"sync"
	"time"
)

// Defaults of the rate limit, each with its reason.
const (
	// DefaultRate and DefaultBurst: 10 requests a second per client, with
	// bursts of 50. A browser loading a page with all its images, scripts
	// and style sheets through Coral stays within the burst, and a network
	// of users behind one NAT address within the rate, while a client
	// caught in a redirect loop or a scraper hammering the proxy is slowed
	// at once. The rate limit is on unless configured off: CoralCDN
	// proxies always tracked clients' request rates.
	DefaultRate  = 10
	DefaultBurst = 50

	// PeerRateFactor: requests with Cache-Control: only-if-cached (what
	// peer proxies send) are counted apart, at this multiple of the client
	// rate and burst. One proxy fetches for all its clients, so it asks a
	// peer far more often than a browser asks a proxy; and such requests
	// cannot make this proxy fetch anything, so a client that sends them
	// to dodge the limit gains only cached bytes, which the bandwidth
	// budget bounds.
	PeerRateFactor = 10

	// DefaultMaxClients bounds the clients the rate limiter tracks. At the
	// default rate a bucket is full again (and so forgettable without loss)
	// 5 s after its client's last request, so the table only has to hold
	// the clients of the last few seconds: 65536 entries cover more than
	// 13,000 new clients a second, in about 7 MB.
	DefaultMaxClients = 1 << 16
)

// ---------------------------------------------------------------------
// Per-client request rate.

// RateLimiter is a token bucket per client: rate requests a second on
// average, up to burst at once. IPv4 clients are counted per address,
// IPv6 clients per /64 (what a single subscriber is usually given).
//
// Memory is bounded: at most maxClients buckets, kept in least recently
// Used order. A bucket that has been idle long enough to be full again
// holds no information and is dropped as it reaches the old end of the
// list; when the table is full of busy buckets, the least recently used
// is dropped anyway (its client starts again with a full bucket). Each
// request costs one map lookup and a few pointer moves under one mutex.
type RateLimiter struct {
	rate  float64 // tokens per second
	burst float64
	max   int
	idle  int64 // nanoseconds after which an untouched bucket is full

	mu      sync.Mutex
	clients map[netip.Addr]*bucket
	lru     bucket // sentinel: lru.next is the most recent, lru.prev the least
}

type bucket struct {
	key        netip.Addr
	tokens     float64
	last       int64 // UnixNano of the last update
	prev, next *bucket
}

// NewRateLimiter returns a limiter of rate requests a second per client
// with bursts of burst (at least 1), tracking at most maxClients clients
// (DefaultMaxClients if ≤ 0). A rate ≤ 0 (or NaN) means no limit: the
// result is nil, whose allow always says yes.
func NewRateLimiter(rate float64, burst int, maxClients int) *RateLimiter {
	if !(rate > 0) {
		return nil
	}
	if maxClients <= 0 {
		maxClients = DefaultMaxClients
	}
	l := &RateLimiter{
		rate:    rate,
		burst:   float64(max(burst, 1)),
		max:     maxClients,
		clients: make(map[netip.Addr]*bucket),
	}
	if idle := l.burst / rate * 1e9; idle < float64(math.MaxInt64) {
		l.idle = int64(math.Ceil(idle))
	} else {
		l.idle = math.MaxInt64
	}
	l.lru.next, l.lru.prev = &l.lru, &l.lru
	return l
}

// ClientKey is what a client is counted by: the IPv4 address (also for
// IPv4-mapped IPv6), or the IPv6 /64; zones are dropped.
func ClientKey(ip netip.Addr) netip.Addr {
	ip = ip.Unmap().WithZone("")
	if ip.Is6() {
		p, _ := ip.Prefix(64)
		return p.Addr()
	}
	return ip
}

// Allow takes a token for the client at ip at time now. When there is
// none, ok is false and retryAfter is how long until there is one. An
// invalid ip is not limited. Times earlier than the client's last request
// are taken as equal to it.
func (l *RateLimiter) Allow(ip netip.Addr, now time.Time) (ok bool, retryAfter time.Duration) {
	if l == nil || !ip.IsValid() {
		return true, 0
	}
	key := ClientKey(ip)
	t := now.UnixNano()
	l.mu.Lock()
	defer l.mu.Unlock()
	b := l.clients[key]
	if b != nil {
		if elapsed := t - b.last; elapsed > 0 {
			b.tokens = min(l.burst, b.tokens+float64(elapsed)/1e9*l.rate)
			b.last = t
		}
		l.unlink(b)
	} else {
		b = l.newBucket(key, t)
	}
	l.pushFront(b)
	// Reclaim up to two idle buckets per request, so the table shrinks
	// back after a crowd has gone.
	for range 2 {
		old := l.lru.prev
		if old == &l.lru || old == b || t-old.last < l.idle {
			break
		}
		l.remove(old)
	}
	if b.tokens >= 1 {
		b.tokens--
		return true, 0
	}
	wait := (1 - b.tokens) / l.rate * 1e9
	return false, time.Duration(math.Ceil(min(wait, float64(math.MaxInt64/2))))
}

// newBucket makes a full bucket for key, evicting the least recently used
// bucket if the table is full (and reusing its memory).
func (l *RateLimiter) newBucket(key netip.Addr, t int64) *bucket {
	var b *bucket
	if len(l.clients) >= l.max {
		b = l.lru.prev
		l.remove(b)
		*b = bucket{}
	} else {
		b = new(bucket)
	}
	b.key, b.tokens, b.last = key, l.burst, t
	l.clients[key] = b
	return b
}

func (l *RateLimiter) remove(b *bucket) {
	l.unlink(b)
	delete(l.clients, b.key)
}

func (l *RateLimiter) unlink(b *bucket) {
	b.prev.next, b.next.prev = b.next, b.prev
	b.prev, b.next = nil, nil
}

func (l *RateLimiter) pushFront(b *bucket) {
	b.prev, b.next = &l.lru, l.lru.next
	l.lru.next.prev = b
	l.lru.next = b
}

// Tracked is the number of clients in the table.
func (l *RateLimiter) Tracked() int {
	if l == nil {
		return 0
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.clients)
}
