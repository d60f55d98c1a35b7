package proxy

import (
	"context"
	"errors"
	"fmt"
	"net/http/httptrace"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"
)

// Bounds on downloads. Every distinct URL a client asks for that is not in
// the cache starts a download: a goroutine, a connection to a peer or the
// origin, and a file in the cache being written. The download outlives the
// client that started it (the next client wants the object too), so
// without a bound one client walking through URLs could hold thousands of
// them open, and one slow origin could take them all. Downloads are
// therefore counted per proxy and per origin (host and port), and a
// request that would start one beyond either bound waits for a slot, at
// most download_wait, then gets 503 with Retry-After. Requests that join a
// download already running need no slot, and neither do requests served
// from the cache; a background revalidation (stale-while-revalidate) that
// finds no free slot is skipped, and the stale copy is served.
//
// Two more rules keep one client from holding an origin's slots (see
// download.holders in download.go):
//
//   - a download no client is waiting for any more is cancelled, and its
//     slot freed, unless it is nearly done (nearlyDone); a peer proxy
//     streaming the object from this one is a client like any other;
//   - one client address (an IPv4 address or IPv6 /64, as for rate_limit)
//     holds at most max_downloads_per_client of one origin's slots at once,
//     counting the downloads it started that still run.
//
// A download that may not be stored (no-store, private, an error kept from
// hiding a fresh copy, or one the cache refuses because Readers hold its
// room) is relayed to the one client that asked, at that client's pace,
// and keeps its slot until the client has it all: the origin connection
// cannot be read faster than the client takes the bytes, since nothing
// stores them. A client that stops reading would so hold an origin's slot
// until write_idle_timeout drops it, and a few such clients all of them.
// So a relay whose write to its client has made no progress for
// relayStall is preemptible: a request that finds no slot free takes the
// slot of such a relay counted in the bound that stops it (any relay for
// the total, one of the same origin for the per-origin bound, one of the
// same client and origin for the per-client bound), and that relay is cut
// (its client's connection and its origin fetch end at once). Without
// someone waiting nothing is cut: a slow client keeps its relay, bounded
// by write_idle_timeout as before. Every bound still holds: the slot
// changes hands, it is not added.
const (
	// defaultMaxDownloads: 256 downloads at once per proxy. On a busy
	// proxy most requests are hits or join a running download, so
	// hundreds of distinct objects fetched in the same instant is already
	// a flash crowd across a whole site; each costs a goroutine, a socket
	// and a file descriptor, far below a process's limits.
	defaultMaxDownloads = 256
	// defaultMaxDownloadsPerOrigin: 32 at once from one origin host and
	// port: five times the six connections a browser opens to one host,
	// so a proxy filling its cache for many clients of one site is rarely
	// held back, while no single origin (a slow one, or one an attacker
	// controls) can take more than an eighth of the proxy's slots.
	defaultMaxDownloadsPerOrigin = 32
	// defaultMaxDownloadsPerClient: 16 of one origin's slots for one client
	// address: room for a page's objects fetched at once by the users
	// behind one NAT (with 8, one client asking for a page's 12 objects at
	// once had four of them refused with 503 in eval/flashcrowd's start
	// burst), while one address can still take only half an origin's 32.
	defaultMaxDownloadsPerClient = 16
	// nearlyDonePercent: a download with at least this share of its
	// declared length received is finished although no client waits for
	// it any more: the rest costs at most a tenth of the object, and the
	// next client finds it whole in the cache. One of unknown length is
	// never nearly done.
	nearlyDonePercent = 90
	// relayStall: how long a write to a relay's client may make no
	// progress before another request that needs the relay's slot may
	// take it. The relay writes 32 KiB at a time, so a client reading
	// under 16 KB/s counts as stalled too; an honest one is cut only when
	// its origin's slots are all taken meanwhile, and then gets a
	// truncated response to retry, not a 30 s wait for everyone else.
	relayStall = 2 * time.Second
	// defaultDownloadWait: how long a request waits for a slot. A slot
	// frees when a download ends, usually within a few seconds; a client
	// still waiting after 10 s is better told to come back (Retry-After)
	// than held until its own timeout.
	defaultDownloadWait = 10 * time.Second
	// defaultDownloadTimeout: the longest one download may take, besides
	// origin_timeout, which bounds each silence. It ends an origin that
	// trickles a byte every few seconds forever. Ten minutes moves the
	// default largest object (an eighth of the default 1 GiB cache,
	// 128 MiB) at 220 KB/s.
	defaultDownloadTimeout = 10 * time.Minute
)

// errDownloadsBusy is why a request that needed a download slot got none
// within download_wait.
var errDownloadsBusy = errors.New("coral_proxy: too many downloads in progress; try again shortly")

// slotBounds are the bounds on download slots (Config.MaxDownloads and
// the rest; slotBoundsOf fills in the shares left 0).
type slotBounds struct {
	total      int // all downloads
	perOrigin  int // per origin name (host and port)
	perAddress int // per origin address (what the name resolved to, any port)
	perClient  int // per client and origin name
	// perClientAll is per client over every origin, and also bounds the
	// requests of one client waiting for a slot.
	perClientAll int
	// perClientBytes bounds the bytes one client's downloads write into
	// the cache at once, over every origin (0: no bound): its share of
	// cache_size (clientBytesShare).
	perClientBytes int64
}

// clientBytesShare is the bytes in flight one client's downloads may
// hold: the same eighth of the cache that its download slots are of all
// the slots, and at least one object of max_object_size, so that one
// download of the largest object a client may start always fits. Without
// it a client's 32 downloads could each grow to max_object_size (4 GiB by
// default against a 1 GiB cache) and evict everyone else's objects.
func clientBytesShare(cacheBytes, maxObject int64) int64 {
	if cacheBytes <= 0 {
		return 0
	}
	return max(cacheBytes/clientShareDivisor, maxObject)
}

// slotBoundsOf is c's bounds, the shares c leaves 0 derived from
// MaxDownloads: a client an eighth of the slots, an origin address a
// quarter (at least an origin name's bound). A client may hold at least
// minClientDownloads (where there are that many slots), so a small
// max_downloads does not leave a client one download at a time.
func slotBoundsOf(c *Config) slotBounds {
	b := slotBounds{total: c.MaxDownloads, perOrigin: c.MaxDownloadsPerOrigin, perAddress: c.MaxDownloadsPerAddress,
		perClient: c.MaxDownloadsPerClient, perClientAll: c.MaxClientDownloads}
	if b.perClientAll == 0 {
		b.perClientAll = min(b.total, max(minClientDownloads, b.total/clientShareDivisor))
	}
	if b.perAddress == 0 {
		b.perAddress = max(b.perOrigin, b.total/addressShareDivisor)
	}
	return b
}

// The default shares of the download slots (slotBoundsOf).
const (
	// clientShareDivisor: one client (Config.ClientPrefixV4/V6) holds at
	// most an eighth of the slots over all origins together (32 of 256):
	// twice what it may hold of one origin, so a user of two sites at once
	// is not held back, while eight clients are needed to fill the proxy.
	clientShareDivisor = 8
	// addressShareDivisor: downloads from one origin address (any name,
	// any port) hold at most a quarter of the slots (64 of 256): a
	// wildcard domain or a range of ports on one machine is one origin,
	// while a shared host's many sites (one address, many names) keep
	// twice the room of one name.
	addressShareDivisor = 4
	// minClientDownloads: the least per-client bound a small max_downloads
	// derives.
	minClientDownloads = 2
)

// downloadSlots counts downloads in progress: in all, per origin name and
// per origin address, per client and origin, and per client over every
// origin. A nil *downloadSlots has no bounds.
type downloadSlots struct {
	mu          sync.Mutex
	b           slotBounds
	running     int
	byOrigin    map[string]int
	byAddr      map[netip.Addr]int
	byClient    map[clientOrigin]int
	byClientAll map[string]int
	// bytes counts, per client, the bytes its downloads have charged
	// (chargeBytes) and not yet given back.
	bytes map[string]int64
	// waiting counts, per client, the requests waiting for a slot.
	waiting map[string]int
	// freed is closed (and replaced) whenever a slot is released or a
	// relay starts serving, waking every waiter to try again.
	freed chan struct{}
	// relays are the slots held by uncached relays serving their client
	// (preemptible when stalled).
	relays map[*relaySlot]struct{}
}

// slotHold is one download slot taken: the origin name and client it
// counts for, and the origin address once the download's origin
// connection is known (bindAddr).
type slotHold struct {
	origin, client string
	// Guarded by downloadSlots.mu: addr, and released once the slot is
	// given back (a late bindAddr then counts nothing).
	addr     netip.Addr
	released bool
	// bytes is what the download charged to its client (chargeBytes).
	bytes int64
}

// relaySlot is the download slot of an uncached relay: taken like any
// other, and given back by end, or taken over by a waiting request while
// the relay's client does not read (see relayStall).
type relaySlot struct {
	s      *downloadSlots
	h      *slotHold
	origin string // h.origin, for the log
	// writing is when the relay's write to its client now under way began
	// (Unix nanoseconds), 0 between writes.
	writing atomic.Int64
	// Guarded by s.mu: cut ends the relay (nil until it serves its
	// client: only then is it preemptible); gone once the slot is given
	// back or taken over.
	cut       func()
	gone      bool
	takenOver bool
}

// clientOrigin is a client (clientKey; "" for none) and an origin.
type clientOrigin struct{ client, origin string }

func newDownloadSlots(b slotBounds) *downloadSlots {
	return &downloadSlots{b: b,
		byOrigin: make(map[string]int), byAddr: make(map[netip.Addr]int), byClient: make(map[clientOrigin]int),
		byClientAll: make(map[string]int), bytes: make(map[string]int64), waiting: make(map[string]int), freed: make(chan struct{}),
		relays: make(map[*relaySlot]struct{})}
}

// fullFor says which bounds stop a new slot of origin for client.
type fullFor struct{ total, origin, client, clientAll bool }

func (f fullFor) any() bool { return f.total || f.origin || f.client || f.clientAll }

func (s *downloadSlots) fullLocked(origin, client string) fullFor {
	f := fullFor{total: s.running >= s.b.total, origin: s.byOrigin[origin] >= s.b.perOrigin}
	if client != "" {
		f.client = s.byClient[clientOrigin{client, origin}] >= s.b.perClient
		f.clientAll = s.byClientAll[client] >= s.b.perClientAll
	}
	return f
}

func (s *downloadSlots) takeLocked(origin, client string) *slotHold {
	if s.fullLocked(origin, client).any() {
		return nil
	}
	s.running++
	s.byOrigin[origin]++
	if client != "" {
		s.byClient[clientOrigin{client, origin}]++
		s.byClientAll[client]++
	}
	return &slotHold{origin: origin, client: client}
}

// acquire takes a slot of origin for client ("": not bounded per client),
// waiting at most wait for one to free, or to take over from a stalled
// relay: errDownloadsBusy after that, or at once when the client already
// has as many requests waiting as it may hold slots; ctx's error if ctx
// ends first. A nil s returns a hold that counts nothing.
func (s *downloadSlots) acquire(ctx context.Context, origin, client string, wait time.Duration) (*slotHold, error) {
	if s == nil {
		return &slotHold{origin: origin, client: client}, nil
	}
	var timer *time.Timer
	counted := false
	defer func() {
		if counted {
			s.mu.Lock()
			decrement(s.waiting, client)
			s.mu.Unlock()
		}
	}()
	for {
		s.mu.Lock()
		if h := s.takeLocked(origin, client); h != nil {
			s.mu.Unlock()
			if timer != nil {
				timer.Stop()
			}
			return h, nil
		}
		victim, recheck := s.stalledRelayLocked(origin, client, time.Now())
		if victim != nil {
			// Its slot changes hands: given back here, taken below (it
			// counts in every bound that stopped us, so the take succeeds).
			victim.gone, victim.takenOver = true, true
			delete(s.relays, victim)
			s.releaseLocked(victim.h)
			h := s.takeLocked(origin, client)
			s.mu.Unlock()
			victim.cut()
			if h != nil {
				if timer != nil {
					timer.Stop()
				}
				return h, nil
			}
			continue
		}
		if !counted && client != "" {
			if s.waiting[client] >= s.b.perClientAll {
				s.mu.Unlock()
				return nil, errDownloadsBusy
			}
			s.waiting[client]++
			counted = true
		}
		freed := s.freed
		s.mu.Unlock()
		if timer == nil {
			if wait <= 0 {
				return nil, errDownloadsBusy
			}
			timer = time.NewTimer(wait)
			defer timer.Stop()
		}
		var stalls <-chan time.Time
		if recheck > 0 {
			t := time.NewTimer(recheck)
			stalls = t.C
			defer t.Stop()
		}
		select {
		case <-freed:
		case <-stalls:
		case <-timer.C:
			return nil, errDownloadsBusy
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
}

// stalledRelayLocked returns the relay whose slot a request of origin and
// client, for which none is free, may take over: one counted in every
// bound that stops the request, whose write to its client has been under
// way for relayStall (the longest such). Otherwise recheck is when one
// may have become so (0: no relay could free a slot for the request).
func (s *downloadSlots) stalledRelayLocked(origin, client string, now time.Time) (victim *relaySlot, recheck time.Duration) {
	full := s.fullLocked(origin, client)
	oldest := int64(0)
	for r := range s.relays {
		if r.cut == nil || (full.origin || full.client) && r.h.origin != origin || (full.client || full.clientAll) && r.h.client != client {
			continue
		}
		started := r.writing.Load()
		switch {
		case started == 0:
			recheck = relayStall
		case now.Sub(time.Unix(0, started)) >= relayStall:
			if victim == nil || started < oldest {
				victim, oldest = r, started
			}
		default:
			if d := relayStall - now.Sub(time.Unix(0, started)); recheck == 0 || d < recheck {
				recheck = d
			}
		}
	}
	return victim, recheck
}

// bindAddr counts h's download under the origin address it is connected
// to (addr): the per-address bound. A download that moves to another
// address (an https upgrade) is counted under the new one only. When the
// address has no room, it waits at most wait for some: errDownloadsBusy
// after that, ctx's error if ctx ends first.
func (s *downloadSlots) bindAddr(ctx context.Context, h *slotHold, addr netip.Addr, wait time.Duration) error {
	if s == nil || h == nil {
		return nil
	}
	addr = addr.Unmap().WithZone("")
	var timer *time.Timer
	for {
		s.mu.Lock()
		if h.addr == addr || h.released {
			s.mu.Unlock()
			return nil
		}
		if s.byAddr[addr] < s.b.perAddress {
			s.unbindLocked(h)
			s.byAddr[addr]++
			h.addr = addr
			s.mu.Unlock()
			return nil
		}
		freed := s.freed
		s.mu.Unlock()
		if timer == nil {
			timer = time.NewTimer(wait)
			defer timer.Stop()
		}
		select {
		case <-freed:
		case <-timer.C:
			return fmt.Errorf("origin address %s: %w", addr, errDownloadsBusy)
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

func (s *downloadSlots) unbindLocked(h *slotHold) {
	if h.addr.IsValid() {
		decrement(s.byAddr, h.addr)
		h.addr = netip.Addr{}
		s.wakeLocked()
	}
}

// release gives back the slot h.
func (s *downloadSlots) release(h *slotHold) {
	if s == nil || h == nil {
		return
	}
	s.mu.Lock()
	s.releaseLocked(h)
	s.mu.Unlock()
}

func (s *downloadSlots) releaseLocked(h *slotHold) {
	if h.released {
		return
	}
	h.released = true
	s.running--
	decrement(s.byOrigin, h.origin)
	if h.client != "" {
		decrement(s.byClient, clientOrigin{h.client, h.origin})
		decrement(s.byClientAll, h.client)
		if h.bytes > 0 {
			if s.bytes[h.client] -= h.bytes; s.bytes[h.client] <= 0 {
				delete(s.bytes, h.client)
			}
		}
	}
	s.unbindLocked(h)
	s.wakeLocked()
}

// chargeBytes charges n more bytes written into the cache by the
// download holding h to its client, and reports whether the client's
// downloads stay within perClientBytes; when they would not, it charges
// nothing. The bytes are given back with the slot. A download without a
// client (a background refresh) or a slot already given back is not
// charged.
func (s *downloadSlots) chargeBytes(h *slotHold, n int64) bool {
	if s == nil || h == nil || h.client == "" || s.b.perClientBytes <= 0 {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if h.released {
		return true
	}
	if s.bytes[h.client]+n > s.b.perClientBytes {
		return false
	}
	s.bytes[h.client] += n
	h.bytes += n
	return true
}

// clientBytes is what client's downloads have charged (chargeBytes).
func (s *downloadSlots) clientBytes(client string) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.bytes[client]
}

// decrement counts one less of k in m, deleting it at 0.
func decrement[K comparable](m map[K]int, k K) {
	if n := m[k] - 1; n > 0 {
		m[k] = n
	} else {
		delete(m, k)
	}
}

// wakeLocked wakes every waiter to try again.
func (s *downloadSlots) wakeLocked() {
	close(s.freed)
	s.freed = make(chan struct{})
}

// relay hands the slot h, taken by the caller, to an uncached relay,
// which gives it back with end (nil slots: nothing).
func (s *downloadSlots) relay(h *slotHold) *relaySlot {
	if s == nil {
		return nil
	}
	return &relaySlot{s: s, h: h, origin: h.origin}
}

// serving makes r preemptible while it writes to its client: cut must end
// the relay at once (its fetch, and its write to the client).
func (r *relaySlot) serving(cut func()) {
	if r == nil {
		return
	}
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if !r.gone {
		r.cut = cut
		r.s.relays[r] = struct{}{}
		r.s.wakeLocked() // a waiter may take this one over once it stalls
	}
}

// end gives r's slot back, unless a waiting request took it over. It may
// be called more than once.
func (r *relaySlot) end() {
	if r == nil {
		return
	}
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	if r.gone {
		return
	}
	r.gone = true
	delete(r.s.relays, r)
	r.s.releaseLocked(r.h)
}

// preempted reports whether a waiting request took r's slot over.
func (r *relaySlot) preempted() bool {
	if r == nil {
		return false
	}
	r.s.mu.Lock()
	defer r.s.mu.Unlock()
	return r.takenOver
}

// writeStarted and writeDone bracket each write (and flush) to the relay's
// client: a write under way for relayStall means a client not reading.
func (r *relaySlot) writeStarted() {
	if r != nil {
		r.writing.Store(time.Now().UnixNano())
	}
}

func (r *relaySlot) writeDone() {
	if r != nil {
		r.writing.Store(0)
	}
}

// inUse returns the downloads counted now, in all and for origin.
func (s *downloadSlots) inUse(origin string) (all, forOrigin int) {
	if s == nil {
		return 0, 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.running, s.byOrigin[origin]
}

// slotHoldKey is the context key of the download slot a fetch runs in.
type slotHoldKey struct{}

// withSlotHold returns ctx carrying h, the download slot of the fetches
// made in it: an origin fetch counts it under the origin's address
// (countOriginAddr).
func withSlotHold(ctx context.Context, h *slotHold) context.Context {
	return context.WithValue(ctx, slotHoldKey{}, h)
}

// countOriginAddr returns ctx set to count the download slot it carries
// (withSlotHold) under the address of the origin connection each request
// made in it gets, new or reused, and so bound the downloads per origin
// address; a request whose address has no room for download_wait ends,
// and busy then returns why (errDownloadsBusy), else nil.
//
// The address is also told to the abuse controls (learnOriginAddr), whose
// fair shares of the bandwidth budget count an origin by its address.
func (p *Proxy) countOriginAddr(ctx context.Context, host string) (counted context.Context, busy func() error) {
	h, _ := ctx.Value(slotHoldKey{}).(*slotHold)
	learner, learns := p.abuse.(addressLearner)
	if (h == nil || p.slots == nil) && !learns {
		return ctx, func() error { return nil }
	}
	ctx, cancel := context.WithCancelCause(ctx)
	counted = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			ap, err := netip.ParseAddrPort(info.Conn.RemoteAddr().String())
			if err != nil {
				return
			}
			if learns {
				learner.LearnAddress(host, ap.Addr())
			}
			if h == nil || p.slots == nil {
				return
			}
			if err := p.slots.bindAddr(ctx, h, ap.Addr(), p.downloadWait); err != nil {
				cancel(err)
			}
		},
	})
	return counted, func() error {
		if err := context.Cause(ctx); errors.Is(err, errDownloadsBusy) {
			return err
		}
		return nil
	}
}

// slotCounts is what downloadSlots counts now, for tests and the status
// of the bounds: the slots of one client over all origins, of one origin
// address, and the client's requests waiting for one.
type slotCounts struct{ client, addr, waiting int }

func (s *downloadSlots) counts(client string, addr netip.Addr) slotCounts {
	if s == nil {
		return slotCounts{}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	return slotCounts{client: s.byClientAll[client], addr: s.byAddr[addr], waiting: s.waiting[client]}
}
