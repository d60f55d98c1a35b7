package coral

import (
	"strconv"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/internal/dhtmetrics"
	"github.com/coredns/coredns/plugin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"

	"github.com/coralcdn/coral/coraldht/host"
)

var (
	queryCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "coral",
		Name:      "queries_total",
		Help:      "Queries answered, by the resolver's level (none when the answer did not depend on it) and response kind (answer, referral, nodata, nxdomain, yxdomain, formerr, refused, notimp, badvers, servfail).",
	}, []string{"server", "level", "kind"})

	classifyCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "coral",
		Name:      "classifications_total",
		Help:      "Resolver classifications by source: classify (a configured prefix), cache, probe (the query waited for a probe), timeout (the probe did not answer in time: level 0), skipped (probe_limit probes were in flight: level 0), none (no probing).",
	}, []string{"source"})

	probeCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "coral",
		Name:      "probes_total",
		Help:      "RTT probes of resolvers by outcome (ok, timeout, error).",
	}, []string{"outcome"})

	proximityCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "coral",
		Name:      "proximity_total",
		Help:      "Answers by what their proxies and name servers were ranked on: hints (nodes that left locality hints near the client's last hops or /24 first), no_hints (mapped, no hint found), pending (the mapping outlasted proximity_wait: the choice without a target), skipped (proximity_limit mappings in flight), failed (the last mapping failed), no_raw_socket (this process may not trace: the choice without a target).",
	}, []string{"source"})

	proximityMappings = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: plugin.Namespace,
		Subsystem: "coral",
		Name:      "proximity_mapping_duration_seconds",
		Buckets:   plugin.TimeBuckets,
		Help:      "Time taken by proximity mappings (trace toward the client and hint lookups), by outcome (hints, no_hints, failed).",
	}, []string{"outcome"})

	probesSkipped = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "coral",
		Name:      "probes_skipped_total",
		Help:      "RTT probes of resolvers not started because probe_limit probes were in flight: a new resolver was placed at level 0, a known one kept its old measurement.",
	})

	probeDuration = promauto.NewHistogramVec(prometheus.HistogramOpts{
		Namespace: plugin.Namespace,
		Subsystem: "coral",
		Name:      "probe_duration_seconds",
		Buckets:   plugin.TimeBuckets,
		Help:      "Time taken by RTT probes of resolvers, by outcome.",
	}, []string{"outcome"})

	liveProxies = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "coral",
		Name:      "live_proxies",
		Help:      "HTTP proxies of this node's cluster heard from within live_within at the last sweep, by node and level.",
	}, []string{"node", "level"})

	liveNameservers = promauto.NewGaugeVec(prometheus.GaugeOpts{
		Namespace: plugin.Namespace,
		Subsystem: "coral",
		Name:      "live_nameservers",
		Help:      "Coral name servers of this node's cluster heard from within live_within at the last sweep, by node and level.",
	}, []string{"node", "level"})

	rrlDropped = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "coral",
		Name:      "rrl_dropped_total",
		Help:      "UDP responses not sent because their client network was over its rrl rate, by category (responses, nxdomains, errors).",
	}, []string{"server", "category"})

	rrlSlipped = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "coral",
		Name:      "rrl_slipped_total",
		Help:      "UDP responses over the rrl rate sent as an empty truncated response instead (slip), by category (responses, nxdomains, errors).",
	}, []string{"server", "category"})

	staleAnswers = promauto.NewCounter(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "coral",
		Name:      "sync_answers_total",
		Help:      "Answers that had to ping proxies synchronously because the last sweep found none live.",
	})
)

func observeProbe(outcome string, d time.Duration) {
	probeCount.WithLabelValues(outcome).Inc()
	probeDuration.WithLabelValues(outcome).Observe(d.Seconds())
}

func recordLive(node string, set *liveSet, t *tracker) {
	now := t.now()
	joined := t.joined == nil || t.joined()
	count := func(list []coraldht.NodeInfo) float64 {
		if !joined {
			// A node that has not joined (a wrong network key, its
			// bootstrap unreachable) answers from nobody it has heard
			// first-hand: whatever an earlier sweep left must not read as
			// live proxies.
			return 0
		}
		n := 0
		for _, ni := range list {
			if ni.Self || now.Sub(ni.LastHeard) <= t.liveWithin {
				n++
			}
		}
		return float64(n)
	}
	for lvl := range set.proxy {
		l := strconv.Itoa(lvl)
		liveProxies.WithLabelValues(node, l).Set(count(set.proxy[lvl]))
		liveNameservers.WithLabelValues(node, l).Set(count(set.dns[lvl]))
	}
}

// dhtCollector exports the Stats of every node running in the process
// (host.Running) as coredns_coral_dht_* metrics, read at scrape time.
type dhtCollector struct{}

var (
	dhtDescs = dhtmetrics.New(plugin.Namespace, "coral")
	dhtOnce  sync.Once
)

func (dhtCollector) Describe(ch chan<- *prometheus.Desc) { dhtDescs.Describe(ch) }

func (dhtCollector) Collect(ch chan<- prometheus.Metric) {
	for _, inst := range host.Running() {
		dhtDescs.Collect(ch, inst.Listen().String(), inst.Node(), inst.Joined())
	}
}

// registerDHTCollector adds the collector to the default registry, which
// CoreDNS's prometheus plugin serves; once per process.
func registerDHTCollector() {
	dhtOnce.Do(func() { prometheus.MustRegister(dhtCollector{}) })
}
