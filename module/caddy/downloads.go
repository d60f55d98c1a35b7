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

// downloadSlots counts downloads in progress, in all and per origin.
// A nil *downloadSlots has no bounds.
type downloadSlots struct {
	mu        sync.Mutex
	total     int // bound on all downloads
	perOrigin int // bound per origin
	running   int
	byOrigin  map[string]int
	// freed is closed (and replaced) whenever a slot is released, waking
	// every waiter to try again.
	freed chan struct{}
}

func newDownloadSlots(total, perOrigin int) *downloadSlots {
	return &downloadSlots{total: total, perOrigin: perOrigin, byOrigin: make(map[string]int), freed: make(chan struct{})}
}

func (s *downloadSlots) takeLocked(origin string) bool {
	if s.running >= s.total || s.byOrigin[origin] >= s.perOrigin {
		return false
	}
	s.running++
	s.byOrigin[origin]++
	return true
}

// acquire takes a slot for origin, waiting at most wait for one to free:
// errDownloadsBusy after that, ctx's error if ctx ends first.
func (s *downloadSlots) acquire(ctx context.Context, origin string, wait time.Duration) error {
	if s == nil {
		return nil
	}
	var timer *time.Timer
	for {
		s.mu.Lock()
		if s.takeLocked(origin) {
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

// release gives back a slot taken for origin.
func (s *downloadSlots) release(origin string) {
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
