package coral

import (
	"strconv"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
)

// TestCounterCache: a cached counter is the vector's own series for those
// label values; past maxCachedCounters the vector answers directly and
// the map grows no more; concurrent users agree (for the race detector).
func TestCounterCache(t *testing.T) {
	vec := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "t_total", Help: "t"}, []string{"server", "zone", "view", "level", "kind"})
	c := counterCache[queryKey]{vec: vec}
	count := func(server string, level int, kind string) {
		p := place{server: server, zone: "nyucd.test."}
		c.get(queryKey{p, level, kind}, func() []string { return p.labels(levelLabel(level), kind) }).Inc()
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for range 100 {
				count("dns://:53", 2, respAnswer)
				count("dns://:53", -1, respNXDomain)
			}
		})
	}
	wg.Wait()
	if got := counterValue(vec.WithLabelValues("dns://:53", "nyucd.test.", "", "2", "answer")); got != 400 {
		t.Errorf("level 2 answers: %v, want 400", got)
	}
	if got := counterValue(vec.WithLabelValues("dns://:53", "nyucd.test.", "", "none", "nxdomain")); got != 400 {
		t.Errorf("nxdomain without a level: %v, want 400", got)
	}
	for i := range 2 * maxCachedCounters {
		count("dns://:"+strconv.Itoa(i), 0, respAnswer)
		count("dns://:"+strconv.Itoa(i), 0, respAnswer)
	}
	if n := len(*c.m.Load()); n != maxCachedCounters {
		t.Errorf("%d cached counters, want the bound %d", n, maxCachedCounters)
	}
	if got := counterValue(vec.WithLabelValues("dns://:"+strconv.Itoa(2*maxCachedCounters-1), "nyucd.test.", "", "0", "answer")); got != 2 {
		t.Errorf("a series past the bound: %v, want 2", got)
	}
}

// An answer's proximity source is counted through the cache, into the
// series proximityCount exports.
func TestCountProximity(t *testing.T) {
	const source = "test-cache-source"
	p := place{server: "dns://:53", zone: "nyucd.test.", view: "v"}
	before := counterValue(proximityCount.WithLabelValues(p.labels(source)...))
	for range 3 {
		p.countProximity(source)
	}
	if got := counterValue(proximityCount.WithLabelValues(p.labels(source)...)); got != before+3 {
		t.Errorf("proximity source %q counted %v, want %v", source, got, before+3)
	}
	if m := proximityCounters.m.Load(); m == nil || (*m)[sourceKey{p, source}] == nil {
		t.Errorf("source %q not cached", source)
	}
}
