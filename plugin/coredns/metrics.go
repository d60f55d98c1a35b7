package coral

import (
	"strconv"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coredns/coredns/plugin"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promauto"
)

var (
	queryCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "coral",
		Name:      "queries_total",
		Help:      "Queries answered, by the resolver's level (none when the answer did not depend on it) and response kind (answer, referral, nodata, nxdomain, yxdomain, formerr).",
	}, []string{"server", "level", "kind"})

	classifyCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "coral",
		Name:      "classifications_total",
		Help:      "Resolver classifications by source: classify (a configured prefix), cache, probe (the query waited for a probe), timeout (the probe did not answer in time: level 0), none (no probing).",
	}, []string{"source"})

	probeCount = promauto.NewCounterVec(prometheus.CounterOpts{
		Namespace: plugin.Namespace,
		Subsystem: "coral",
		Name:      "probes_total",
		Help:      "RTT probes of resolvers by outcome (ok, timeout, error).",
	}, []string{"outcome"})

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
	count := func(list []coraldht.NodeInfo) float64 {
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

// dhtCollector exports the Stats of every node in the registry as
// coredns_coral_dht_* metrics, read at scrape time.
type dhtCollector struct{}

var (
	dhtDescs = map[string]*prometheus.Desc{}
	dhtOnce  sync.Once
)

func dhtDesc(name, help string, labels ...string) *prometheus.Desc {
	d, ok := dhtDescs[name]
	if !ok {
		d = prometheus.NewDesc(prometheus.BuildFQName(plugin.Namespace, "coral", "dht_"+name), help, append([]string{"node"}, labels...), nil)
		dhtDescs[name] = d
	}
	return d
}

var (
	descMessages   = dhtDesc("messages_total", "DSHT datagrams by direction (in, out), kind (request, reply) and message type.", "direction", "kind", "type")
	descDrops      = dhtDesc("drops_total", "DSHT datagrams dropped without a reply, by reason.", "reason")
	descTimeouts   = dhtDesc("timeouts_total", "DSHT RPCs that went unanswered.")
	descRefused    = dhtDesc("refused_total", "DSHT requests answered with a refusal.")
	descLookups    = dhtDesc("lookups_total", "DSHT lookups run by this node (per level).")
	descStored     = dhtDesc("stored_values", "Values this node stores for others.")
	descKeys       = dhtDesc("stored_keys", "Distinct keys this node stores values for.")
	descContacts   = dhtDesc("routing_table_contacts", "Routing-table contacts by level.", "level")
	descClusterLog = dhtDesc("cluster_log2_size", "Estimated log2 size of this node's cluster by level.", "level")
	descChanges    = dhtDesc("cluster_changes_total", "Cluster changes (joins and splits) over all levels.")
	descJoined     = dhtDesc("joined", "1 once the node has joined the network.")
)

func (dhtCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range dhtDescs {
		ch <- d
	}
}

func (dhtCollector) Collect(ch chan<- prometheus.Metric) {
	registry.Lock()
	entries := make([]*nodeEntry, 0, len(registry.nodes))
	for _, e := range registry.nodes {
		entries = append(entries, e)
	}
	registry.Unlock()
	counter := func(d *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v), labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}
	for _, e := range entries {
		node := e.listen
		s := e.node.Stats()
		for _, m := range []struct {
			dir, kind string
			c         coraldht.MessageCounts
		}{{"in", "request", s.RequestsIn}, {"out", "request", s.RequestsOut}, {"in", "reply", s.RepliesIn}, {"out", "reply", s.RepliesOut}} {
			for _, t := range []struct {
				name string
				v    uint64
			}{{"ping", m.c.Ping}, {"find_node", m.c.FindNode}, {"get", m.c.Get}, {"put_probe", m.c.PutProbe}, {"store", m.c.Store}, {"members", m.c.Members}} {
				counter(descMessages, t.v, node, m.dir, m.kind, t.name)
			}
		}
		d := s.Drops
		for _, r := range []struct {
			name string
			v    uint64
		}{{"oversize", d.Oversize}, {"bad_auth", d.BadAuth}, {"malformed", d.Malformed}, {"stale", d.Stale}, {"replay", d.Replay},
			{"queue_full", d.QueueFull}, {"unsolicited", d.Unsolicited}, {"self", d.Self}, {"misdirected", d.Misdirected}} {
			counter(descDrops, r.v, node, r.name)
		}
		counter(descTimeouts, s.Timeouts, node)
		counter(descRefused, s.Refused, node)
		counter(descLookups, s.Lookups, node)
		gauge(descStored, float64(s.StoredValues), node)
		gauge(descKeys, float64(s.StoredKeys), node)
		counter(descChanges, s.ClusterChanges, node)
		for _, li := range e.node.Levels() {
			l := strconv.Itoa(li.Level)
			gauge(descContacts, float64(li.Contacts), node, l)
			gauge(descClusterLog, float64(li.Cluster.LogSize), node, l)
		}
		j := 0.0
		if e.joined.Load() {
			j = 1
		}
		gauge(descJoined, j, node)
	}
}

// registerDHTCollector adds the collector to the default registry, which
// CoreDNS's prometheus plugin serves; once per process.
func registerDHTCollector() {
	dhtOnce.Do(func() { prometheus.MustRegister(dhtCollector{}) })
}
