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
	abuse, suspects, truncated, verifications                 *prometheus.Desc
	revocationList, certExpiry                                *prometheus.Desc
}

// topSuspects is how many suspect prefixes of a node are exported: with
// the kinds of event, the cardinality of suspect_events_total stays under
// topSuspects × len(coraldht.AbuseKinds()) per node, whatever attacks it.
const topSuspects = 10

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
		abuse:        desc("abuse_events_total", "Events that mark a DSHT peer as suspect (claim_mismatch, verify_failed, contact_refused, quota, unproven, identity), over all sources.", "event"),
		// The prefix label is one of the node's ten most suspect source
		// prefixes (/24, /48): bounded, and a prefix that leaves the ten
		// stops being exported.
		suspects:       desc("suspect_events_total", "Suspect events of the ten source prefixes (/24, /48) with the most, by event.", "prefix", "event"),
		truncated:      desc("truncated_replies_total", "Replies truncated toward sources that had not proven their address (first contacts beyond the padding budget, or spoofed requests)."),
		verifications:  desc("verifications_total", "Pings sent to prove the address a request claimed, or to measure a cluster claim."),
		revocationList: desc("identity_revocation_list", "Node identity mode: the number of the revocation list installed (0: none)."),
		certExpiry:     desc("identity_certificate_expiry_seconds", "Node identity mode: when this node's certificate expires, Unix seconds."),
	}
}

// Describe sends every description.
func (d *Descs) Describe(ch chan<- *prometheus.Desc) {
	for _, x := range []*prometheus.Desc{d.messages, d.drops, d.timeouts, d.refused, d.lookups, d.stored,
		d.keys, d.contacts, d.clusterLog, d.changes, d.joined, d.keyDatagrams, d.keyPrimary,
		d.abuse, d.suspects, d.truncated, d.verifications, d.revocationList, d.certExpiry} {
		ch <- x
	}
}

// Collect sends the current values for one node, labelled node.
func (d *Descs) Collect(ch chan<- prometheus.Metric, node string, n *coraldht.Node, joined bool) {
	counterf := func(desc *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(desc, prometheus.CounterValue, v, append([]string{node}, labels...)...)
	}
	counter := func(desc *prometheus.Desc, v uint64, labels ...string) { counterf(desc, float64(v), labels...) }
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
	d.collectDefences(counterf, gauge, s, n)
}

// collectDefences sends what the node's defences against members saw
// (issue 35) and its identity.
func (d *Descs) collectDefences(counter, gauge func(*prometheus.Desc, float64, ...string), s coraldht.Stats, n *coraldht.Node) {
	for _, k := range coraldht.AbuseKinds() {
		counter(d.abuse, float64(s.Abuse.Count(k)), k.String())
	}
	sus := n.Suspects()
	for _, x := range sus[:min(len(sus), topSuspects)] {
		for _, k := range coraldht.AbuseKinds() {
			if v := x.Events.Count(k); v > 0 {
				counter(d.suspects, float64(v), x.Prefix.String(), k.String())
			}
		}
	}
	counter(d.truncated, float64(s.Truncated))
	counter(d.verifications, float64(s.Verifications))
	if id, ok := n.Identity(); ok {
		gauge(d.revocationList, float64(id.RevocationList))
		gauge(d.certExpiry, float64(id.NotAfter.Unix()))
	}
}
