package coralcaddy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/caddyconfig"
	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/coralcdn/coral/coraldht"
)

// TestFailedReloadKeepsNode (issue 22, defect 1): a reload that changes the
// node settings (bootstrap) and fails elsewhere (a blacklist file that
// does not exist) leaves the node as it was: the same run (not restarted),
// the old bootstrap, still joined and reachable, its metrics and the cache
// gauges still on /metrics, and the failure visible there and in
// /coral/status.
func TestFailedReloadKeepsNode(t *testing.T) {
	const port = 9373
	listen := netip.MustParseAddrPort("127.0.140.10:4173")
	bootstrap := netip.MustParseAddrPort("127.0.140.11:4173")
	dir := t.TempDir()

	cfg := coraldht.DefaultConfig()
	cfg.HintHops = 0
	tr, err := coraldht.ListenUDP(bootstrap.String())
	if err != nil {
		t.Fatal(err)
	}
	peer, err := coraldht.NewNode(cfg, tr)
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()

	tester := caddytest.NewTester(t)
	tester.InitServer(failedReloadConfig(port, listen, bootstrap, dir, ""), "caddyfile")
	before := waitJoinedStatus(t)
	node := runningNode()
	metricsBefore := adminGet(t, "/metrics")
	for _, m := range []string{"caddy_coral_cache_max_bytes", "caddy_coral_dht_routing_table_contacts{"} {
		if !strings.Contains(metricsBefore, m) || expositionValue(metricsBefore, "caddy_coral_dht_joined{") != "1" {
			t.Fatalf("/metrics before the reload lacks %s", m)
		}
	}

	bad := failedReloadConfig(port, listen, netip.MustParseAddrPort("127.0.140.12:4173"), dir,
		"blacklist "+filepath.Join(dir, "no-such-blacklist"))
	code, body := adminPost(t, "/load", bad)
	if code == http.StatusOK {
		t.Fatalf("the reload with a missing blacklist succeeded: %s", body)
	}
	if strings.Count(body, "coral_proxy: blacklist") > 1 {
		t.Errorf("the blacklist error is prefixed twice: %s", body)
	}

	after := coralStatus(t)
	if !after.Node.Started.Equal(*before.Node.Started) {
		t.Errorf("the failed reload restarted the node: started %v, then %v", before.Node.Started, after.Node.Started)
	}
	if fmt.Sprint(after.Node.Bootstrap) != fmt.Sprint(before.Node.Bootstrap) || !after.Node.Joined {
		t.Errorf("after the failed reload: bootstrap %v joined %v; want %v, joined", after.Node.Bootstrap, after.Node.Joined, before.Node.Bootstrap)
	}
	if n := runningNode(); n != node {
		t.Error("the handlers' node changed")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if _, err := node.Ping(ctx, bootstrap); err != nil {
		t.Errorf("the node no longer works after the failed reload: %v", err)
	}
	metricsAfter := adminGet(t, "/metrics")
	for _, m := range []string{"caddy_coral_cache_max_bytes", "caddy_coral_dht_routing_table_contacts{"} {
		if !strings.Contains(metricsAfter, m) {
			t.Errorf("/metrics after the failed reload lacks %s", m)
		}
	}
	if v := expositionValue(metricsAfter, "caddy_coral_dht_joined{"); v != "1" {
		t.Errorf("caddy_coral_dht_joined after the failed reload: %q, want 1", v)
	}
	if v := expositionValue(metricsAfter, "caddy_coral_reload_success "); v != "0" {
		t.Errorf("caddy_coral_reload_success after the failed reload: %q, want 0", v)
	}
	if v := expositionValue(metricsAfter, "caddy_coral_reload_failures_total "); v == "" || v == "0" {
		t.Errorf("caddy_coral_reload_failures_total after the failed reload: %q", v)
	}
	if !strings.Contains(adminGet(t, "/coral/status"), `"ok":false`) {
		t.Error("/coral/status does not show the failed reload")
	}

	// The good configuration again: accepted, and the node still the same.
	if code, body := adminPost(t, "/load", failedReloadConfig(port, listen, bootstrap, dir, "")); code != http.StatusOK && !strings.Contains(body, "unchanged") {
		t.Errorf("reloading the good configuration: %d %s", code, body)
	}
	if again := coralStatus(t); !again.Node.Started.Equal(*before.Node.Started) {
		t.Error("reloading the unchanged good configuration restarted the node")
	}

	// A key file that does not exist fails the coral app's own
	// provisioning (Caddy cleans it up at once): counted too.
	failures := expositionValue(adminGet(t, "/metrics"), "caddy_coral_reload_failures_total ")
	noKey := strings.Replace(failedReloadConfig(port, listen, bootstrap, dir, ""), "bootstrap", "key_file /nonexistent/network.key\n\t\t\tbootstrap", 1)
	if code, body := adminPost(t, "/load", noKey); code == http.StatusOK {
		t.Fatalf("a reload with a missing key file succeeded: %s", body)
	}
	if v := expositionValue(adminGet(t, "/metrics"), "caddy_coral_reload_failures_total "); v == failures {
		t.Errorf("a failed reload (missing key file) was not counted: failures %s, then %s", failures, v)
	}
	if again := coralStatus(t); !again.Node.Started.Equal(*before.Node.Started) || !again.Node.Joined {
		t.Error("a reload with a missing key file touched the node")
	}
}

// TestKeyChangeSeenByReload (issue 22, defect 2): the Caddyfile adapter
// records the key file's digest, so a new key in the same file is a new
// configuration to `caddy reload` and restarts the node with it.
func TestKeyChangeSeenByReload(t *testing.T) {
	dir := t.TempDir()
	key := filepath.Join(dir, "network.key")
	if err := coraldht.WriteKeyFile(key); err != nil {
		t.Fatal(err)
	}
	adapt := func() string {
		t.Helper()
		cf := fmt.Sprintf("{\n\tcoral {\n\t\tlisten 127.0.140.13:4000\n\t\tkey_file %s\n\t}\n}\n", key)
		out, err := adaptCaddyfile(cf)
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	first := adapt()
	if first != adapt() {
		t.Fatal("the same key adapted differently")
	}
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	if err := coraldht.WriteKeyFile(key); err != nil {
		t.Fatal(err)
	}
	if adapt() == first {
		t.Error("a new key in the same file adapts to the same JSON: `caddy reload` would say the config is unchanged")
	}
}

// waitJoinedStatus is /coral/status once the node has joined (it joins
// through a peer of the test, in milliseconds).
func waitJoinedStatus(t *testing.T) adminStatus {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for {
		st := coralStatus(t)
		if st.Node.Joined {
			return st
		}
		if time.Now().After(deadline) {
			t.Fatal("the node did not join")
		}
		<-time.After(20 * time.Millisecond)
	}
}

func adminGet(t *testing.T, path string) string {
	t.Helper()
	resp, err := http.Get("http://" + testAdmin + path)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func adminPost(t *testing.T, path, caddyfile string) (int, string) {
	t.Helper()
	resp, err := http.Post("http://"+testAdmin+path, "text/caddyfile", strings.NewReader(caddyfile))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func failedReloadConfig(port int, listen, bootstrap netip.AddrPort, dir, handlerExtra string) string {
	return fmt.Sprintf(`{
		skip_install_trust
		admin {$CORAL_TEST_ADMIN}
		http_port %[1]d
		grace_period 1ns
		coral {
			listen %[2]s
			bootstrap %[3]s
		}
	}
	:%[1]d {
		coral_proxy nyud.test {
			cache_dir %[4]s
			allow_origins 127.0.0.0/8 127.0.0.1
			%[5]s
		}
	}`, port, listen, bootstrap, dir, handlerExtra)
}

// adaptCaddyfile adapts a Caddyfile to JSON, as `caddy reload` does.
func adaptCaddyfile(cf string) (string, error) {
	out, _, err := caddyconfig.GetAdapter("caddyfile").Adapt([]byte(cf), nil)
	return string(out), err
}

// expositionValue is the value on the first line of a Prometheus text
// exposition that starts with prefix, or "".
func expositionValue(exposition, prefix string) string {
	for line := range strings.Lines(exposition) {
		if strings.HasPrefix(line, prefix) {
			f := strings.Fields(line)
			return f[len(f)-1]
		}
	}
	return ""
}

// TestKeyOption: `key PRIMARY ACCEPTED` adapts to key_file and
// accepted_key_files, and a new key in the accepted file changes the
// adapted JSON, so `caddy reload` applies it.
func TestKeyOption(t *testing.T) {
	dir := t.TempDir()
	primary, accepted := filepath.Join(dir, "new.key"), filepath.Join(dir, "old.key")
	for _, k := range []string{primary, accepted} {
		if err := coraldht.WriteKeyFile(k); err != nil {
			t.Fatal(err)
		}
	}
	adapt := func() string {
		t.Helper()
		out, err := adaptCaddyfile(fmt.Sprintf("{\n\tcoral {\n\t\tlisten 127.0.180.31:4000\n\t\tkey %s %s\n\t}\n}\n", primary, accepted))
		if err != nil {
			t.Fatal(err)
		}
		return out
	}
	first := adapt()
	want := fmt.Sprintf(`"key_file":%q,"accepted_key_files":[%q]`, primary, accepted)
	if !strings.Contains(first, want) {
		t.Fatalf("adapted JSON %s lacks %s", first, want)
	}
	if err := os.Remove(accepted); err != nil {
		t.Fatal(err)
	}
	if err := coraldht.WriteKeyFile(accepted); err != nil {
		t.Fatal(err)
	}
	if adapt() == first {
		t.Error("a new key in the accepted file adapts to the same JSON")
	}
	for _, bad := range []string{"key", "key a\n\t\tkey_file b", "key_file a b"} {
		if _, err := adaptCaddyfile("{\n\tcoral {\n\t\tlisten 127.0.180.31:4000\n\t\t" + bad + "\n\t}\n}\n"); err == nil {
			t.Errorf("%q adapted without an error", bad)
		}
	}
}
