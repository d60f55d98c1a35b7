package coral

import (
	"os"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coredns/caddy"
	"github.com/coredns/coredns/core/dnsserver"
	_ "github.com/coredns/coredns/plugin/bind"
	"github.com/prometheus/client_golang/prometheus"
)

// gatherDefault is the value of a metric of the default registry (which
// CoreDNS's prometheus plugin serves) with the given label values, and
// whether it is there.
func gatherDefault(t *testing.T, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := prometheus.DefaultGatherer.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metrics:
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if want, ok := labels[l.GetName()]; ok && want != l.GetValue() {
					continue metrics
				}
			}
			if c := m.GetCounter(); c != nil {
				return c.GetValue(), true
			}
			return m.GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestFailedReloadCounted (issue 22, defect 3): a CoreDNS reload with a
// bad Corefile fails and the old configuration keeps running; the failure
// shows in coredns_coral_reload_success and _failures_total, and the
// running configuration's hash in coredns_coral_config_info.
func TestFailedReloadCounted(t *testing.T) {
	if !slices.Contains(dnsserver.Directives, "coral") {
		// Stock CoreDNS's directives; builds/coredns adds coral to
		// plugin.cfg.
		dnsserver.Directives = append(slices.Clone(dnsserver.Directives), "coral")
	}
	corefile := func(extra string) caddy.Input {
		return caddy.CaddyfileInput{ServerTypeName: "dns", Contents: []byte(`nyucd.test:5390 {
	bind 127.0.140.20
	coral nyucd.test {
		listen 127.0.140.20:4200
		` + extra + `
	}
}`)}
	}
	inst, err := caddy.Start(corefile(""))
	if err != nil {
		t.Fatal(err)
	}
	defer inst.Stop()
	defer inst.ShutdownCallbacks()
	if v, ok := gatherDefault(t, "coredns_coral_reload_success", nil); !ok || v != 1 {
		t.Fatalf("reload_success after the start: %v %v, want 1", v, ok)
	}
	failures, _ := gatherDefault(t, "coredns_coral_reload_failures_total", nil)

	if _, err := inst.Restart(corefile("no_such_property 1")); err == nil {
		t.Fatal("a Corefile with an unknown coral property reloaded")
	}
	if v, ok := gatherDefault(t, "coredns_coral_reload_success", nil); !ok || v != 0 {
		t.Errorf("reload_success after a failed reload: %v %v, want 0", v, ok)
	}
	if v, _ := gatherDefault(t, "coredns_coral_reload_failures_total", nil); v != failures+1 {
		t.Errorf("reload_failures_total after a failed reload: %v, want %v", v, failures+1)
	}
}

// TestConfigHashSeesKey: the configuration hash changes with the key
// file's contents and is stable otherwise.
func TestConfigHashSeesKey(t *testing.T) {
	key := filepath.Join(t.TempDir(), "network.key")
	if err := coraldht.WriteKeyFile(key); err != nil {
		t.Fatal(err)
	}
	cfg := parseTest(t, "coral nyucd.test {\nlisten 127.0.140.21:4100\nkey_file "+key+"\nrrl 10\n}")
	again := parseTest(t, "coral nyucd.test {\nlisten 127.0.140.21:4100\nkey_file "+key+"\nrrl 10\n}")
	h := configHash(cfg)
	if configHash(again) != h {
		t.Fatal("the same configuration hashes differently")
	}
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	if err := coraldht.WriteKeyFile(key); err != nil {
		t.Fatal(err)
	}
	if configHash(cfg) == h {
		t.Error("a new key in the same file hashes the same")
	}
}

// TestNotReadyWhenDrainingOrNotJoined (issue 22, defect 5): ready says no
// while the node has not joined (a bootstrap that never answers), and
// while it drains; live_proxies reads 0 while not joined.
func TestNotReadyWhenDrainingOrNotJoined(t *testing.T) {
	drainFile := filepath.Join(t.TempDir(), "drain")
	cfg := parseTest(t, "coral nyucd.test {\nlisten 127.0.140.22:4100\ncheck_interval 100ms\nlive_within 1s\ndrain_file "+drainFile+"\n}")
	cr := newCoral(cfg, Options{})
	if err := cr.Start(); err != nil {
		t.Fatal(err)
	}
	defer cr.Stop()
	waitFor(t, "ready", cr.Ready)
	if err := os.WriteFile(drainFile, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "not ready while draining", func() bool { return !cr.Ready() })
	if cr.entry.node().Contact().Services != 0 {
		t.Error("the draining node still advertises its name server")
	}
	if v, _ := gatherDefault(t, "coredns_coral_draining", map[string]string{"node": "127.0.140.22:4100"}); v != 1 {
		t.Errorf("coredns_coral_draining = %v, want 1", v)
	}
	if err := os.Remove(drainFile); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "ready after the drain", cr.Ready)

	lonely := parseTest(t, "coral nyucd.test {\nlisten 127.0.140.23:4100\nbootstrap 127.0.140.24:4100\ncheck_interval 100ms\n}")
	cl := newCoral(lonely, Options{})
	if err := cl.Start(); err != nil {
		t.Fatal(err)
	}
	defer cl.Stop()
	// A sweep result as a previous run (before a key change) left it.
	set := &liveSet{at: time.Now(), proxy: [][]coraldht.NodeInfo{{{LastHeard: time.Now()}}, nil, nil}, dns: make([][]coraldht.NodeInfo, 3)}
	recordLive(cl.entry.listen, set, cl.tracker)
	if v, _ := gatherDefault(t, "coredns_coral_live_proxies", map[string]string{"node": "127.0.140.23:4100", "level": "0"}); v != 0 {
		t.Errorf("live_proxies of a node that has not joined: %v, want 0", v)
	}
	if cl.Ready() {
		t.Error("ready without having joined")
	}
}

// waitFor polls cond (state that background goroutines change) for up to
// 10 s.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestDrainOnShutdown: with drain set, the shutdown hook drains the node
// and holds the shutdown for the drain's duration; without, it returns at
// once.
func TestDrainOnShutdown(t *testing.T) {
	cfg := parseTest(t, "coral nyucd.test {\nlisten 127.0.140.25:4100\ndrain 200ms\n}")
	cr := newCoral(cfg, Options{})
	if err := cr.Start(); err != nil {
		t.Fatal(err)
	}
	defer cr.Stop()
	start := time.Now()
	if err := drainOnShutdown(caddy.ShutdownEvent, nil); err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < 200*time.Millisecond {
		t.Errorf("the shutdown was held %v, want the 200ms drain", took)
	}
	if !cr.entry.handle.Draining() || cr.Ready() {
		t.Error("not draining after the shutdown hook")
	}
	if err := drainOnShutdown(caddy.InstanceStartupEvent, nil); err != nil {
		t.Error(err)
	}
}
