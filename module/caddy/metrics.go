package coralcaddy

import (
	"cmp"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/internal/dhtmetrics"
	"github.com/coralcdn/coral/module/caddy/abuse"
	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/internal/offheap"
	"github.com/coralcdn/coral/module/caddy/proxy"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// Prometheus metrics of the coral_proxy handler and the coral app, all
// named caddy_coral_*. They go on the metrics registry of the Caddy context
// that provisions the handler (ctx.GetMetricsRegistry()), which Caddy serves
// at /metrics of the admin API and through the metrics handler. Caddy makes
// a new registry for every configuration load, so:
//
//   - The counters are package-level, created once, and registered on each
//     new registry: their values survive configuration reloads.
//   - The gauges and the DSHT node's counters are read at scrape time by
//     one collector per registry, which every handler provisioned in that
//     configuration adds its store (and the app's node) to.
//
// Registering on a registry that already has them (two coral_proxy
// handlers in one configuration) reuses what is there, so it never panics.

// Label values: a proxy.CacheStatus's Label for cache_status; the proxy's
// sources (SourceLocal, SourceOrigin, SourceNone, PeerSource) for source;
// its Outcomes for outcome. Anything else the proxy reports is counted as
// "other", so that a mistake cannot grow the label sets without bound.
const metricOther = "other"

const metricNamespace, metricSubsystem = "caddy", "coral"

var (
	coralRequests = counterVec("requests_total",
		"Requests handled by coral_proxy, by cache status (hit, miss, collapsed, stale, refused) and where the body came from (local, peer-l<level>, origin, none).",
		"cache_status", "source")

	coralOriginFetches = counterVec("origin_fetches_total",
		"Fetches from origin servers by outcome (ok, http_error, timeout, forbidden, backoff, error).",
		"outcome")

	coralPeerFetches = counterVec("peer_fetches_total",
		"Fetches from peer proxies by outcome (ok, not_cached, timeout, error, refused_address: a peer on an address allow_peers does not permit, skipped).",
		"outcome")

	coralBytesServed = counterVec("bytes_served_total",
		"Response body bytes sent to clients and peers, by where they came from (local, peer-l<level>, origin).",
		"source")

	coralBudgetDecisions = counterVec("budget_decisions_total",
		"Requests the bandwidth budget decided, by decision: within_share (served), over_share (redirected: the origin used its fair share while others still claim theirs), exhausted (redirected: the whole budget is used).",
		"decision")
)

// countBudgetDecision counts one decision of the bandwidth budget.
func countBudgetDecision(d abuse.Decision) {
	coralBudgetDecisions.WithLabelValues(d.String()).Inc()
}

// counterVec is the counter caddy_coral_<name> with labels.
func counterVec(name, help string, labels ...string) *prometheus.CounterVec {
	return prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: metricNamespace, Subsystem: metricSubsystem, Name: name, Help: help}, labels)
}

func metricDesc(name, help string, labels ...string) *prometheus.Desc {
	return prometheus.NewDesc(prometheus.BuildFQName(metricNamespace, metricSubsystem, name), help, labels, nil)
}

// Read at scrape time from the stores' Stats, summed over the distinct
// stores of the configuration's coral_proxy handlers (normally one).
var (
	descCacheBytes     = metricDesc("cache_bytes", "Bytes of complete objects in the disk cache (bodies and metadata).")
	descCacheMaxBytes  = metricDesc("cache_max_bytes", "Configured bound of the disk cache in bytes.")
	descCacheObjects   = metricDesc("cache_objects", "Complete objects in the disk cache.")
	descCacheIndex     = metricDesc("cache_index_bytes", "Memory of the disk cache's index (its fixed-size entries and table).")
	descDownloads      = metricDesc("downloads_in_progress", "Objects being written into the disk cache.")
	descCacheEvictions = metricDesc("cache_evictions_total", "Complete objects evicted from the disk cache for room.")
	descDiskErrors     = metricDesc("disk_write_errors_total", "Writes to the disk cache that the file system failed (ENOSPC, EDQUOT, EIO): the object was evicted for or relayed uncached.")
	descOffheap        = metricDesc("offheap_bytes", "Memory mapped outside the Go heap for the per-object table (the disk cache's index, with the state of the DSHT references): resident as it is written, not counted by go_memstats_*.")
	descDiskLimit      = metricDesc("cache_disk_limit_bytes", "The disk cache's bound when its file system was found full below cache_size (0: cache_size applies).")
)

// The DSHT node's Stats as caddy_coral_dht_*, the same metrics as the
// CoreDNS plugin's coredns_coral_dht_*.
var dhtDescs = dhtmetrics.New(metricNamespace, metricSubsystem)

// The configuration loads (reload.go) and the drain.
var (
	descReloadSuccess  = metricDesc("reload_success", "1 if the last configuration load that reached the coral app succeeded, 0 if it failed (the previous configuration keeps running).")
	descReloadTime     = metricDesc("reload_timestamp_seconds", "When the last configuration load that reached the coral app happened, successful or not (Unix time).")
	descReloadOKTime   = metricDesc("reload_success_timestamp_seconds", "When the last successful configuration load happened (Unix time).")
	descReloadFailures = metricDesc("reload_failures_total", "Configuration loads that failed after reaching the coral app.")
	descConfigInfo     = metricDesc("config_info", "The running configuration: its hash (coral settings, key file and blacklist contents) as a label; always 1.", "hash")
	descDraining       = metricDesc("draining", "1 while the node is draining (POST /coral/drain): out of DNS answers.")
)

var coralDescs = []*prometheus.Desc{
	descCacheBytes, descCacheMaxBytes, descCacheObjects, descCacheIndex, descDownloads, descCacheEvictions,
	descDiskErrors, descDiskLimit, descOffheap,
	descReloadSuccess, descReloadTime, descReloadOKTime, descReloadFailures, descConfigInfo, descDraining,
}

// collectReloads reads the reload log, once a configuration has reached
// the coral app.
func collectReloads(ch chan<- prometheus.Metric) {
	r := &reloads
	r.mu.Lock()
	seen, ok, at, okAt, hash, failures := r.seen, r.ok, r.at, r.okAt, r.hash, r.failures
	r.mu.Unlock()
	if !seen {
		return
	}
	success := 0.0
	if ok {
		success = 1
	}
	ch <- prometheus.MustNewConstMetric(descReloadSuccess, prometheus.GaugeValue, success)
	ch <- prometheus.MustNewConstMetric(descReloadTime, prometheus.GaugeValue, float64(at.UnixNano())/1e9)
	if !okAt.IsZero() {
		ch <- prometheus.MustNewConstMetric(descReloadOKTime, prometheus.GaugeValue, float64(okAt.UnixNano())/1e9)
	}
	ch <- prometheus.MustNewConstMetric(descReloadFailures, prometheus.CounterValue, float64(failures))
	if hash != "" {
		ch <- prometheus.MustNewConstMetric(descConfigInfo, prometheus.GaugeValue, 1, hash)
	}
}

// coralCollector reads the gauges and the DSHT counters at scrape time.
// There is one per registry; the handlers and apps of the configuration
// add what they own to it and remove it on cleanup.
type coralCollector struct {
	mu     sync.Mutex
	stores map[*diskcache.Store]int // reference counts
	apps   map[*App]int
}

func newCoralCollector() *coralCollector {
	return &coralCollector{stores: map[*diskcache.Store]int{}, apps: map[*App]int{}}
}

// Describe implements prometheus.Collector.
func (c *coralCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range coralDescs {
		ch <- d
	}
	for _, d := range blacklistDescs {
		ch <- d
	}
	dhtDescs.Describe(ch)
}

// Collect implements prometheus.Collector.
func (c *coralCollector) Collect(ch chan<- prometheus.Metric) {
	c.mu.Lock()
	stores := make([]*diskcache.Store, 0, len(c.stores))
	for s := range c.stores {
		stores = append(stores, s)
	}
	apps := make([]*App, 0, len(c.apps))
	for a := range c.apps {
		apps = append(apps, a)
	}
	c.mu.Unlock()
	if len(stores) == 0 && len(apps) == 0 {
		// A registry whose configuration is gone: a failed reload's,
		// which Caddy's /metrics goes on serving. Read what runs.
		for _, cr := range runningCaches() {
			stores = append(stores, cr.store)
		}
		if a, _ := runningApp(); a != nil {
			apps = append(apps, a)
		}
	}

	counter := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, v, labels...)
	}
	gauge := func(d *prometheus.Desc, v float64, labels ...string) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v, labels...)
	}

	if len(stores) > 0 {
		var sum diskcache.Stats
		for _, s := range stores {
			st := s.Stats()
			sum.Bytes += st.Bytes
			sum.MaxBytes += st.MaxBytes
			sum.Entries += st.Entries
			sum.IndexBytes += st.IndexBytes
			sum.Writing += st.Writing
			sum.Evictions += st.Evictions
			sum.DiskWriteErrors += st.DiskWriteErrors
			sum.DiskLimitBytes += st.DiskLimitBytes
		}
		gauge(descCacheBytes, float64(sum.Bytes))
		gauge(descCacheMaxBytes, float64(sum.MaxBytes))
		gauge(descCacheObjects, float64(sum.Entries))
		gauge(descCacheIndex, float64(sum.IndexBytes))
		gauge(descDownloads, float64(sum.Writing))
		counter(descCacheEvictions, float64(sum.Evictions))
		counter(descDiskErrors, float64(sum.DiskWriteErrors))
		gauge(descDiskLimit, float64(sum.DiskLimitBytes))
		gauge(descOffheap, float64(offheap.MappedBytes()))
	}

	collectReloads(ch)
	collectFleet(ch, time.Now())
	// The drain gauge exists where a coral app runs, and only there: a
	// Caddy without Coral exports no caddy_coral_* series.
	if a, _ := runningApp(); a != nil {
		draining := 0.0
		if a.draining() {
			draining = 1
		}
		gauge(descDraining, draining)
	}

	seen := map[*coraldht.Node]bool{}
	for _, a := range apps {
		e := a.current()
		if e == nil || e.Node() == nil || seen[e.Node()] {
			continue
		}
		seen[e.Node()] = true
		dhtDescs.Collect(ch, e.Node().Addr().String(), e.Node(), e.Joined())
	}
}

// registerCollector registers c on reg, or returns what reg already has in
// its place: the same collector (or an equal one) registered twice is not
// an error.
func registerCollector[C prometheus.Collector](reg prometheus.Registerer, c C) (C, error) {
	err := reg.Register(c)
	if err == nil {
		return c, nil
	}
	var are prometheus.AlreadyRegisteredError
	if errors.As(err, &are) {
		if existing, ok := are.ExistingCollector.(C); ok {
			return existing, nil
		}
	}
	return c, err
}

// proxyMetrics is one handler's (or app's) hold on the metrics of its
// configuration's registry; a handler's is its proxy's Metrics.
type proxyMetrics struct {
	coll  *coralCollector
	store *diskcache.Store
	app   *App

	releaseOnce sync.Once
}

// newProxyMetrics registers the coral metrics on reg (the Caddy context's
// ctx.GetMetricsRegistry()) and adds store and app's node to what is read
// at scrape time; either may be nil. Call release when the handler (or
// app) is cleaned up.
func newProxyMetrics(reg prometheus.Registerer, app *App, store *diskcache.Store) (*proxyMetrics, error) {
	for _, c := range []*prometheus.CounterVec{coralRequests, coralOriginFetches, coralPeerFetches, coralBytesServed, coralBudgetDecisions} {
		if _, err := registerCollector(reg, c); err != nil {
			return nil, fmt.Errorf("coral metrics: %w", err)
		}
	}
	coll, err := registerCollector(reg, newCoralCollector())
	if err != nil {
		return nil, fmt.Errorf("coral metrics: %w", err)
	}
	m := &proxyMetrics{coll: coll, store: store, app: app}
	coll.mu.Lock()
	if store != nil {
		coll.stores[store]++
	}
	if app != nil {
		coll.apps[app]++
	}
	coll.mu.Unlock()
	return m, nil
}

// release removes this handler's store and node from the collector, so a
// registry that is still scraped does not read a closed store. Safe to
// call more than once, and on nil (a handler whose Provision failed before
// it had metrics).
func (m *proxyMetrics) release() {
	if m == nil {
		return
	}
	m.releaseOnce.Do(func() {
		c := m.coll
		c.mu.Lock()
		defer c.mu.Unlock()
		if m.store != nil {
			if c.stores[m.store]--; c.stores[m.store] <= 0 {
				delete(c.stores, m.store)
			}
		}
		if m.app != nil {
			if c.apps[m.app]--; c.apps[m.app] <= 0 {
				delete(c.apps, m.app)
			}
		}
	})
}

// Request counts one request: its cache status, where its body came from
// and the body bytes written (added to bytes_served_total unless the
// source is none).
func (m *proxyMetrics) Request(status proxy.CacheStatus, source string, bytes int64) {
	label := status.Label()
	if label == "hit" && source == proxy.SourceLocal {
		// Every hit: the series found once, not by hashing its labels
		// under the vector's lock on each request.
		localHits.once.Do(func() {
			localHits.requests = coralRequests.WithLabelValues("hit", proxy.SourceLocal)
			localHits.bytes = coralBytesServed.WithLabelValues(proxy.SourceLocal)
		})
		localHits.requests.Inc()
		if bytes > 0 {
			localHits.bytes.Add(float64(bytes))
		}
		return
	}
	source = metricSource(source)
	coralRequests.WithLabelValues(label, source).Inc()
	if bytes > 0 && source != proxy.SourceNone {
		coralBytesServed.WithLabelValues(source).Add(float64(bytes))
	}
}

// localHits are the series of local hits, looked up on the first.
var localHits struct {
	once            sync.Once
	requests, bytes prometheus.Counter
}

// requestCount is one series of requests_total.
type requestCount struct {
	CacheStatus string `json:"cache_status"`
	Source      string `json:"source"`
	Count       uint64 `json:"count"`
}

// requestCounts reads requests_total's series with a non-zero count, for
// the coral_status page: cache statuses in the order hit, miss, collapsed,
// stale, refused, other, and within each the sources local, origin, none,
// other, peer-l0, peer-l1 and so on. Like the counter itself, the counts
// are process-wide and survive reloads. Reading them here, rather than
// counting requests a second time, adds nothing to the request path.
func requestCounts() []requestCount {
	ch := make(chan prometheus.Metric)
	go func() {
		coralRequests.Collect(ch)
		close(ch)
	}()
	var out []requestCount
	for m := range ch {
		var pb dto.Metric
		if m.Write(&pb) != nil || pb.GetCounter().GetValue() < 1 {
			continue
		}
		c := requestCount{Count: uint64(pb.GetCounter().GetValue())}
		for _, l := range pb.GetLabel() {
			switch l.GetName() {
			case "cache_status":
				c.CacheStatus = l.GetValue()
			case "source":
				c.Source = l.GetValue()
			}
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b requestCount) int {
		return cmp.Or(cmp.Compare(cacheStatusRank(a.CacheStatus), cacheStatusRank(b.CacheStatus)),
			cmp.Compare(sourceRank(a.Source), sourceRank(b.Source)))
	})
	return out
}

func cacheStatusRank(s string) int {
	labels := proxy.StatusLabels()
	if i := slices.Index(labels, s); i >= 0 {
		return i
	}
	return len(labels)
}

func sourceRank(s string) int {
	if i := slices.Index([]string{proxy.SourceLocal, proxy.SourceOrigin, proxy.SourceNone}, s); i >= 0 {
		return i
	}
	if l, ok := peerSourceLevel(s); ok {
		return 4 + l
	}
	return 3
}

// OriginFetch counts one fetch from an origin server, by outcome: ok,
// http_error, timeout, forbidden, backoff or error.
func (m *proxyMetrics) OriginFetch(outcome proxy.Outcome) {
	label := string(outcome)
	switch outcome {
	case proxy.OutcomeOK, proxy.OutcomeHTTPError, proxy.OutcomeTimeout, proxy.OutcomeForbidden, proxy.OutcomeBackoff, proxy.OutcomeError:
	default:
		label = metricOther
	}
	coralOriginFetches.WithLabelValues(label).Inc()
}

// PeerFetch counts one fetch from a peer proxy, by outcome: ok, not_cached
// (the peer's 504 to only-if-cached), timeout or error; or a peer skipped
// (refused_address) or a put+get done again (retry).
func (m *proxyMetrics) PeerFetch(outcome proxy.Outcome) {
	label := string(outcome)
	switch outcome {
	case proxy.OutcomeOK, proxy.OutcomeNotCached, proxy.OutcomeTimeout, proxy.OutcomeError, proxy.OutcomeRefusedAddress, proxy.OutcomeRetry:
	default:
		label = metricOther
	}
	coralPeerFetches.WithLabelValues(label).Inc()
}

// metricSource maps a source to its label value: local, origin, none,
// peer-l0 .. peer-l<MaxLevels-1>; "" is none, anything else other.
func metricSource(s string) string {
	switch s {
	case proxy.SourceLocal, proxy.SourceOrigin, proxy.SourceNone:
		return s
	case "":
		return proxy.SourceNone
	}
	if l, ok := peerSourceLevel(s); ok && l >= 0 && l < coraldht.MaxLevels {
		return s
	}
	return metricOther
}

// peerSourceLevel parses "peer-l<level>" with a canonical decimal level.
func peerSourceLevel(s string) (int, bool) {
	const prefix = "peer-l"
	if len(s) <= len(prefix) || s[:len(prefix)] != prefix {
		return 0, false
	}
	l, err := strconv.Atoi(s[len(prefix):])
	if err != nil || strconv.Itoa(l) != s[len(prefix):] {
		return 0, false
	}
	return l, true
}

// Interface guards.
var (
	_ prometheus.Collector = (*coralCollector)(nil)
	_ proxy.Metrics        = (*proxyMetrics)(nil)
)
