package deploy

import (
	"bufio"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// The units and what their packages install them as.
var units = []struct {
	name   string // file in deploy/systemd
	binary string // ExecStart's program, installed by the package
}{
	{"coral-dns.service", "/usr/bin/coral-coredns"},
	{"coral-proxy.service", "/usr/bin/coral-caddy"},
}

// maxExposure is the highest overall exposure `systemd-analyze security`
// may give a unit: below 2.0 is "OK" (both scored 1.6 with systemd 252;
// docs/operations.md records the scores).
const maxExposure = 2.0

// unitRoot lays out a file system root for systemd-analyze --root: the
// host's own system units (for the targets the units name), the units
// under test in /etc/systemd/system, and stand-ins for the binaries they
// run, so that verify checks the units, not whether the packages are
// installed on this machine.
func unitRoot(t *testing.T, edit func(name, text string) string) string {
	t.Helper()
	root := t.TempDir()
	sys := filepath.Join(root, "usr/lib/systemd/system")
	hostUnits := "/usr/lib/systemd/system"
	if _, err := os.Stat(filepath.Join(hostUnits, "sysinit.target")); err != nil {
		hostUnits = "/lib/systemd/system"
	}
	if err := os.CopyFS(sys, os.DirFS(hostUnits)); err != nil {
		t.Fatalf("copying the host's units: %v", err)
	}
	etc := filepath.Join(root, "etc/systemd/system")
	for _, dir := range []string{etc, filepath.Join(root, "usr/bin"), filepath.Join(root, "bin")} {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	for _, u := range units {
		b, err := os.ReadFile(repoFile(t, "deploy/systemd/"+u.name))
		if err != nil {
			t.Fatal(err)
		}
		text := string(b)
		if edit != nil {
			text = edit(u.name, text)
		}
		if err := os.WriteFile(filepath.Join(etc, u.name), []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(root, u.binary), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.WriteFile(filepath.Join(root, "bin/kill"), []byte("#!/bin/sh\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	return root
}

// verify runs `systemd-analyze verify` on the units under root and returns
// what it said: systemd reports unknown keys and bad values as warnings
// and exits 0, so any output at all is a finding.
func verify(t *testing.T, analyze, root string) (string, error) {
	t.Helper()
	args := []string{"verify", "--root=" + root}
	for _, u := range units {
		args = append(args, u.name)
	}
	out, err := exec.Command(analyze, args...).CombinedOutput()
	return strings.TrimSpace(string(out)), err
}

func TestUnitsVerify(t *testing.T) {
	analyze := systemdAnalyze(t)
	out, err := verify(t, analyze, unitRoot(t, nil))
	if err != nil || out != "" {
		t.Fatalf("systemd-analyze verify: %v\n%s", err, out)
	}

	// The guide's drop-in for a cache_dir outside the cache directory
	// (docs/operations.md, the block with ReadWritePaths), and the unit's
	// comment that says so: with it, the units still verify clean.
	dropIn := guideINIBlock(t)
	if !strings.Contains(dropIn, "ReadWritePaths=") {
		t.Fatalf("the guide's drop-in names no ReadWritePaths:\n%s", dropIn)
	}
	if unit, _ := os.ReadFile(repoFile(t, "deploy/systemd/coral-proxy.service")); !strings.Contains(string(unit), "ReadWritePaths=") {
		t.Error("coral-proxy.service does not say how to give another cache_dir (ReadWritePaths=)")
	}
	withDropIn := unitRoot(t, nil)
	dir := filepath.Join(withDropIn, "etc/systemd/system/coral-proxy.service.d")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "cache-dir.conf"), []byte(dropIn), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := verify(t, analyze, withDropIn); err != nil || out != "" {
		t.Errorf("systemd-analyze verify with the guide's drop-in: %v\n%s", err, out)
	}

	// The check itself must catch a mistake: a misspelled directive and a
	// bad value are only warnings to systemd.
	broken := unitRoot(t, func(name, text string) string {
		text = strings.Replace(text, "ProtectSystem=strict", "ProtectSytem=strict", 1)
		return strings.Replace(text, "Restart=on-failure", "Restart=sometimes", 1)
	})
	out, _ = verify(t, analyze, broken)
	for _, want := range []string{"Unknown key", "ProtectSytem", "sometimes"} {
		if !strings.Contains(out, want) {
			t.Errorf("verify of broken units said nothing about %q:\n%s", want, out)
		}
	}
}

var exposureLine = regexp.MustCompile(`Overall exposure level for (\S+): ([0-9.]+) (\S+)`)

func TestUnitsSecurity(t *testing.T) {
	analyze := systemdAnalyze(t)
	root := unitRoot(t, nil)
	for _, u := range units {
		out, err := exec.Command(analyze, "security", "--offline=yes", "--root="+root, u.name).CombinedOutput()
		if err != nil {
			t.Fatalf("systemd-analyze security %s: %v\n%s", u.name, err, out)
		}
		m := exposureLine.FindStringSubmatch(string(out))
		if m == nil || m[1] != u.name {
			t.Fatalf("no overall exposure for %s in:\n%s", u.name, out)
		}
		score, err := strconv.ParseFloat(m[2], 64)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("%s: exposure %.1f %s", u.name, score, m[3])
		if score >= maxExposure {
			t.Errorf("%s: exposure %.1f %s, want below %.1f:\n%s", u.name, score, m[3], maxExposure, out)
		}
	}
}

// unitDirectives reads a unit file's Key=Value lines, in order.
func unitDirectives(t *testing.T, name string) map[string][]string {
	t.Helper()
	f, err := os.Open(repoFile(t, "deploy/systemd/"+name))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	d := map[string][]string{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '[' {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if !ok {
			t.Fatalf("%s: not a directive: %q", name, line)
		}
		d[k] = append(d[k], v)
	}
	return d
}

// TestUnitsPromises checks what docs/operations.md says of the units and
// what a security score does not show: the service user, exactly the
// capabilities each server needs, a read-only system with the state and
// cache directories Caddy is told about, and a reload that reloads.
func TestUnitsPromises(t *testing.T) {
	want := map[string]map[string]string{
		"coral-dns.service": {
			"ExecStart":  "/usr/bin/coral-coredns -conf /etc/coral/Corefile",
			"ExecReload": "/bin/kill -USR1 $MAINPID",
		},
		"coral-proxy.service": {
			"ExecStart":            "/usr/bin/coral-caddy run --environ --config /etc/coral/Caddyfile --adapter caddyfile",
			"ExecReload":           "/usr/bin/coral-caddy coral-reload --config /etc/coral/Caddyfile --adapter caddyfile --force",
			"Type":                 "notify",
			"StateDirectory":       "coral-proxy",
			"CacheDirectory":       "coral-proxy",
			"RuntimeDirectory":     "coral-proxy",
			"RuntimeDirectoryMode": "0750",
		},
	}
	common := map[string]string{
		"User":                  "coral",
		"Group":                 "coral",
		"AmbientCapabilities":   "CAP_NET_BIND_SERVICE CAP_NET_RAW",
		"CapabilityBoundingSet": "CAP_NET_BIND_SERVICE CAP_NET_RAW",
		"NoNewPrivileges":       "yes",
		"ProtectSystem":         "strict",
		"ProtectHome":           "yes",
		"PrivateTmp":            "yes",
		"Restart":               "on-failure",
	}
	for name, w := range want {
		d := unitDirectives(t, name)
		for k, v := range common {
			w[k] = v
		}
		for k, v := range w {
			if got := d[k]; len(got) != 1 || got[0] != v {
				t.Errorf("%s: %s=%q, want %q", name, k, got, v)
			}
		}
	}
	// Go sizes its listen backlog from /proc/sys/net/core/somaxconn
	// (4096 on current kernels); ProcSubset=pid hides /proc/sys, and the
	// backlog falls back to 128, too short for a flash crowd.
	for name := range want {
		if v := unitDirectives(t, name)["ProcSubset"]; slices.Contains(v, "pid") {
			t.Errorf("%s: ProcSubset=pid hides /proc/sys/net/core/somaxconn from Go", name)
		}
	}
	// Caddy's storage and autosave go under XDG_DATA_HOME and
	// XDG_CONFIG_HOME; with neither set, a user without a home gets
	// "mkdir /nonexistent".
	env := unitDirectives(t, "coral-proxy.service")["Environment"]
	for _, v := range []string{"XDG_DATA_HOME=/var/lib/coral-proxy", "XDG_CONFIG_HOME=/var/lib/coral-proxy", "HOME=/var/lib/coral-proxy"} {
		if !slices.Contains(env, v) {
			t.Errorf("coral-proxy.service: no Environment=%s in %q", v, env)
		}
	}
}

// guideINIBlock is the one ```ini block of docs/operations.md: the
// drop-in it tells operators to write with systemctl edit.
func guideINIBlock(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile(repoFile(t, "docs/operations.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)\n```ini\n(.*?)```\n").FindAllStringSubmatch(string(b), -1)
	if len(blocks) != 1 {
		t.Fatalf("docs/operations.md has %d ini blocks, want the one drop-in", len(blocks))
	}
	return blocks[0][1]
}
