package coral

import (
	"maps"
	"sync"
	"sync/atomic"

	"github.com/prometheus/client_golang/prometheus"
)

// counterCache keeps the counters of a CounterVec by their label values
// for the query path. CounterVec.WithLabelValues hashes the values byte by
// byte and takes the vector's read lock, whose cache line the two CPUs
// then pass back and forth: 2.8 % of CoreDNS's CPU under load for the two
// counters every query increments. (The proximity source's counter, which
// every answer that picks proxies increments, goes through it as well.)
// Here a query reads a copy-on-write map without a lock. The label values
// come from small fixed sets (the server addresses of the Corefile, the
// levels, the response kinds, the classification and proximity sources);
// past maxCachedCounters entries a lookup goes to the vector as before, so
// the map stays bounded whatever happens. The
// counters are never deleted from the vectors, so a cached one stays the
// one the vector exports.
type counterCache[K comparable] struct {
	vec *prometheus.CounterVec
	m   atomic.Pointer[map[K]prometheus.Counter]
	mu  sync.Mutex // serializes copies
}

const maxCachedCounters = 256

// get returns the counter for key k, whose label values are labels().
func (c *counterCache[K]) get(k K, labels func() []string) prometheus.Counter {
	if m := c.m.Load(); m != nil {
		if ctr, ok := (*m)[k]; ok {
			return ctr
		}
	}
	ctr := c.vec.WithLabelValues(labels()...)
	c.mu.Lock()
	defer c.mu.Unlock()
	var old map[K]prometheus.Counter
	if m := c.m.Load(); m != nil {
		old = *m
	}
	if len(old) >= maxCachedCounters {
		return ctr
	}
	next := make(map[K]prometheus.Counter, len(old)+1)
	maps.Copy(next, old)
	next[k] = ctr
	c.m.Store(&next)
	return ctr
}

// queryLabels are queryCount's label values.
type queryLabels struct {
	server string
	level  int // -1: none
	kind   string
}

var (
	queryCounters     = counterCache[queryLabels]{vec: queryCount}
	classifyCounters  = counterCache[string]{vec: classifyCount}
	proximityCounters = counterCache[string]{vec: proximityCount}
)

// countQuery counts a query of kind kind answered on server for a resolver
// at level (-1: the answer did not depend on one).
func countQuery(server string, level int, kind string) {
	k := queryLabels{server: server, level: level, kind: kind}
	queryCounters.get(k, func() []string { return []string{server, levelLabel(level), kind} }).Inc()
}

// countClassification counts a classification by its source.
func countClassification(source string) {
	classifyCounters.get(source, func() []string { return []string{source} }).Inc()
}

// countProximity counts an answer's proximity lookup by its source.
func countProximity(source string) {
	proximityCounters.get(source, func() []string { return []string{source} }).Inc()
}
