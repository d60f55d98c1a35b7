// Package dhtmetrics exports a coraldht node's Stats and Levels as
// Prometheus metrics. The CoreDNS plugin (coredns_coral_dht_*) and the
// Caddy module (caddy_coral_dht_*) both use it, so the two halves of a
// Coral node report their DSHT nodes under the same names and labels.
package dhtmetrics

import (
	"strconv"

	"github.com/coralcdn/coral/coraldht"
	"github.com/prometheus/client_golang/prometheus"
)

// Descs are the metric descriptions under one namespace and subsystem.
// Every metric has a "node" label: the node's address.
type Descs struct {
	messages, drops, timeouts, refused, lookups, stored, keys *prometheus.Desc
	contacts, clusterLog, changes, joined                     *prometheus.Desc
	keyDatagrams, keyPrimary                                  *prometheus.Desc
}

// New describes the metrics namespace_subsystem_dht_*.
func New(namespace, subsystem string) *Descs {
	desc := func(name, help string, labels ...string) *prometheus.Desc {
		return prometheus.NewDesc(prometheus.BuildFQName(namespace, subsystem, "dht_"+name), help, append([]string{"node"}, labels...), nil)
	}
	return &Descs{
		messages:   desc("messages_total", "DSHT datagrams by direction (in, out), kind (request, reply) and message type.", "direction", "kind", "type"),
		drops:      desc("drops_total", "DSHT datagrams dropped without a reply, by reason.", "reason"),
		timeouts:   desc("timeouts_total", "DSHT RPCs that went unanswered."),
		refused:    desc("refused_total", "DSHT requests answered with a refusal."),
		lookups:    desc("lookups_total", "DSHT lookups run by this node (per level)."),
		stored:     desc("stored_values", "Values this node stores for others."),
		keys:       desc("stored_keys", "Distinct keys this node stores values for."),
		contacts:   desc("routing_table_contacts", "Routing-table contacts by level.", "level"),
		clusterLog: desc("cluster_log2_size", "Estimated log2 size of this node's cluster by level.", "level"),
		changes:    desc("cluster_changes_total", "Cluster changes (joins and splits) over all levels."),
		joined:     desc("joined", "1 once the node has joined the network."),
		// The key label is an installed key's fingerprint (never the key)
		// or "none": at most coraldht.KeyringSize+1 values per node.
		keyDatagrams: desc("network_key_datagrams_total", "DSHT datagrams accepted per installed network key (by fingerprint), and those no installed key verifies (key=\"none\", also counted as drops_total{reason=\"bad_auth\"}).", "key"),
		keyPrimary:   desc("network_key_primary", "One series per installed network key (by fingerprint): 1 for the primary, which the node sends with, 0 for keys only accepted.", "key"),
	}
}

// Describe sends every description.
func (d *Descs) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{d.messages, d.drops, d.timeouts, d.refused, d.lookups, d.stored,
		d.keys, d.contacts, d.clusterLog, d.changes, d.joined, d.keyDatagrams, d.keyPrimary} {
		ch <- x
	}
}

// Collect sends the current values for one node, labelled node.
func (d *Descs) Collect(ch chan<- prometheus.Metric, node string, n *coraldht.Node, joined bool) {
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, float64(v), append([]string{node}, labels...)...)
	}
	gauge := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.GaugeValue, v, append([]string{node}, labels...)...)
	}
	s := n.Stats()
	for _, m := range []struct {
		dir, kind string
		c         coraldht.MessageCounts
	}{{"in", "request", s.RequestsIn}, {"out", "request", s.RequestsOut}, {"in", "reply", s.RepliesIn}, {"out", "reply", s.RepliesOut}} {
		for _, t := range []struct {
			name string
			v    uint64
		}{{"ping", m.c.Ping}, {"find_node", m.c.FindNode}, {"get", m.c.Get}, {"put_probe", m.c.PutProbe}, {"store", m.c.Store}, {"members", m.c.Members}, {"app", m.c.App}} {
			counter(d.messages, t.v, m.dir, m.kind, t.name)
		}
	}
	dr := s.Drops
	for _, r := range coraldht.DropReasons() {
		counter(d.drops, dr.Count(r), r.String())
	}
	for _, k := range s.Keys {
		counter(d.keyDatagrams, k.Accepted, k.Fingerprint)
		primary := 0.0
		if k.Primary {
			primary = 1
		}
		gauge(d.keyPrimary, primary, k.Fingerprint)
	}
	counter(d.keyDatagrams, dr.BadAuth, "none")
	counter(d.timeouts, s.Timeouts)
	counter(d.refused, s.Refused)
	counter(d.lookups, s.Lookups)
	gauge(d.stored, float64(s.StoredValues))
	gauge(d.keys, float64(s.StoredKeys))
	counter(d.changes, s.ClusterChanges)
	for _, li := range n.Levels() {
		l := strconv.Itoa(li.Level)
		gauge(d.contacts, float64(li.Contacts), l)
		gauge(d.clusterLog, li.Cluster.LogSize, l)
	}
	j := 0.0
	if joined {
		j = 1
	}
	gauge(d.joined, j)
}
