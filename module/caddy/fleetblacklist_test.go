package coralcaddy

import (
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/coralcdn/coral/coraldht/fleet"
	"github.com/coralcdn/coral/module/caddy/abuse"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// postBlacklist calls POST /coral/blacklist with a list as the body.
func postBlacklist(t *testing.T, body []byte) (*httptest.ResponseRecorder, error) {
	t.Helper()
	var api AdminAPI
	for _, r := range api.Routes() {
		if r.Pattern == "/coral/blacklist" {
			w := httptest.NewRecorder()
			err := r.Handler.ServeHTTP(w, httptest.NewRequest(http.MethodPost, "/coral/blacklist", strings.NewReader(string(body))))
			return w, err
		}
	}
	t.Fatal("no admin route /coral/blacklist")
	return nil, nil
}

// TestFleetBlacklistInCaddy: a list published through the admin API is
// in force in coral_proxy (403), served by coral_blacklist (with 304 for
// a node that has it), reported by GET /coral/blacklist and the metrics;
// a forged or older one is refused with 400 and 409; and a reload that
// changes the fleet_blacklist (a new poll) finds the list in its state
// file.
func TestFleetBlacklistInCaddy(t *testing.T) {
	dir := t.TempDir()
	pub := filepath.Join(dir, "blacklist.pub")
	if _, err := abuse.GeneratePublisherKey(filepath.Join(dir, "blacklist.key"), pub, "test"); err != nil {
		t.Fatal(err)
	}
	key, err := abuse.LoadPublisherKey(filepath.Join(dir, "blacklist.key"))
	if err != nil {
		t.Fatal(err)
	}
	state := filepath.Join(dir, "state", "list.signed")
	option := func(poll string) string {
		return "fleet_blacklist " + pub + " {\n poll " + poll + "\n state " + state + "\n}"
	}
	port := 9180 + int(testProxyPort.Add(1))
	cache := filepath.Join(dir, "cache")
	tester := caddytest.NewTester(t)
	tester.InitServer(proxyConfig(port, cache, option("1m")), "caddyfile")
	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	sign := func(version uint64, names ...string) []byte {
		var entries []abuse.Entry
		for _, n := range names {
			entries = append(entries, abuse.Entry{Name: n, Reason: "test"})
		}
		l, err := abuse.SignList(key, version, time.Now(), time.Now().Add(time.Hour), entries)
		if err != nil {
			t.Fatal(err)
		}
		return l.Raw
	}

	if resp, _ := get(t, base, "www.blocked.example.nyud.test", "/"); resp.StatusCode == http.StatusForbidden {
		t.Fatal("blocked before any list")
	}
	v2 := sign(2, "blocked.example")
	if w, err := postBlacklist(t, v2); err != nil || w.Code != http.StatusOK || !strings.Contains(w.Body.String(), `"outcome":"installed"`) {
		t.Fatalf("publish v2: %v %d %s", err, w.Code, w.Body)
	}
	if resp, body := get(t, base, "www.blocked.example.nyud.test", "/"); resp.StatusCode != http.StatusForbidden || !strings.Contains(string(body), "blacklist") {
		t.Errorf("after publishing: %s %q", resp.Status, body)
	}
	_, forger := fleet.GenerateKey()
	forged, err := abuse.SignList(forger, 9, time.Now(), time.Now().Add(time.Hour), nil)
	if err != nil {
		t.Fatal(err)
	}
	if w, _ := postBlacklist(t, forged.Raw); w.Code != http.StatusBadRequest || !strings.Contains(w.Body.String(), `"outcome":"forged"`) {
		t.Errorf("a forged list: %d %s", w.Code, w.Body)
	}
	if w, _ := postBlacklist(t, sign(1, "other.example")); w.Code != http.StatusConflict || !strings.Contains(w.Body.String(), `"outcome":"older"`) {
		t.Errorf("an older list: %d %s", w.Code, w.Body)
	}
	var doc adminBlacklist
	adminTestGet(t, "/coral/blacklist", "/coral/blacklist", &doc)
	if doc.Version != 2 || doc.Entries != 1 || doc.Counts[abuse.OutcomeForged] != 1 || doc.Counts[abuse.OutcomeOlder] != 1 {
		t.Errorf("status %+v", doc.FleetStatus)
	}

	// coral_blacklist serves it, whole, with 304 for a node that has it.
	w := httptest.NewRecorder()
	if err := (BlacklistServer{}).ServeHTTP(w, httptest.NewRequest(http.MethodGet, "/", nil), nil); err != nil || w.Code != 200 || w.Body.String() != string(v2) {
		t.Fatalf("coral_blacklist: %v %d", err, w.Code)
	}
	again := httptest.NewRequest(http.MethodGet, "/", nil)
	again.Header.Set("If-None-Match", w.Header().Get("ETag"))
	w2 := httptest.NewRecorder()
	if _ = (BlacklistServer{}).ServeHTTP(w2, again, nil); w2.Code != http.StatusNotModified {
		t.Errorf("coral_blacklist with the list's ETag: %d", w2.Code)
	}
	if err := (BlacklistServer{}).ServeHTTP(httptest.NewRecorder(), httptest.NewRequest(http.MethodPost, "/", nil), nil); err == nil {
		t.Error("coral_blacklist took a POST")
	}

	// The metrics.
	reg := prometheus.NewPedanticRegistry()
	if err := reg.Register(collectorFunc(func(ch chan<- prometheus.Metric) { collectFleet(ch, time.Now()) })); err != nil {
		t.Fatal(err)
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, f := range families {
		for _, m := range f.GetMetric() {
			name := f.GetName()
			for _, l := range m.GetLabel() {
				name += "," + l.GetValue()
			}
			got[name] = metricValueOf(m)
		}
	}
	if got["caddy_coral_blacklist_version"] != 2 || got["caddy_coral_blacklist_entries"] != 1 ||
		got["caddy_coral_blacklist_fetches_total,forged"] != 1 || got["caddy_coral_blacklist_fetches_total,installed"] != 1 {
		t.Errorf("metrics %v", got)
	}

	// A reload with another poll interval: a new fleet list, which finds
	// version 2 in the state file.
	if _, err := os.Stat(state); err != nil {
		t.Fatalf("state file: %v", err)
	}
	tester.InitServer(proxyConfig(port, cache, option("30s")), "caddyfile")
	adminTestGet(t, "/coral/blacklist", "/coral/blacklist", &doc)
	if doc.Version != 2 || doc.Counts[abuse.OutcomeInstalled] != 0 {
		t.Errorf("after a reload: %+v", doc.FleetStatus)
	}
	if resp, _ := get(t, base, "www.blocked.example.nyud.test", "/"); resp.StatusCode != http.StatusForbidden {
		t.Errorf("after a reload: %s", resp.Status)
	}
}

type collectorFunc func(chan<- prometheus.Metric)

func (f collectorFunc) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range blacklistDescs {
		ch <- d
	}
}
func (f collectorFunc) Collect(ch chan<- prometheus.Metric) { f(ch) }

func metricValueOf(m *dto.Metric) float64 {
	if c := m.GetCounter(); c != nil {
		return c.GetValue()
	}
	return m.GetGauge().GetValue()
}
