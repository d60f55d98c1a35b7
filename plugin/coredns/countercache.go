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

// place is where a query was answered, labelled as CoreDNS labels its own
// query metrics (coredns_dns_*): the server's address ("dns://:53"), the
// zone (the coral zone or the alias zone the name is in) and the view
// (empty without the view plugin).
type place struct {
	server, zone, view string
}

func (p place) labels(more ...string) []string {
	return append([]string{p.server, p.zone, p.view}, more...)
}

// queryKey and sourceKey are the label values of queryCount and of the
// classification and proximity counters.
type queryKey struct {
	place
	level int // -1: none
	kind  string
}

type sourceKey struct {
	place
	source string
}

var (
	queryCounters     = counterCache[queryKey]{vec: queryCount}
	classifyCounters  = counterCache[sourceKey]{vec: classifyCount}
	proximityCounters = counterCache[sourceKey]{vec: proximityCount}
)

// countQuery counts a query of kind kind answered for a resolver at level
// (-1: the answer did not depend on one).
func (p place) countQuery(level int, kind string) {
	k := queryKey{place: p, level: level, kind: kind}
	queryCounters.get(k, func() []string { return p.labels(levelLabel(level), kind) }).Inc()
}

// countClassification counts a classification by its source.
func (p place) countClassification(source string) {
	classifyCounters.get(sourceKey{p, source}, func() []string { return p.labels(source) }).Inc()
}

// countProximity counts an answer's proximity lookup by its source.
func (p place) countProximity(source string) {
	proximityCounters.get(sourceKey{p, source}, func() []string { return p.labels(source) }).Inc()
}
