package coralcaddy

import (
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

// Load-aware redirection: the proxy publishes its load with its liveness
// (coraldht.Node.SetLoad puts it on every datagram the node sends), and
// the DNS servers weigh it with proximity (plugin/coredns, load_threshold).
// Each part is a percent of what this node may carry:
//
//   - bandwidth: the bytes served in the bandwidth budget's current window,
//     of the budget (0 without bandwidth_budget);
//   - requests: the requests coral_proxy is serving now, of load_requests;
//   - disk: the share of cache_size that the cache's file system cannot
//     provide (the bound the cache lowered itself to when the disk was
//     found full), since a proxy that cannot store relays uncached and
//     sends every client to the origin.
//
// With several coral_proxy handlers in one process each part is the
// largest of theirs.

// loadEvery is how often the load is computed and handed to the node: a
// DNS server hears it at its next contact with the node (every
// check_interval at most, 5 s by default), so publishing more often would
// not reach it sooner.
const loadEvery = time.Second

// defaultLoadRequests: 1024 requests in flight count as a full proxy. A
// hit takes well under a millisecond of CPU; a thousand requests under
// way at once means clients waiting on downloads or on their own slow
// links, and a node that would serve new clients only after them.
const defaultLoadRequests = 1024

// proxyLoad is the load of the coral_proxy handlers at now.
func proxyLoad(handlers []*Handler, now time.Time) coraldht.Load {
	l := coraldht.Load{Known: true}
	for _, h := range handlers {
		if b := h.abuse; b != nil && b.Budget != nil {
			l.Bandwidth = max(l.Bandwidth, coraldht.LoadPercent(100*float64(b.Budget.Used(now))/float64(b.Budget.Limit())))
		}
		limit := h.LoadRequests
		if limit <= 0 {
			limit = defaultLoadRequests
		}
		if h.inflight != nil {
			l.Requests = max(l.Requests, coraldht.LoadPercent(100*float64(h.inflight.Load())/float64(limit)))
		}
		if h.store != nil {
			st := h.store.Stats()
			if st.DiskLimitBytes > 0 && st.MaxBytes > 0 {
				l.Disk = max(l.Disk, coraldht.LoadPercent(100*(1-float64(st.DiskLimitBytes)/float64(st.MaxBytes))))
			}
		}
	}
	return l
}

// The publisher: one goroutine per process while a coral app runs.
var loadPublisher struct {
	mu   sync.Mutex
	stop chan struct{}
	done chan struct{}
}

// publishLoad computes the load now and hands it to the running node.
func publishLoad(now time.Time) {
	node := runningNode()
	if node == nil {
		return
	}
	_, handlers := runningAll()
	if len(handlers) == 0 {
		node.SetLoad(coraldht.Load{})
		return
	}
	node.SetLoad(proxyLoad(handlers, now))
}

// startLoadPublisher starts the publisher unless it runs (App.Start).
func startLoadPublisher() {
	p := &loadPublisher
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.stop != nil {
		return
	}
	stop, done := make(chan struct{}), make(chan struct{})
	p.stop, p.done = stop, done
	go func() {
		defer close(done)
		tick := time.NewTicker(loadEvery)
		defer tick.Stop()
		for {
			publishLoad(time.Now())
			select {
			case <-stop:
				return
			case <-tick.C:
			}
		}
	}()
}

// stopLoadPublisher stops the publisher once no coral app runs
// (App.Cleanup).
func stopLoadPublisher() {
	if apps, _ := runningAll(); len(apps) > 0 {
		return
	}
	p := &loadPublisher
	p.mu.Lock()
	stop, done := p.stop, p.done
	p.stop, p.done = nil, nil
	p.mu.Unlock()
	if stop != nil {
		close(stop)
		<-done
	}
}
