package deploy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/coralcdn/coral/internal/lab/labconf"
)

// The lab's addresses, in 127.0.145.0/24: three nodes, their management
// addresses (none of them 127.0.0.1, where Caddy's admin API would let
// any Host through), the origin and the resolver.
var (
	labNodes    = []string{"127.0.145.1", "127.0.145.2", "127.0.145.3"}
	labMgmt     = []string{"127.0.145.11", "127.0.145.12", "127.0.145.13"}
	labOrigin   = "127.0.145.100:8080"
	labResolver = "127.0.145.53"
)

// The blocks of the guide's walk-through, in the order the lab runs them.
var walkthroughSteps = []string{"settings", "install", "key", "install-key", "configure", "start",
	"verify", "reload", "purge", "drain", "take-out", "uninstall"}

// labMounts are the directories that are a node's own: each command block
// of a node runs in a mount namespace where these are that node's.
var labMounts = []string{"/etc/coral", "/var/lib/coral-dns", "/var/lib/coral-proxy", "/var/cache/coral-proxy",
	"/run/coral", "/run/coral-proxy", "/run/coral-lab"}

// guideBlocks returns the fenced blocks of docs/operations.md marked with
// `<!-- walkthrough: NAME -->` on the line before their fence.
func guideBlocks(t *testing.T) map[string]string {
	t.Helper()
	blocks, err := labconf.MarkedBlocks(repoFile(t, "docs/operations.md"), "walkthrough")
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for n := range blocks {
		names = append(names, n)
	}
	slices.Sort(names)
	want := slices.Clone(walkthroughSteps)
	slices.Sort(want)
	if !slices.Equal(names, want) {
		t.Fatalf("docs/operations.md marks %q for the walk-through; the lab runs %q", names, walkthroughSteps)
	}
	return blocks
}

// TestGuideBlocks checks the walk-through's markers; that the guide shows
// the packages' configuration files as they are is test/docs's (the
// blocks' `same-as` markers).
func TestGuideBlocks(t *testing.T) {
	blocks := guideBlocks(t)
	if !strings.Contains(blocks["settings"], "NODE=") {
		t.Errorf("the settings block sets no NODE:\n%s", blocks["settings"])
	}
}

// lab is the walk-through's machine: three nodes, each its own directory
// for labMounts.
type lab struct {
	t     *testing.T
	work  string // the operator's working directory: bin/packages, network.key
	shim  string // directory with the lab's systemctl
	nodes []string
}

func (l *lab) nodeDir(i int) string { return filepath.Join(l.work, "node"+strconv.Itoa(i)) }

// settings are node i's values for the guide's settings block.
func (l *lab) settings(i int) string {
	// One peer at first, the other one added by the reload step.
	peer, added := labNodes[(i+1)%len(labNodes)], labNodes[(i+2)%len(labNodes)]
	host, port, _ := net.SplitHostPort(labOrigin)
	return fmt.Sprintf("NODE=%s\nPEERS=%q\nMGMT=%s\nORIGIN=%s.%s\nNEW_PEER=%s\n", labNodes[i], peer, labMgmt[i], host, port, added)
}

// run runs a script as node i (i < 0: the machine itself, no mounts) and
// returns its output; it fails the test if the script fails.
func (l *lab) run(i int, what, script string) string {
	l.t.Helper()
	var b strings.Builder
	b.WriteString("set -euo pipefail\n")
	args := []string{"bash", "-c"}
	if i >= 0 {
		args = []string{"unshare", "--mount", "--propagation", "private", "bash", "-c"}
		for _, m := range labMounts {
			fmt.Fprintf(&b, "mount --bind %q %q\n", filepath.Join(l.nodeDir(i), filepath.Base(filepath.Dir(m))+"-"+filepath.Base(m)), m)
		}
		b.WriteString(l.settings(i))
	}
	b.WriteString(script)
	var out []byte
	err := retryDpkgLock(func() error {
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, args[0], append(args[1:], b.String())...)
		cmd.Dir = l.work
		cmd.Env = append(os.Environ(), "PATH="+l.shim+":"+os.Getenv("PATH"))
		var err error
		out, err = cmd.CombinedOutput()
		return lockError(err, out)
	})
	if err != nil {
		l.t.Fatalf("%s on node %d: %v\n--- script\n%s--- output\n%s%s", what, i+1, err, b.String(), out, l.logs())
	}
	return string(out)
}

// logs returns the tails of every node's service logs.
func (l *lab) logs() string {
	var b strings.Builder
	for i := range l.nodes {
		logs, _ := filepath.Glob(filepath.Join(l.nodeDir(i), "run-coral-lab", "*.log"))
		for _, p := range logs {
			data, _ := os.ReadFile(p)
			lines := strings.Split(strings.TrimRight(string(data), "\n"), "\n")
			if len(lines) > 15 {
				lines = lines[len(lines)-15:]
			}
			fmt.Fprintf(&b, "\n--- node %d %s (tail)\n%s\n", i+1, filepath.Base(p), strings.Join(lines, "\n"))
		}
	}
	return b.String()
}

// pid returns the process id of node i's unit, or 0.
func (l *lab) pid(i int, unit string) int {
	b, err := os.ReadFile(filepath.Join(l.nodeDir(i), "run-coral-lab", unit+".pid"))
	if err != nil {
		return 0
	}
	pid, _ := strconv.Atoi(strings.TrimSpace(string(b)))
	return pid
}

func alive(pid int) bool { return pid > 0 && syscall.Kill(pid, 0) == nil }

// labOriginServer serves one page, counting requests.
func labOriginServer(t *testing.T) *atomic.Int64 {
	t.Helper()
	var hits atomic.Int64
	ln, err := net.Listen("tcp", labOrigin)
	if err != nil {
		t.Fatalf("origin: %v", err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		w.Header().Set("Cache-Control", "max-age=600")
		io.WriteString(w, "the walk-through's origin page\n")
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return &hits
}

// labUnbound starts Unbound on labResolver with stub zones for both
// zones pointing at the three name servers, as one would in front of a
// fleet not yet delegated.
func labUnbound(t *testing.T, dir string) {
	t.Helper()
	unbound := needTool(t, "unbound", "Debian package unbound: make deps")
	var stubs []string
	for _, a := range labNodes {
		stubs = append(stubs, "\tstub-addr: "+a)
	}
	conf := filepath.Join(dir, "unbound.conf")
	text := fmt.Sprintf(`server:
	directory: %[1]q
	chroot: ""
	username: ""
	pidfile: %[2]q
	use-syslog: no
	interface: %[3]s@53
	outgoing-interface: %[3]s
	do-ip6: no
	access-control: 127.0.0.0/8 allow
	do-not-query-localhost: no
	module-config: "iterator"
stub-zone:
	name: "nyucd.net"
%[4]s
stub-zone:
	name: "nyud.net"
%[4]s
`, dir, filepath.Join(dir, "unbound.pid"), labResolver, strings.Join(stubs, "\n"))
	if err := os.WriteFile(conf, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(unbound, "-d", "-c", conf)
	logf, err := os.Create(filepath.Join(dir, "unbound.log"))
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		cmd.Wait()
		logf.Close()
	})
}

// lookupA asks server for name's A records, following nothing.
func lookupA(server, name string) ([]string, error) {
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	m.RecursionDesired = true
	c := &dns.Client{Timeout: 3 * time.Second}
	in, _, err := c.Exchange(m, net.JoinHostPort(server, "53"))
	if err != nil {
		return nil, err
	}
	if in.Rcode != dns.RcodeSuccess {
		return nil, fmt.Errorf("%s from %s: %s", name, server, dns.RcodeToString[in.Rcode])
	}
	var addrs []string
	for _, rr := range in.Answer {
		if a, ok := rr.(*dns.A); ok {
			addrs = append(addrs, a.A.String())
		}
	}
	return addrs, nil
}

// fetch gets the origin's page at path through proxy addr and returns its
// Cache-Status.
func fetch(t *testing.T, addr, host, path string) string {
	t.Helper()
	req, _ := http.NewRequest("GET", "http://"+addr+path, nil)
	req.Host = host
	resp, err := (&http.Client{Timeout: 10 * time.Second}).Do(req)
	if err != nil {
		t.Fatalf("GET via %s: %v", addr, err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != 200 || string(body) != "the walk-through's origin page\n" {
		t.Fatalf("GET via %s: %s %q", addr, resp.Status, body)
	}
	return resp.Header.Get("Cache-Status")
}

// adminClient reaches a node's admin API on its unix socket.
func adminClient(socket string) *http.Client {
	return &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{
		DialContext: func(ctx context.Context, _, _ string) (net.Conn, error) {
			return (&net.Dialer{}).DialContext(ctx, "unix", socket)
		}}}
}

// waitCommitted waits until the proxy whose admin API is at socket holds
// the whole object (the download that served the client may still be
// committing it, and only then does the node announce it to its peers).
func waitCommitted(t *testing.T, socket, url string) {
	t.Helper()
	client := adminClient(socket)
	deadline := time.Now().Add(10 * time.Second)
	for {
		var page struct {
			Objects []struct {
				URL     string `json:"url"`
				Writing bool   `json:"writing"`
			} `json:"objects"`
		}
		resp, err := client.Get("http://localhost/coral/cache?limit=1000")
		if err == nil {
			err = json.NewDecoder(resp.Body).Decode(&page)
			resp.Body.Close()
		}
		if err == nil && slices.ContainsFunc(page.Objects, func(o struct {
			URL     string `json:"url"`
			Writing bool   `json:"writing"`
		}) bool {
			return o.URL == url && !o.Writing
		}) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not committed at %s within 10 s: %v %+v", url, socket, err, page.Objects)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// TestWalkthrough runs the guide's walk-through on three nodes: the
// packages installed with dpkg, each node's configuration written by the
// guide's commands into its own /etc/coral, the services started by what
// their units say, then checked from outside through Unbound, reloaded,
// purged, taken out and uninstalled.
func TestWalkthrough(t *testing.T) {
	if why := dpkgAllowed(); why != "" {
		t.Skip("the walk-through installs the packages: " + why)
	}
	for _, tool := range []string{"unshare", "setpriv", "dig", "curl"} {
		needTool(t, tool, "make deps")
	}
	blocks := guideBlocks(t)
	start := time.Now()
	debs := buildPackages(t, true)
	t.Logf("packages built in %v", time.Since(start).Round(time.Second))

	l := &lab{t: t, work: t.TempDir(), nodes: labNodes}
	l.shim = filepath.Join(l.work, "shim")
	if err := os.MkdirAll(filepath.Join(l.work, "bin/packages"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, d := range debs {
		if err := os.Symlink(d, filepath.Join(l.work, "bin/packages", filepath.Base(d))); err != nil {
			t.Fatal(err)
		}
	}
	shim, err := os.ReadFile(repoFile(t, "test/deploy/systemctl-shim.sh"))
	if err != nil {
		t.Fatal(err)
	}
	if err := os.MkdirAll(l.shim, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(l.shim, "systemctl"), shim, 0o755); err != nil {
		t.Fatal(err)
	}
	// Each node's own directories, and the machine's mount points for them.
	for i := range labNodes {
		for _, m := range labMounts {
			d := filepath.Join(l.nodeDir(i), filepath.Base(filepath.Dir(m))+"-"+filepath.Base(m))
			if err := os.MkdirAll(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, m := range labMounts {
		if exists(m) {
			t.Skipf("%s exists on this machine: the lab would take it over", m)
		}
	}
	for _, m := range labMounts {
		if err := os.MkdirAll(m, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	t.Cleanup(func() {
		for i := range labNodes {
			for _, u := range []string{"coral-proxy", "coral-dns"} {
				if pid := l.pid(i, u); alive(pid) {
					syscall.Kill(pid, syscall.SIGKILL)
				}
			}
		}
		exec.Command("dpkg", "--purge", "coral-dns", "coral-proxy").Run()
		for _, m := range labMounts {
			os.Remove(m)
		}
	})
	hits := labOriginServer(t)
	labUnbound(t, t.TempDir())
	host, port, _ := net.SplitHostPort(labOrigin)
	coralized := host + "." + port + ".nyud.net"

	// Install, configure and start every node.
	l.run(-1, "key", blocks["key"])
	for i := range labNodes {
		l.run(i, "install", blocks["install"])
		l.run(i, "install-key", blocks["install-key"])
		l.run(i, "configure", blocks["configure"])
		// What only a lab on one machine's loopback needs: peers and the
		// origin on private addresses.
		l.run(i, "lab options", `sed -i -e 's|^\t\tblacklist .*|&\n\t\tallow_peers 127.0.145.0/24\n\t\tallow_origins 127.0.145.100/32|' /etc/coral/Caddyfile
grep -q allow_peers /etc/coral/Caddyfile
coral-caddy validate --config /etc/coral/Caddyfile
`)
		l.run(i, "start", blocks["start"])
	}
	t.Logf("three nodes installed and started in %v", time.Since(start).Round(time.Second))
	for i := range labNodes {
		l.run(i, "verify", blocks["verify"])
	}
	t.Logf("three nodes verified in %v", time.Since(start).Round(time.Second))
	checkAdminSocket(t, l)
	// Caddy keeps its storage and autosave in the state directory: the
	// user's home is /nonexistent.
	for i := range labNodes {
		if p := filepath.Join(l.nodeDir(i), "lib-coral-proxy/caddy/autosave.json"); !exists(p) {
			t.Errorf("node %d: no autosave.json in /var/lib/coral-proxy/caddy", i+1)
		}
		if b, _ := os.ReadFile(filepath.Join(l.nodeDir(i), "run-coral-lab/coral-proxy.log")); strings.Contains(string(b), "/nonexistent") {
			t.Errorf("node %d: Caddy tried the user's home:\n%s", i+1, b)
		}
	}

	// From outside: through the resolver, the Coralized name resolves to
	// the fleet's proxies, and the proxies share what they fetched.
	addrs, err := lookupA(labResolver, coralized)
	if err != nil || len(addrs) == 0 {
		t.Fatalf("%s through Unbound: %v %v%s", coralized, addrs, err, l.logs())
	}
	for _, a := range addrs {
		if !slices.Contains(labNodes, a) {
			t.Errorf("Unbound's answer names %s, not a node: %v", a, addrs)
		}
	}
	// (A path the guide's verify step did not fetch everywhere.)
	before := hits.Load()
	fetch(t, labNodes[0], coralized, "/shared")
	waitCommitted(t, filepath.Join(l.nodeDir(0), "run-coral-proxy", "admin.sock"), "http://"+labOrigin+"/shared")
	status := fetch(t, labNodes[1], coralized, "/shared")
	t.Logf("node 2 after node 1: Cache-Status %s", status)
	if !strings.Contains(status, "peer") {
		t.Errorf("node 2 after node 1 fetched: Cache-Status %q, want it from its peer", status)
	}
	if n := hits.Load() - before; n > 1 {
		t.Errorf("the origin served the page %d times to two nodes, want at most once", n)
	}

	// Reload: the processes stay, the new settings take.
	pids := []int{l.pid(0, "coral-dns"), l.pid(0, "coral-proxy")}
	for i := range labNodes {
		l.run(i, "reload", blocks["reload"])
	}
	if now := []int{l.pid(0, "coral-dns"), l.pid(0, "coral-proxy")}; !alive(now[0]) || !alive(now[1]) || !slices.Equal(now, pids) {
		t.Errorf("after the reload node 1 runs %v, before %v: a reload must not restart", now, pids)
	}

	// Purge: the next request at node 1 goes to a peer or the origin, not
	// to its cache.
	out := l.run(0, "purge", blocks["purge"])
	t.Logf("purge: %s", strings.TrimSpace(out))
	if status := fetch(t, labNodes[0], coralized, "/"); strings.Contains(status, `detail="local"`) {
		t.Errorf("node 1 served its own copy after the purge: Cache-Status %q", status)
	}

	// Drain node 3: the name servers stop naming it while it still runs.
	takeOut := time.Now()
	{
		l.run(2, "drain", blocks["drain"])
		if addrs, err := lookupA(labNodes[0], coralized); err != nil || slices.Contains(addrs, labNodes[2]) {
			t.Errorf("after the drain node 1 answers %v %v, still naming node 3", addrs, err)
		}
		for _, u := range []string{"coral-dns", "coral-proxy"} {
			if pid := l.pid(2, u); !alive(pid) {
				t.Errorf("node 3's %s stopped during the drain", u)
			}
		}
		t.Logf("node 3 drained in %v", time.Since(takeOut).Round(time.Second))
		fetch(t, labNodes[2], coralized, "/") // a drained proxy still serves
	}

	// Take node 3 out: its processes end, and the name servers stop
	// naming it.
	l.run(2, "take-out", blocks["take-out"])
	for _, u := range []string{"coral-dns", "coral-proxy"} {
		if pid := l.pid(2, u); alive(pid) {
			t.Errorf("node 3's %s (%d) still runs after take-out", u, pid)
		}
	}
	deadline := time.Now().Add(40 * time.Second)
	for {
		addrs, err := lookupA(labNodes[0], coralized)
		if err == nil && len(addrs) > 0 && !slices.Contains(addrs, labNodes[2]) {
			t.Logf("node 1 stopped naming node 3 %v after the drain or take-out began", time.Since(takeOut).Round(100*time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("40 s after take-out node 1 still answers %v %v", addrs, err)
		}
		time.Sleep(500 * time.Millisecond)
	}
	fetch(t, labNodes[1], coralized, "/")

	// Uninstall: everything stopped first, then the packages purged.
	for i := range 2 {
		l.run(i, "take-out", blocks["take-out"])
	}
	l.run(-1, "uninstall", blocks["uninstall"])
	for _, f := range []string{"/usr/bin/coral-coredns", "/usr/bin/coral-caddy", "/etc/coral"} {
		if exists(f) && !slices.Contains(labMounts, f) {
			t.Errorf("%s still there after uninstall", f)
		}
	}
	if out, err := exec.Command("getent", "passwd", "coral").Output(); err == nil {
		t.Errorf("the coral user is still there after uninstall: %s", out)
	} else if ee := (*exec.ExitError)(nil); !errors.As(err, &ee) {
		t.Fatal(err)
	}
	t.Logf("walk-through done in %v", time.Since(start).Round(time.Second))
}

// checkAdminSocket: Caddy's admin API, which can load any configuration
// and install network keys, is a unix socket only root and the group coral
// reach (issue 34: as nobody, a local process installed its own key over
// TCP 127.0.0.1:2019). Node 1's socket is coral:coral 0660 in a directory
// of mode 0750; nobody's request is refused, root's answered.
func checkAdminSocket(t *testing.T, l *lab) {
	t.Helper()
	dir := filepath.Join(l.nodeDir(0), "run-coral-proxy")
	sock := filepath.Join(dir, "admin.sock")
	fi, err := os.Stat(sock)
	if err != nil || fi.Mode()&os.ModeSocket == 0 {
		t.Fatalf("node 1's admin socket: %v %v", fi, err)
	}
	if got := ownerMode(t, sock); got != "coral:coral 660" {
		t.Errorf("%s: %s, want coral:coral 660", sock, got)
	}
	if got := ownerMode(t, dir); got != "coral:coral 750" {
		t.Errorf("%s: %s, want coral:coral 750", dir, got)
	}
	out, err := exec.Command("setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--",
		"curl", "-sS", "--max-time", "5", "--unix-socket", sock, "-X", "POST", "--data-binary", "AAAA", "http://localhost/coral/keys/install").CombinedOutput()
	if err == nil {
		t.Errorf("nobody reached the admin API through %s:\n%s", sock, out)
	} else {
		t.Logf("nobody: %v: %s", err, strings.TrimSpace(string(out)))
	}
	resp, err := adminClient(sock).Get("http://localhost/coral/health")
	if err != nil {
		t.Fatalf("root: %v", err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("root asked node 1's health through its socket: %s", resp.Status)
	}
}
