package operator

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestCaddyValidateRefuses: `caddy validate`, the check operators run
// before a reload, refuses what the coral module cannot run, with a
// message that says what is wrong: a zone that is not a domain name, a
// negative duration, a node off loopback without a key (by the option's
// name, key).
func TestCaddyValidateRefuses(t *testing.T) {
	bin := binary(t, "caddy")
	for _, tc := range []struct{ name, site, global, want string }{
		{"zone", "coral_proxy not_a..zone", "", "not_a..zone\\\" is not a domain name"},
		{"negative duration", "coral_proxy nyud.test {\n\t\tdefault_ttl -5s\n\t}", "", "is negative: want 0 or more"},
		{"no key off loopback", "coral_proxy nyud.test", "listen 192.0.2.1:4000", "key is required unless the node listens on loopback"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			global := tc.global
			if global == "" {
				global = "listen 127.0.146.51:4000"
			}
			text := "{\n\tadmin off\n\tcoral {\n\t\t" + global + "\n\t}\n}\n\n:8090 {\n\t" + tc.site + "\n}\n"
			path := filepath.Join(dir, "Caddyfile")
			if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			cmd := exec.Command(bin, "validate", "--config", path, "--adapter", "caddyfile")
			cmd.Dir = dir
			cmd.Env = append(os.Environ(), "HOME="+dir, "XDG_DATA_HOME="+dir, "XDG_CONFIG_HOME="+dir)
			out, err := cmd.CombinedOutput()
			if err == nil || !strings.Contains(string(out), tc.want) {
				t.Errorf("caddy validate of\n%s: %v, want a failure saying %q:\n%s", text, err, tc.want, out)
			}
		})
	}
}
