package coral

import (
	"strconv"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/internal/dhtmetrics"
	"github.com/coredns/coredns/plugin"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/coralcdn/coral/coraldht/host"
)

// The metrics, documented in README.md (Metrics). They are registered with
// the registry the prometheus plugin serves when a coral block is first set
// up (registerMetrics), not when the binary starts: a CoreDNS built with
// this plugin whose Corefile has no coral block exports no coredns_coral_*
// series at all, so no alert about coral fires on it. Per-query metrics
// carry CoreDNS's own labels (server, zone, view; see place).

// opts names a coredns_coral_ metric.
func opts(name, help string) prometheus.Opts {
	return prometheus.Opts{Namespace: plugin.Namespace, Subsystem: "coral", Name: name, Help: help}
}

// newCounter, newGauge and newHistogram describe a coredns_coral_ metric
// with labels.
func newCounter(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: plugin.Namespace, Subsystem: "coral", Name: name, Help: help}, labels)
}

func newGauge(name, help string, labels ...string) *prometheus.GaugeVec {
	return prometheus.NewGaugeVec(prometheus.GaugeOpts{Namespace: plugin.Namespace, Subsystem: "coral", Name: name, Help: help}, labels)
}

func newHistogram(name, help string, buckets []float64, labels ...string) *prometheus.HistogramVec {
	return prometheus.NewHistogramVec(prometheus.HistogramOpts{Namespace: plugin.Namespace, Subsystem: "coral", Name: name, Help: help, Buckets: buckets}, labels)
}

// placeLabels are the labels of per-query metrics (see place).
var placeLabels = []string{"server", "zone", "view"}

func withPlace(more ...string) []string { return append(placeLabels[:3:3], more...) }

var (
	queryCount = newCounter("queries_total",
		"Queries answered, by the resolver's level (none when the answer did not depend on it) and response kind (answer, referral, nodata, nxdomain, yxdomain, formerr, refused, notimp, badvers, servfail, truncated).",
		withPlace("level", "kind")...)

	classifyCount = newCounter("classifications_total",
		"Resolver classifications by source: classify (a configured prefix), cache, probe (the query waited for a probe), timeout (the probe did not answer in time: level 0), skipped (the share of probe_limit the query's proof may use was in flight: level 0), unproven (the source had not shown it is there: no probe), limited (probe_rate spent: no probe), none (no probing).",
		withPlace("source")...)

	proximityCount = newCounter("proximity_total",
		"Answers by what their proxies and name servers were ranked on: hints (nodes that left locality hints near the client's last hops or /24 first), no_hints (mapped, no hint found), pending (the mapping outlasted proximity_wait: the choice without a target), skipped (the share of proximity_limit the query's proof may use was in flight), unproven (the source had not shown it is there: no mapping), limited (probe_rate spent), failed (the last mapping failed), no_raw_socket (this process may not trace: the choice without a target).",
		withPlace("source")...)

	rrlDropped = newCounter("rrl_dropped_total",
		"UDP responses not sent because their client network was over its rrl rate, by category (responses, nxdomains, errors).",
		withPlace("category")...)

	rrlSlipped = newCounter("rrl_slipped_total",
		"UDP responses over the rrl rate sent as an empty truncated response instead (slip), by category (responses, nxdomains, errors).",
		withPlace("category")...)

	staleAnswers = newCounter("sync_answers_total",
		"Answers that had to ping proxies synchronously because the last sweep found none live.",
		placeLabels...)

	probeCount = newCounter("probes_total", "RTT probes of resolvers by outcome (ok, timeout, error).", "outcome")

	probesSkipped = prometheus.NewCounter(prometheus.CounterOpts(opts("probes_skipped_total",
		"RTT probes of resolvers not started because the share of probe_limit the query's proof may use was in flight: a new resolver was placed at level 0, a known one kept its old measurement.")))

	probesRefused = newCounter("probes_refused_total",
		"RTT probes of resolvers not started for the query's source, by reason: unproven (it had not shown it is there: no valid server cookie, not TCP, not familiar), limited (probe_rate spent for its prefix or the probed one).",
		"reason")

	probeDuration = newHistogram("probe_duration_seconds", "Time taken by RTT probes of resolvers, by outcome.", plugin.TimeBuckets, "outcome")

	proximityMappings = newHistogram("proximity_mapping_duration_seconds",
		"Time taken by proximity mappings (trace toward the client and hint lookups), by outcome (hints, no_hints, failed).",
		plugin.TimeBuckets, "outcome")

	traceProbes = prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: plugin.Namespace, Subsystem: "coral",
		Name:    "proximity_trace_echo_requests",
		Help:    "Echo requests a proximity mapping sent toward its client: one to learn a new client's distance, then the trace's (32 without a distance, proximity_hops+5 with one).",
		Buckets: []float64{1, 2, 4, 8, 12, 16, 24, 33, 40}})

	liveProxies = newGauge("live_proxies",
		"HTTP proxies of this node's cluster heard from within live_within at the last sweep, by node and level.", "node", "level")

	loadedProxies = newGauge("loaded_proxies",
		"Live HTTP proxies of this node's cluster whose published load was at least load_threshold at the last sweep, by node and level.", "node", "level")

	loadAnswers = newCounter("load_answers_total",
		"Answers that load moved: moved (from a level below the resolver's, its own level's proxies all loaded), all_loaded (every live proxy loaded: answered with loaded ones).",
		withPlace("outcome")...)

	liveNameservers = newGauge("live_nameservers",
		"Coral name servers of this node's cluster heard from within live_within at the last sweep, by node and level.", "node", "level")
)

// registerMetrics registers every coral metric with the default registry
// (the one the prometheus plugin serves); once per process, at the first
// coral block's setup.
func registerMetrics() {
	metricsOnce.Do(func() {
		prometheus.MustRegister(queryCount, classifyCount, proximityCount, rrlDropped, rrlSlipped, staleAnswers,
			probeCount, probesSkipped, probesRefused, probeDuration, proximityMappings, traceProbes, liveProxies, liveNameservers, loadedProxies, loadAnswers,
			reloadSuccess, reloadTime, reloadSuccessTime, reloadFailures, configInfo, drainingGauge, dhtCollector{})
	})
}

var metricsOnce sync.Once

func observeProbe(outcome string, d time.Duration) {
	probeCount.WithLabelValues(outcome).Inc()
	probeDuration.WithLabelValues(outcome).Observe(d.Seconds())
}

func recordLive(node string, set *liveSet, t *tracker) {
	now := t.now()
	joined := t.joined == nil || t.joined()
	threshold := t.loadThreshold
	countLoaded := func(list []coraldht.NodeInfo) float64 {
		n := 0
		for i := range list {
			if threshold > 0 && joined && (list[i].Self || now.Sub(list[i].LastHeard) <= t.liveWithin) && loaded(&list[i], threshold) {
				n++
			}
		}
		return float64(n)
	}
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
		loadedProxies.WithLabelValues(node, l).Set(countLoaded(set.proxy[lvl]))
		liveNameservers.WithLabelValues(node, l).Set(count(set.dns[lvl]))
	}
}

// dhtCollector exports the Stats of every node running in the process
// (host.Running) as coredns_coral_dht_* metrics, read at scrape time.
type dhtCollector struct{}

var dhtDescs = dhtmetrics.New(plugin.Namespace, "coral")

func (dhtCollector) Describe(ch chan<- *prometheus.Desc) { dhtDescs.Describe(ch) }

func (dhtCollector) Collect(ch chan<- prometheus.Metric) {
	for _, inst := range host.Running() {
		dhtDescs.Collect(ch, inst.Listen().String(), inst.Node(), inst.Joined())
	}
}
