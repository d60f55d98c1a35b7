package coralcaddy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/proxy"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// metricsTestNode starts a real DSHT node on a loopback UDP address.
func metricsTestNode(t *testing.T, addr string) *coraldht.Node {
	t.Helper()
	cfg := coraldht.DefaultConfig()
	cfg.Services = coraldht.ServiceHTTP
	cfg.HintHops = 0
	tr, err := coraldht.ListenUDP(addr)
	if err != nil {
		t.Fatal(err)
	}
	n, err := coraldht.NewNode(cfg, tr)
	if err != nil {
		_ = tr.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	return n
}

// provisionApp provisions and starts a as Caddy does, and cleans it up
// when the test ends.
func provisionApp(t *testing.T, a *App) *App {
	t.Helper()
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	t.Cleanup(cancel)
	if err := a.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	if err := a.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Cleanup() })
	return a
}

func metricsTestStore(t *testing.T) *diskcache.Store {
	t.Helper()
	s, err := diskcache.Open(diskcache.Options{Dir: t.TempDir(), MaxBytes: 64 << 20, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// metricsTestPut stores a complete object.
func metricsTestPut(t *testing.T, s *diskcache.Store, key, url, body string) {
	t.Helper()
	now := time.Now()
	m := diskcache.Meta{Status: http.StatusOK, Header: http.Header{"Content-Type": {"text/plain"}},
		Stored: now, Expires: now.Add(time.Hour), Size: int64(len(body)),
		Extra: map[string]string{"url": url, "source": "origin"}}
	w, err := s.Create(key, m)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte(body)); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(m); err != nil {
		t.Fatal(err)
	}
}

// metricsTestStart starts a write and leaves it in progress until the test
// ends.
func metricsTestStart(t *testing.T, s *diskcache.Store, key, url, part string) {
	t.Helper()
	w, err := s.Create(key, diskcache.Meta{Status: http.StatusOK, Header: http.Header{}, Size: -1,
		Stored: time.Now(), Extra: map[string]string{"url": url, "source": "peer-l1"}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write([]byte(part)); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Abort(errors.New("test over")) })
}

func metricsTestKey(i int) string { return fmt.Sprintf("%040x", i+1) }

// gatherValues gathers reg and returns the value of every sample of the
// named family, keyed by its labels as "k=v,k=v" in label order.
func gatherValues(t *testing.T, reg prometheus.Gatherer, name string) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatalf("gather: %v", err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			var ls []string
			for _, lp := range m.GetLabel() {
				ls = append(ls, lp.GetName()+"="+lp.GetValue())
			}
			out[strings.Join(ls, ",")] = metricValue(m)
		}
	}
	return out
}

// metricsCounterValue is the current value of one counter.
func metricsCounterValue(c prometheus.Counter) float64 {
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		panic(err)
	}
	return m.GetCounter().GetValue()
}

func metricValue(m *dto.Metric) float64 {
	switch {
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	case m.Counter != nil:
		return m.Counter.GetValue()
	}
	return 0
}

func TestMetricsCounters(t *testing.T) {
	reg := prometheus.NewPedanticRegistry()
	m, err := newProxyMetrics(reg, nil, nil)
	if err != nil || m == nil {
		t.Fatalf("newProxyMetrics: %v, %v", m, err)
	}
	defer m.release()

	val := metricsCounterValue
	hitLocal0 := val(coralRequests.WithLabelValues("hit", "local"))
	missPeer0 := val(coralRequests.WithLabelValues("miss", "peer-l1"))
	refused0 := val(coralRequests.WithLabelValues("refused", "none"))
	other0 := val(coralRequests.WithLabelValues("other", "other"))
	bytesLocal0 := val(coralBytesServed.WithLabelValues("local"))
	bytesPeer0 := val(coralBytesServed.WithLabelValues("peer-l1"))
	bytesNone0 := val(coralBytesServed.WithLabelValues("none"))
	originOK0 := val(coralOriginFetches.WithLabelValues("ok"))
	originOther0 := val(coralOriginFetches.WithLabelValues("other"))
	peerMiss0 := val(coralPeerFetches.WithLabelValues("not_cached"))

	m.Request(proxy.CacheHit, "local", 100)
	m.Request(proxy.CacheRevalidated, "local", 50)
	m.Request(proxy.CacheMiss, "peer-l1", 7)
	m.Request(proxy.CacheRefused, "", 300) // no source: counted as none, bytes not served from anywhere
	m.Request(proxy.CacheStatus(200), "peer-l99", 1)
	m.OriginFetch(proxy.OutcomeOK)
	m.OriginFetch("weird")
	m.PeerFetch(proxy.OutcomeNotCached)
	m.PeerFetch(proxy.OutcomeNotCached)

	for _, c := range []struct {
		name      string
		got, want float64
	}{
		{"hit/local", val(coralRequests.WithLabelValues("hit", "local")) - hitLocal0, 2},
		{"miss/peer-l1", val(coralRequests.WithLabelValues("miss", "peer-l1")) - missPeer0, 1},
		{"refused/none", val(coralRequests.WithLabelValues("refused", "none")) - refused0, 1},
		{"other/other", val(coralRequests.WithLabelValues("other", "other")) - other0, 1},
		{"bytes local", val(coralBytesServed.WithLabelValues("local")) - bytesLocal0, 150},
		{"bytes peer-l1", val(coralBytesServed.WithLabelValues("peer-l1")) - bytesPeer0, 7},
		{"bytes none", val(coralBytesServed.WithLabelValues("none")) - bytesNone0, 0},
		{"origin ok", val(coralOriginFetches.WithLabelValues("ok")) - originOK0, 1},
		{"origin other", val(coralOriginFetches.WithLabelValues("other")) - originOther0, 1},
		{"peer not_cached", val(coralPeerFetches.WithLabelValues("not_cached")) - peerMiss0, 2},
	} {
		if c.got != c.want {
			t.Errorf("%s: increased by %v, want %v", c.name, c.got, c.want)
		}
	}

	// What the registry serves.
	got := gatherValues(t, reg, "caddy_coral_requests_total")
	if got["cache_status=hit,source=local"] < 2 {
		t.Errorf("registry serves requests_total %v", got)
	}
	for _, name := range []string{"caddy_coral_origin_fetches_total", "caddy_coral_peer_fetches_total", "caddy_coral_bytes_served_total"} {
		if got := gatherValues(t, reg, name); len(got) == 0 {
			t.Errorf("the registry does not serve %s", name)
		}
	}

	// A handler whose Provision failed before it had metrics releases
	// none.
	var nm *proxyMetrics
	nm.release()
}

func TestMetricsLabelValues(t *testing.T) {
	for in, want := range map[string]string{
		"local": "local", "origin": "origin", "none": "none", "": "none",
		"peer-l0": "peer-l0", "peer-l2": "peer-l2", "peer-l7": "peer-l7",
		"peer-l8": "other", "peer-l-1": "other", "peer-l01": "other", "peer-l": "other", "x": "other",
	} {
		if got := metricSource(in); got != want {
			t.Errorf("metricSource(%q) = %q, want %q", in, got, want)
		}
	}
}

// Two handlers in one configuration register on the same registry; a
// reload gives the next configuration a fresh registry. Neither panics,
// and the counters carry over.
func TestMetricsReloadRegistration(t *testing.T) {
	s1, s2 := metricsTestStore(t), metricsTestStore(t)
	metricsTestPut(t, s1, metricsTestKey(1), "http://a.example/1", "one")
	metricsTestPut(t, s2, metricsTestKey(2), "http://b.example/2", "two!")

	reg1 := prometheus.NewPedanticRegistry()
	m1, err := newProxyMetrics(reg1, nil, s1)
	if err != nil {
		t.Fatal(err)
	}
	m2, err := newProxyMetrics(reg1, nil, s2) // a second handler, another cache
	if err != nil {
		t.Fatal(err)
	}
	m3, err := newProxyMetrics(reg1, nil, s1) // a third, sharing the first's cache
	if err != nil {
		t.Fatal(err)
	}
	if m1.coll != m2.coll || m1.coll != m3.coll {
		t.Fatal("handlers of one registry got different collectors")
	}
	if got := gatherValues(t, reg1, "caddy_coral_cache_objects"); got[""] != 2 {
		t.Errorf("cache_objects over two stores (one shared) = %v, want 2", got)
	}
	m1.Request(proxy.CacheHit, "local", 3)
	before := metricsCounterValue(coralRequests.WithLabelValues("hit", "local"))

	// Reload: the new configuration's handler on a fresh registry, then the
	// old configuration's cleanup.
	reg2 := prometheus.NewPedanticRegistry()
	n1, err := newProxyMetrics(reg2, nil, s1)
	if err != nil {
		t.Fatal(err)
	}
	defer n1.release()
	m1.release()
	m1.release() // twice is harmless
	if got := gatherValues(t, reg1, "caddy_coral_cache_objects"); got[""] != 2 {
		t.Errorf("after one release of a shared store: cache_objects = %v, want 2", got)
	}
	m2.release()
	m3.release()
	// A registry whose configuration is gone reads what runs (the caches
	// of the handlers Caddy runs, none of this test's), as Caddy's
	// /metrics goes on serving a failed configuration's registry.
	running := 0
	for _, c := range runningCaches() {
		running += c.store.Stats().Entries
	}
	if got := gatherValues(t, reg1, "caddy_coral_cache_objects"); len(got) != 0 && got[""] != float64(running) {
		t.Errorf("the old registry still reads released stores: %v", got)
	}

	if got := gatherValues(t, reg2, "caddy_coral_cache_objects"); got[""] != 1 {
		t.Errorf("new registry cache_objects = %v, want 1", got)
	}
	if got := gatherValues(t, reg2, "caddy_coral_requests_total"); got["cache_status=hit,source=local"] != before {
		t.Errorf("counters did not carry over the reload: %v, want hit/local %v", got, before)
	}
	n1.Request(proxy.CacheHit, "local", 3)
	if got := gatherValues(t, reg2, "caddy_coral_requests_total"); got["cache_status=hit,source=local"] != before+1 {
		t.Errorf("after the reload: %v, want hit/local %v", got, before+1)
	}

	// Something else holding one of the names is an error, not a panic.
	reg3 := prometheus.NewRegistry()
	reg3.MustRegister(prometheus.NewCounter(prometheus.CounterOpts{Name: "caddy_coral_requests_total", Help: "impostor"}))
	if m, err := newProxyMetrics(reg3, nil, s1); err == nil {
		m.release()
		t.Error("registering over a different collector of the same name succeeded")
	}
}

// The collector reads a real store and a real DSHT node at scrape time.
func TestMetricsCollector(t *testing.T) {
	const addr = "127.0.5.1:4000"
	app := provisionApp(t, &App{Listen: addr})
	node := app.Node()
	pinger := metricsTestNode(t, "127.0.5.2:4000")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := pinger.Ping(ctx, netip.MustParseAddrPort(addr)); err != nil {
		t.Fatalf("ping: %v", err)
	}

	store := metricsTestStore(t)
	metricsTestPut(t, store, metricsTestKey(0), "http://www.example.com/a", "hello")
	metricsTestPut(t, store, metricsTestKey(1), "http://www.example.com/b", "hello, world")
	metricsTestStart(t, store, metricsTestKey(2), "http://www.example.com/c", "par")

	reg := prometheus.NewPedanticRegistry()
	m, err := newProxyMetrics(reg, app, store)
	if err != nil {
		t.Fatal(err)
	}
	// The app registers too (its node is reported once).
	ma, err := newProxyMetrics(reg, app, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer ma.release()

	st := store.Stats()
	for name, want := range map[string]float64{
		"caddy_coral_cache_objects":           2,
		"caddy_coral_cache_bytes":             float64(st.Bytes),
		"caddy_coral_cache_max_bytes":         64 << 20,
		"caddy_coral_downloads_in_progress":   1,
		"caddy_coral_cache_evictions_total":   0,
		"caddy_coral_disk_write_errors_total": 0,
		"caddy_coral_cache_disk_limit_bytes":  0,
	} {
		if got := gatherValues(t, reg, name); len(got) != 1 || got[""] != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	if st.Bytes < int64(len("hello")+len("hello, world")) {
		t.Errorf("store reports %d bytes", st.Bytes)
	}
	// The index's arrays are mapped outside the Go heap (on the heap under
	// -race, where the gauge reads 0).
	if got := gatherValues(t, reg, "caddy_coral_offheap_bytes"); len(got) != 1 || (!raceEnabled && got[""] < float64(st.IndexBytes)) {
		t.Errorf("caddy_coral_offheap_bytes = %v, want one series of at least the index's %d bytes", got, st.IndexBytes)
	}

	nl := "node=" + addr
	if got := gatherValues(t, reg, "caddy_coral_dht_joined"); len(got) != 1 || got[nl] != 1 {
		t.Errorf("dht_joined = %v", got)
	}
	msgs := gatherValues(t, reg, "caddy_coral_dht_messages_total")
	if len(msgs) != 4*7 { // in/out, request/reply; 7 message types
		t.Errorf("dht_messages_total has %d series, want 28: %v", len(msgs), msgs)
	}
	s := node.Stats()
	if got := msgs["direction=in,kind=request,"+nl+",type=ping"]; got < 1 || got > float64(s.RequestsIn.Ping) {
		t.Errorf("pings received = %v (Stats: %d)", got, s.RequestsIn.Ping)
	}
	if got := msgs["direction=out,kind=reply,"+nl+",type=ping"]; got < 1 {
		t.Errorf("ping replies sent = %v", got)
	}
	if got := gatherValues(t, reg, "caddy_coral_dht_drops_total"); len(got) != len(coraldht.DropReasons()) {
		t.Errorf("dht_drops_total = %v", got)
	}
	levels := node.Levels()
	contacts := gatherValues(t, reg, "caddy_coral_dht_routing_table_contacts")
	logs := gatherValues(t, reg, "caddy_coral_dht_cluster_log2_size")
	if len(contacts) != len(levels) || len(logs) != len(levels) || len(levels) != 3 {
		t.Errorf("per-level series: contacts %v, log2 sizes %v; node has %d levels", contacts, logs, len(levels))
	}
	for _, li := range levels {
		k := fmt.Sprintf("level=%d,%s", li.Level, nl)
		if _, ok := contacts[k]; !ok {
			t.Errorf("no routing_table_contacts{%s}", k)
		}
		if got, ok := logs[k]; !ok || got != li.Cluster.LogSize {
			t.Errorf("cluster_log2_size{%s} = %v, want %v", k, got, li.Cluster.LogSize)
		}
	}
	if got := contacts["level=0,"+nl]; got < 1 {
		t.Errorf("level-0 routing table = %v after a ping from another node", got)
	}
	for _, name := range []string{"caddy_coral_dht_timeouts_total", "caddy_coral_dht_refused_total", "caddy_coral_dht_lookups_total",
		"caddy_coral_dht_stored_values", "caddy_coral_dht_stored_keys", "caddy_coral_dht_cluster_changes_total"} {
		if got := gatherValues(t, reg, name); len(got) != 1 {
			t.Errorf("%s = %v, want one series", name, got)
		}
	}

	// Not joined yet: an app whose bootstrap node never answers.
	waiting := provisionApp(t, &App{Listen: "127.0.5.5:4000", Bootstrap: []string{"127.0.5.6:4000"}})
	wreg := prometheus.NewPedanticRegistry()
	wm, err := newProxyMetrics(wreg, waiting, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer wm.release()
	if got := gatherValues(t, wreg, "caddy_coral_dht_joined"); len(got) != 1 || got["node=127.0.5.5:4000"] != 0 {
		t.Errorf("dht_joined = %v for a node that has not joined", got)
	}

	// The handler's cleanup takes its store away; the app still reports
	// the node.
	m.release()
	if got := gatherValues(t, reg, "caddy_coral_cache_objects"); len(got) != 0 {
		t.Errorf("cache_objects after release = %v", got)
	}
	if got := gatherValues(t, reg, "caddy_coral_dht_joined"); len(got) != 1 {
		t.Errorf("dht_joined after the handler's release = %v", got)
	}
	if got := gatherValues(t, reg, "caddy_coral_downloads_in_progress"); len(got) != 0 {
		t.Errorf("downloads_in_progress after release = %v", got)
	}
}

// TestPeerRefusedAddressLabel: a peer skipped for its address is counted
// as refused_address, not other.
func TestPeerRefusedAddressLabel(t *testing.T) {
	read := func() float64 {
		var m dto.Metric
		if err := coralPeerFetches.WithLabelValues("refused_address").Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetCounter().GetValue()
	}
	before := read()
	(&proxyMetrics{}).PeerFetch(proxy.OutcomeRefusedAddress)
	if got := read(); got != before+1 {
		t.Errorf("refused_address = %v, want %v", got, before+1)
	}
}
