package docs

import (
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/internal/lab/labconf"
)

// repoRoot is the repository around the test.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := labconf.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// binary finds bin/NAME: without it the test skips, or fails under
// CI=true.
func binary(t *testing.T, name string) string {
	t.Helper()
	bin, err := labconf.Binary(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err.Error() + " (CI=true, so this is a failure, not a skip)")
		}
		t.Skip(err)
	}
	return bin
}

// readerEnv is the environment of a reader's terminal whose HOME (and
// with it Caddy's data and configuration directories) is home: the test's
// own, but for those, and with Go's caches where they were, so that a
// make line in the commands finds them warm.
func readerEnv(t *testing.T, home string) []string {
	t.Helper()
	out, err := exec.Command("go", "env", "GOCACHE", "GOMODCACHE", "GOPATH").Output()
	if err != nil {
		t.Fatalf("go env: %v", err)
	}
	v := strings.Split(strings.TrimSpace(string(out)), "\n")
	if len(v) != 3 {
		t.Fatalf("go env: %q", out)
	}
	return append(labconf.CaddyEnv(home), "GOCACHE="+v[0], "GOMODCACHE="+v[1], "GOPATH="+v[2])
}

// needTool returns a command's path, or skips (fails under CI=true).
func needTool(t *testing.T, name, from string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	msg := name + " is not installed (" + from + ")"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "; CI=true, so this is a failure, not a skip")
	}
	t.Skip(msg)
	return ""
}

// The sandbox is the machine a doc's commands and files assume, in a
// mount namespace of the test's own, so that nothing of this machine is
// read or changed: /etc, /run and /var are overlays (writes go to the test's
// directory), with
//
//	/etc/coral/network.key, network-next.key   two network keys (base64, 0640)
//	/etc/coral/blacklist                       empty
//	/run/coral, /run/coral-proxy               the units' runtime directories
//	/var/lib/coral-dns, /var/lib/coral-proxy   their state directories
//	/var/cache/coral-proxy                     the proxy's cache directory
//
// and the packages' program names on PATH: coral-caddy, coral-coredns and
// coral-check (bin/caddy, bin/coredns, bin/coral-check), and caddy.
type sandbox struct {
	dir      string // the test's directory for it (keys, overlays, logs)
	path     string // PATH inside
	keys     [2]string
	keyFP    [2]string // the keys' fingerprints, as the servers show them
	binaries map[string]string
}

// newSandbox prepares a sandbox's files; needs root (mount namespaces).
func newSandbox(t *testing.T) *sandbox {
	t.Helper()
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the doc sandbox needs root (a mount namespace); CI=true, so this is a failure")
		}
		t.Skip("the doc sandbox needs root (a mount namespace)")
	}
	needTool(t, "unshare", "Debian package util-linux")
	s := &sandbox{dir: t.TempDir(), binaries: map[string]string{
		"coral-caddy": binary(t, "caddy"), "caddy": binary(t, "caddy"),
		"coral-coredns": binary(t, "coredns"), "coral-check": binary(t, "coral-check"),
	}}
	bin := filepath.Join(s.dir, "bin")
	if err := os.Mkdir(bin, 0o755); err != nil {
		t.Fatal(err)
	}
	for name, target := range s.binaries {
		if err := os.Symlink(target, filepath.Join(bin, name)); err != nil {
			t.Fatal(err)
		}
	}
	s.path = bin + ":" + os.Getenv("PATH")
	for i := range s.keys {
		b := make([]byte, 32)
		rand.Read(b)
		s.keys[i] = base64.StdEncoding.EncodeToString(b) + "\n"
		path := filepath.Join(s.dir, fmt.Sprintf("key%d", i))
		if err := os.WriteFile(path, []byte(s.keys[i]), 0o600); err != nil {
			t.Fatal(err)
		}
		k, err := coraldht.LoadKeyFile(path)
		if err != nil {
			t.Fatal(err)
		}
		s.keyFP[i] = k.Fingerprint()
	}
	return s
}

// setup is the script that builds the sandbox inside the namespace.
func (s *sandbox) setup() string {
	var b strings.Builder
	fmt.Fprintf(&b, "S=%q\nmount -t tmpfs tmpfs \"$S/ov\"\n", s.dir)
	for _, d := range []string{"etc", "run", "var"} {
		fmt.Fprintf(&b, "mkdir -p \"$S/ov/%[1]s.up\" \"$S/ov/%[1]s.work\" && mount -t overlay overlay -o \"lowerdir=/%[1]s,upperdir=$S/ov/%[1]s.up,workdir=$S/ov/%[1]s.work\" /%[1]s\n", d)
	}
	b.WriteString(`install -d -m 0750 /etc/coral
install -m 0640 "$S/key0" /etc/coral/network.key
install -m 0640 "$S/key1" /etc/coral/network-next.key
install -m 0644 /dev/null /etc/coral/blacklist
install -d /run/coral /run/coral-proxy /var/lib/coral-dns /var/lib/coral-proxy /var/cache/coral-proxy
`)
	return b.String()
}

// terminal starts a terminal in the sandbox: in a new mount namespace,
// set up, in dir.
func (s *sandbox) terminal(t *testing.T, dir string, env ...string) *terminal {
	t.Helper()
	if err := os.MkdirAll(filepath.Join(s.dir, "ov"), 0o755); err != nil {
		t.Fatal(err)
	}
	env = append(readerEnv(t, s.dir), append([]string{"PATH=" + s.path}, env...)...)
	term := newTerminal(t, dir, env, "unshare", "--mount", "--propagation", "private")
	for _, c := range strings.Split(strings.TrimSpace(s.setup()), "\n") {
		if out, status, _ := term.send(c); status != 0 {
			t.Fatalf("sandbox set-up: %q exited %d: %s", c, status, out)
		}
	}
	return term
}
