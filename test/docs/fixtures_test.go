package docs

import (
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
)

// A fixture is the machine a `run` block's commands are pasted into: a
// terminal in some directory, with what the block assumes already
// running. Each doc block names its fixture in its marker; a new doc with
// commands that need something else adds a fixture here (and a line to
// README.md).
type fixture struct {
	about string
	start func(t *testing.T) *terminal
}

// Addresses of the fixtures' servers: 127.0.147.0/24 is this package's.
const (
	nodeAddr  = "127.0.147.1" // the node fixture (the packaged configuration)
	caddyAddr = "127.0.147.2" // the caddy fixture
)

var fixtures = map[string]fixture{
	"tmp": {"an empty directory", func(t *testing.T) *terminal {
		return newTerminal(t, t.TempDir(), nil)
	}},
	"repo": {"the repository's root (commands that only read it)", func(t *testing.T) *terminal {
		return newTerminal(t, repoRoot(t), nil)
	}},
	"caddy": {"the sandbox, and bin/caddy running a Coral proxy for nyud.net on " + caddyAddr +
		" with Caddy's default admin address (localhost:2019) and the key /etc/coral/network.key; " +
		"OLD_FP and NEW_FP are the fingerprints of network.key and network-next.key", startCaddyFixture},
	"node": {"the sandbox, and a node as the packages run it: deploy/examples' Caddyfile and Corefile in /etc/coral " +
		"with " + nodeAddr + " for 192.0.2.1 and for 127.0.0.1 and no bootstrap, the Corefile's coral block given " +
		"drain_file /run/coral/drain; coral-caddy and coral-coredns running on them (the admin API on " +
		"/run/coral-proxy/admin.sock)", startNodeFixture},
}

// fixtureNames lists the fixtures, for messages.
func fixtureNames() string {
	var names []string
	for n := range fixtures {
		names = append(names, n)
	}
	sort.Strings(names)
	return strings.Join(names, ", ")
}

func startCaddyFixture(t *testing.T) *terminal {
	s := newSandbox(t)
	dir := t.TempDir()
	caddyfile := fmt.Sprintf(`{
	coral {
		listen %[1]s:4000
		key /etc/coral/network.key
	}
}

:8090 {
	bind %[1]s
	coral_proxy nyud.net {
		cache_dir %[2]s
	}
}
`, caddyAddr, filepath.Join(dir, "cache"))
	if err := os.WriteFile(filepath.Join(dir, "Caddyfile"), []byte(caddyfile), 0o644); err != nil {
		t.Fatal(err)
	}
	term := s.terminal(t, dir, "OLD_FP="+s.keyFP[0], "NEW_FP="+s.keyFP[1])
	term.run("the caddy fixture", `caddy run --config Caddyfile >caddy.log 2>&1 &
curl -fsS --retry 30 --retry-connrefused --retry-delay 1 -o /dev/null localhost:2019/coral/health
`)
	return term
}

func startNodeFixture(t *testing.T) *terminal {
	s := newSandbox(t)
	dir := t.TempDir()
	root := repoRoot(t)
	term := s.terminal(t, dir)
	term.run("the node fixture", fmt.Sprintf(`addr=%[1]s
sed -e "s/192\.0\.2\.1/$addr/g" -e "s/127\.0\.0\.1/$addr/g" -e '/bootstrap/d' %[2]q/deploy/examples/Caddyfile >/etc/coral/Caddyfile
sed -e "s/192\.0\.2\.1/$addr/g" -e "s/127\.0\.0\.1/$addr/g" -e '/bootstrap/d' -e 's|^\( *\)\(listen .*\)$|\1\2\n\1drain_file /run/coral/drain|' %[2]q/deploy/examples/Corefile >/etc/coral/Corefile
grep -q drain_file /etc/coral/Corefile
(cd /var/lib/coral-proxy && HOME=/var/lib/coral-proxy XDG_DATA_HOME=/var/lib/coral-proxy XDG_CONFIG_HOME=/var/lib/coral-proxy exec coral-caddy run --config /etc/coral/Caddyfile --adapter caddyfile) >%[3]q/caddy.log 2>&1 &
(cd /var/lib/coral-dns && exec coral-coredns -conf /etc/coral/Corefile) >%[3]q/coredns.log 2>&1 &
curl -fsS --retry 30 --retry-connrefused --retry-delay 1 -o /dev/null --unix-socket /run/coral-proxy/admin.sock http://localhost/coral/health
curl -fsS --retry 30 --retry-connrefused --retry-delay 1 -o /dev/null http://$addr:8181/ready
`, nodeAddr, root, dir))
	return term
}
