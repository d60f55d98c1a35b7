package coralcaddy

import (
	"context"
	"errors"
	"sync"
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
// download.holders in proxy.go):
//
//   - a download no client is waiting for any more is cancelled, and its
//     slot freed, unless it is nearly done (nearlyDone); a peer proxy
//     streaming the object from this one is a client like any other;
//   - one client address (an IPv4 address or IPv6 /64, as for rate_limit)
//     holds at most max_downloads_per_client of one origin's slots at once,
//     counting the downloads it started that still run.
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

// downloadSlots counts downloads in progress, in all, per origin, and per
// client address and origin. A nil *downloadSlots has no bounds.
type downloadSlots struct {
	mu        sync.Mutex
	total     int // bound on all downloads
	perOrigin int // bound per origin
	perClient int // bound per client address and origin
	running   int
	byOrigin  map[string]int
	byClient  map[clientOrigin]int
	// freed is closed (and replaced) whenever a slot is released, waking
	// every waiter to try again.
	freed chan struct{}
}

// clientOrigin is a client address (rateKey, as a string; "" for none)
// and an origin.
type clientOrigin struct{ client, origin string }

func newDownloadSlots(total, perOrigin, perClient int) *downloadSlots {
	return &downloadSlots{total: total, perOrigin: perOrigin, perClient: perClient,
		byOrigin: make(map[string]int), byClient: make(map[clientOrigin]int), freed: make(chan struct{})}
}

func (s *downloadSlots) takeLocked(origin, client string) bool {
	co := clientOrigin{client, origin}
	if s.running >= s.total || s.byOrigin[origin] >= s.perOrigin || client != "" && s.byClient[co] >= s.perClient {
		return false
	}
	s.running++
	s.byOrigin[origin]++
	if client != "" {
		s.byClient[co]++
	}
	return true
}

// acquire takes a slot of origin for client ("": not bounded per client),
// waiting at most wait for one to free: errDownloadsBusy after that, ctx's
// error if ctx ends first.
func (s *downloadSlots) acquire(ctx context.Context, origin, client string, wait time.Duration) error {
	if s == nil {
		return nil
	}
	var timer *time.Timer
	for {
		s.mu.Lock()
		if s.takeLocked(origin, client) {
			s.mu.Unlock()
			if timer != nil {
				timer.Stop()
			}
			return nil
		}
		freed := s.freed
		s.mu.Unlock()
		if timer == nil {
			if wait <= 0 {
				return errDownloadsBusy
			}
			timer = time.NewTimer(wait)
			defer timer.Stop()
		}
		select {
		case <-freed:
		case <-timer.C:
			return errDownloadsBusy
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}

// release gives back a slot taken for origin and client.
func (s *downloadSlots) release(origin, client string) {
	if s == nil {
		return
	}
	s.mu.Lock()
	s.running--
	if n := s.byOrigin[origin] - 1; n > 0 {
		s.byOrigin[origin] = n
	} else {
		delete(s.byOrigin, origin)
	}
	if co := (clientOrigin{client, origin}); client != "" {
		if n := s.byClient[co] - 1; n > 0 {
			s.byClient[co] = n
		} else {
			delete(s.byClient, co)
		}
	}
	close(s.freed)
	s.freed = make(chan struct{})
	s.mu.Unlock()
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
