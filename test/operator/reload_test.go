package operator

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
)

// TestFailedReloadsCounted reloads a running bin/caddy with coral-reload,
// the command the packaged unit's ExecReload runs, through every kind of
// failure: a Caddyfile that does not adapt (a misspelt coral_proxy option,
// an unknown directive elsewhere), one that adapts but does not load (a
// missing blacklist file). Each shows in caddy_coral_reload_success 0
// and counts once in caddy_coral_reload_failures_total, so the shipped
// CoralReloadFailed alert fires; a good reload sets it back to 1. `caddy
// reload` cannot do this for the first kind: it adapts the file itself and
// the server never hears of it.
func TestFailedReloadsCounted(t *testing.T) {
	node := caddyNode{ap("127.0.146.21:2019"), ap("127.0.146.21:4000"), ap("127.0.146.21:8090")}
	dir := t.TempDir()
	// The Caddyfile imports a snippet by a path relative to itself, while
	// Caddy runs in another directory: the server adapts with the file's
	// name.
	if err := os.WriteFile(filepath.Join(dir, "proxy.caddy"), []byte("coral_proxy nyud.test {\n\tcache_dir "+filepath.Join(dir, "cache")+"\n}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	good := strings.Replace(node.caddyfile(dir), "\tcoral_proxy nyud.test {\n\t\tcache_dir "+filepath.Join(dir, "cache")+"\n\t}\n", "\timport proxy.caddy\n", 1)
	if !strings.Contains(good, "import proxy.caddy") {
		t.Fatalf("no import in:\n%s", good)
	}
	path := filepath.Join(dir, "Caddyfile")
	if err := labconf.WriteFile(path, good); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run")
	if err := os.Mkdir(run, 0o755); err != nil {
		t.Fatal(err)
	}
	bin := binary(t, "caddy")
	a := start(t, "caddy", run, labconf.CaddyArgv(bin, path)...)
	waitFor(t, a, 30*time.Second, "the proxy's admin API", node.adminUp)
	metrics := "http://" + node.admin.String() + "/metrics"
	read := func(series string) string {
		t.Helper()
		v, err := metric(metrics, node.admin.String(), series)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	if v := read("caddy_coral_reload_success"); v != "1" {
		t.Fatalf("at start: caddy_coral_reload_success %s", v)
	}

	reload := func(text string) (string, error) {
		if err := labconf.WriteFile(path, text); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "coral-reload", "--config", path, "--force").CombinedOutput()
		return string(out), err
	}
	failures := 0
	for _, tc := range []struct {
		name, text, says string
	}{
		{"misspelt coral_proxy option", strings.Replace(good, "import proxy.caddy", "import proxy.caddy\n\tcoral_proxy nyud.test {\n\t\tcache_sizee 1GiB\n\t}", 1), "cache_sizee"},
		{"unknown directive", strings.Replace(good, "import proxy.caddy", "import proxy.caddy\n\treverse_prox 127.0.0.1:1", 1), "reverse_prox"},
		{"missing blacklist", strings.Replace(good, "import proxy.caddy", "coral_proxy nyud.test {\n\t\tcache_dir "+filepath.Join(dir, "cache")+"\n\t\tblacklist "+filepath.Join(dir, "no-such-list")+"\n\t}", 1), "no-such-list"},
	} {
		out, err := reload(tc.text)
		if err == nil || !strings.Contains(out, tc.says) {
			t.Errorf("%s: coral-reload: %v, want a failure that says %q:\n%s", tc.name, err, tc.says, out)
		}
		failures++
		if v := read("caddy_coral_reload_success"); v != "0" {
			t.Errorf("%s: caddy_coral_reload_success %s, want 0", tc.name, v)
		}
		if v := read("caddy_coral_reload_failures_total"); v != strconv.Itoa(failures) {
			t.Errorf("%s: caddy_coral_reload_failures_total %s, want %d", tc.name, v, failures)
		}
		if err := node.adminUp(); err != nil {
			t.Errorf("%s: the previous configuration no longer runs: %v", tc.name, err)
		}
	}
	if out, err := reload(good); err != nil {
		t.Fatalf("the good configuration again: %v\n%s", err, out)
	}
	if v := read("caddy_coral_reload_success"); v != "1" {
		t.Errorf("after a good reload: caddy_coral_reload_success %s", v)
	}
	if v := read("caddy_config_last_reload_successful"); v != "1" {
		t.Errorf("after a good reload: caddy_config_last_reload_successful %s", v)
	}
}
