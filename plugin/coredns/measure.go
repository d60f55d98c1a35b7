package coral

import (
	"net/netip"
	"sync"
	"time"
)

// measurements are what this server measured per prefix (/24, IPv6 /48) of
// resolvers and clients: their RTTs (classify.go) and their mappings
// (proximity.go). Both follow one rule: at most one measurement of a
// prefix is in flight, and later queries from the prefix wait for it
// instead of starting another; only the first query from a prefix waits,
// and a cached measurement older than its freshness is redone in the
// background; a measurement runs detached from the query that started it,
// so its result fills the cache even when that query stopped waiting; the
// cache keeps at most max prefixes, dropping the oldest of a sample.
type measurements[E any] struct {
	mu       sync.RWMutex
	entries  map[netip.Prefix]measured[E]
	inflight map[netip.Prefix]*measuring[E]
	max      int
}

// measured is one measurement: ok false when it failed (retried sooner).
type measured[E any] struct {
	v  E
	ok bool
	at time.Time
}

// measuring is a measurement in flight.
type measuring[E any] struct {
	done chan struct{}
	m    measured[E]
}

func newMeasurements[E any](max int) *measurements[E] {
	return &measurements[E]{entries: make(map[netip.Prefix]measured[E]), inflight: make(map[netip.Prefix]*measuring[E]), max: max}
}

func (c *measurements[E]) len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.entries)
}

// get returns p's cached measurement.
func (c *measurements[E]) get(p netip.Prefix) (measured[E], bool) {
	c.mu.RLock()
	m, ok := c.entries[p]
	c.mu.RUnlock()
	return m, ok
}

// due reports whether m, measured at m.at, should be redone at now.
func (m measured[E]) due(now time.Time, fresh, failedFor time.Duration) bool {
	age := now.Sub(m.at)
	return m.ok && age > fresh || !m.ok && age > failedFor
}

// start returns the measurement in flight for p or, when there is none
// and admit (told how many are in flight) allows one, starts run for it
// on wg. run's result is kept unless keep says no (the configuration has
// stopped). Without a measurement it returns nil and admit's verdict.
func (c *measurements[E]) start(p netip.Prefix, admit func(inflight int) gateVerdict, wg *sync.WaitGroup, run func() measured[E], keep func() bool) (*measuring[E], gateVerdict) {
	c.mu.Lock()
	if call, ok := c.inflight[p]; ok {
		c.mu.Unlock()
		return call, gateAllowed
	}
	if v := admit(len(c.inflight)); v != gateAllowed {
		c.mu.Unlock()
		return nil, v
	}
	call := &measuring[E]{done: make(chan struct{})}
	c.inflight[p] = call
	c.mu.Unlock()
	wg.Go(func() {
		m := run()
		c.mu.Lock()
		if keep() {
			if _, exists := c.entries[p]; !exists && len(c.entries) >= c.max {
				c.evictOldestLocked()
			}
			c.entries[p] = m
		}
		delete(c.inflight, p)
		c.mu.Unlock()
		call.m = m
		close(call.done)
	})
	return call, gateAllowed
}

// evictOldestLocked drops the oldest of a sample of the entries, so the
// cache stays bounded without a full scan on every insert.
func (c *measurements[E]) evictOldestLocked() {
	var oldest netip.Prefix
	var at time.Time
	n := 0
	for p, m := range c.entries { // map order is random: a sample
		if n == 0 || m.at.Before(at) {
			oldest, at = p, m.at
		}
		if n++; n == 32 {
			break
		}
	}
	delete(c.entries, oldest)
}
