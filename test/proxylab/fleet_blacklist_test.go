package proxylab

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
)

// The fleet blacklist lab: three nodes on 127.0.186.1–.3 (node 1's
// admin API on localhost:2019, where the operations guide's publish
// block sends the list), each serving its list to the others with
// coral_blacklist on port 8091, and the publisher's web server on
// 127.0.186.100:8099.
var (
	blacklistNodeIPs = []netip.Addr{netip.MustParseAddr("127.0.186.1"), netip.MustParseAddr("127.0.186.2"), netip.MustParseAddr("127.0.186.3")}
	blacklistServer  = netip.MustParseAddrPort("127.0.186.100:8099")
	node1Admin       = netip.MustParseAddrPort("127.0.0.1:2019") // localhost:2019
)

const (
	blacklistPeerPort = 8091
	// blacklistPoll is the nodes' poll interval: one publish must reach
	// every node within it.
	blacklistPoll = 2 * time.Second
	// fetchAllowance is what a fetch may take on top of the interval
	// (a loopback GET of a few hundred bytes, and its verification) on a
	// loaded machine.
	fetchAllowance = time.Second
)

// blacklistGuideBlocks returns docs/operations.md's blocks marked
// `<!-- blacklist: NAME -->` on the line before their fence: the
// operator's commands, which this lab runs as written.
func blacklistGuideBlocks(t *testing.T) map[string]string {
	t.Helper()
	root, err := labconf.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	blocks, err := labconf.MarkedBlocks(filepath.Join(root, "docs/operations.md"), "blacklist")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"keygen", "sign", "publish", "check"} {
		if blocks[want] == "" {
			t.Fatalf("docs/operations.md has no blacklist block %q", want)
		}
	}
	return blocks
}

// operator runs the guide's blocks in a directory of the operator's
// machine, with bin/caddy as caddy.
type operator struct {
	t   *testing.T
	dir string
	bin string
}

func (o operator) run(block string) (string, error) {
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Dir = o.dir
	cmd.Env = append(os.Environ(), "PATH="+filepath.Dir(o.bin)+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func (o operator) must(block string) string {
	o.t.Helper()
	out, err := o.run(block)
	if err != nil {
		o.t.Fatalf("%s: %v\n%s", block, err, out)
	}
	return out
}

// listServer is the publisher's web server: it serves a directory, and
// can be taken down and brought back on the same address.
type listServer struct {
	t   *testing.T
	srv *http.Server
}

func startListServer(t *testing.T, dir string) *listServer {
	t.Helper()
	ln, err := net.Listen("tcp", blacklistServer.String())
	if err != nil {
		t.Fatalf("list server: %v", err)
	}
	s := &listServer{t: t, srv: &http.Server{Handler: http.FileServer(http.Dir(dir)), ReadHeaderTimeout: 5 * time.Second}}
	go s.srv.Serve(ln)
	t.Cleanup(s.stop)
	return s
}

func (s *listServer) stop() { s.srv.Close() }

// blacklistNode is one bin/caddy of the lab.
type blacklistNode struct {
	*proxy
	admin netip.AddrPort
}

// startBlacklistNode starts node i with the lab's fleet_blacklist; dir
// keeps its cache, state and log across restarts.
func startBlacklistNode(t *testing.T, i int, dir, pub string) *blacklistNode {
	t.Helper()
	bin := caddyBinary(t)
	ip := blacklistNodeIPs[i]
	admin := netip.AddrPortFrom(ip, adminPort)
	if i == 0 {
		admin = node1Admin
	}
	node := labconf.Node{Listen: netip.AddrPortFrom(ip, dhtPort)}
	if i > 0 {
		node.Bootstrap = []netip.AddrPort{netip.AddrPortFrom(blacklistNodeIPs[0], dhtPort)}
	}
	var peers []string
	for j, p := range blacklistNodeIPs {
		if j != i {
			peers = append(peers, fmt.Sprintf("http://%s/", netip.AddrPortFrom(p, blacklistPeerPort)))
		}
	}
	px := labconf.Proxy{Zone: zone, CacheDir: filepath.Join(dir, "cache"), RateLimit: "off", Extra: []labconf.Directive{
		labconf.D("fleet_blacklist", pub).With(
			labconf.D("from", "http://"+blacklistServer.String()+"/blacklist.signed"),
			labconf.D("from", peers),
			labconf.D("poll", blacklistPoll.String()),
			labconf.D("state", filepath.Join(dir, "blacklist.state"))),
	}}
	cfg := labconf.Caddy{
		Admin:        admin,
		AdminOrigins: []string{fmt.Sprintf("localhost:%d", admin.Port()), admin.String()},
		HTTPSOff:     true,
		SkipTrust:    true,
		Grace:        "1s",
		Options:      []labconf.Directive{labconf.D("log").With(labconf.D("exclude", "admin.api"))},
		Coral:        node,
		Sites: []labconf.Directive{
			labconf.D(fmt.Sprintf(":%d", httpPort)).With(labconf.D("bind", ip), px.Directive()),
			labconf.D(fmt.Sprintf(":%d", blacklistPeerPort)).With(labconf.D("bind", ip), labconf.D("coral_blacklist")),
		},
	}.String()
	path := filepath.Join(dir, "Caddyfile")
	if err := labconf.WriteFile(path, cfg); err != nil {
		t.Fatal(err)
	}
	name := fmt.Sprintf("node%d", i+1)
	pr, err := proc.Start(labconf.CaddyArgv(bin, path), proc.Options{Name: name, Dir: dir, Env: labconf.CaddyEnv(dir), Log: filepath.Join(dir, "caddy.log")})
	if err != nil {
		t.Fatal(err)
	}
	n := &blacklistNode{proxy: &proxy{name: name, ip: ip, proc: pr, dir: dir}, admin: admin}
	t.Cleanup(func() {
		n.stop()
		if t.Failed() || os.Getenv("PROXYLAB_LOG") != "" {
			n.dumpLog(t, 80)
		}
	})
	return n
}

// fleetStatus is the part of GET /coral/blacklist the lab reads.
type fleetStatus struct {
	Version   uint64    `json:"version"`
	Entries   int       `json:"entries"`
	Installed time.Time `json:"installed"`
	Confirmed time.Time `json:"confirmed"`
	Sources   []struct {
		Source      string `json:"source"`
		LastOutcome string `json:"last_outcome"`
		LastError   string `json:"last_error"`
	} `json:"sources"`
	Outcomes map[string]int64 `json:"outcomes"`
}

func (n *blacklistNode) get(path string) (*http.Response, []byte, error) {
	req, err := http.NewRequest(http.MethodGet, "http://"+n.admin.String()+path, nil)
	if err != nil {
		return nil, nil, err
	}
	req.Host = fmt.Sprintf("localhost:%d", n.admin.Port())
	resp, err := adminClient.Do(req)
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

func (n *blacklistNode) fleet() (*fleetStatus, error) {
	resp, b, err := n.get("/coral/blacklist")
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: /coral/blacklist: %s: %s", n.name, resp.Status, b)
	}
	var s fleetStatus
	return &s, json.Unmarshal(b, &s)
}

// metric reads one series of the node's /metrics.
func (n *blacklistNode) metric(series string) (float64, error) {
	_, b, err := n.get("/metrics")
	if err != nil {
		return 0, err
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return strconv.ParseFloat(strings.TrimSpace(v), 64)
		}
	}
	return 0, fmt.Errorf("%s: no %s in /metrics", n.name, series)
}

// source is what the node's status says of one source.
func (s *fleetStatus) source(url string) (outcome, lastErr string) {
	for _, src := range s.Sources {
		if src.Source == url {
			return src.LastOutcome, src.LastError
		}
	}
	return "", ""
}

// refuses checks that the node answers a Coralized request for origin
// with 403 and the blacklist's explanation.
func (n *blacklistNode) refuses(origin string) error {
	req, _ := http.NewRequest(http.MethodGet, n.base()+"/", nil)
	req.Host = origin + "." + zone
	resp, err := adminClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusForbidden || !strings.Contains(string(b), "blacklist") {
		return fmt.Errorf("%s: %s got %s %q, want 403 (blacklisted)", n.name, origin, resp.Status, b)
	}
	return nil
}

// TestFleetBlacklist is issue 41's fleet-wide blacklist on three real
// bin/caddy nodes, driven with the operations guide's commands: a list
// signed and put on the publisher's web server reaches every node
// within one poll interval; with the web server down, a list published
// on one node through its admin API reaches the others from it, and the
// unreachable server shows in each node's status and metrics while the
// last good list stays; a list signed by another key is refused (on the
// web server and through the admin API) and the last good list kept; a
// restarted node enforces its saved list before any fetch.
func TestFleetBlacklist(t *testing.T) {
	bin := caddyBinary(t)
	blocks := blacklistGuideBlocks(t)
	work := t.TempDir()
	op := operator{t: t, dir: work, bin: bin}

	op.must(blocks["keygen"])
	pub := filepath.Join(work, "publisher", "blacklist.pub")
	server := startListServer(t, work)
	listURL := "http://" + blacklistServer.String() + "/blacklist.signed"

	var nodes []*blacklistNode
	var procs []*proxy
	for i := range blacklistNodeIPs {
		n := startBlacklistNode(t, i, t.TempDir(), pub)
		nodes, procs = append(nodes, n), append(procs, n.proxy)
	}
	// Up, with nothing to fetch yet: the web server answers 404.
	waitFor(t, "nodes up without a list", 60*time.Second, procs, func() error {
		for _, n := range nodes {
			s, err := n.fleet()
			if err != nil {
				return err
			}
			if o, _ := s.source(listURL); s.Version != 0 || o != "unreachable" {
				return fmt.Errorf("%s: version %d, %s: %q", n.name, s.Version, listURL, o)
			}
		}
		return nil
	})

	// 1. Publish version 1 on the web server: every node has it within
	// one poll interval of the signing.
	writeList(t, work, "blocked-one.example   # lab: asked not to be served\n")
	published := time.Now()
	op.must(blocks["sign"])
	waitForVersion(t, nodes, procs, 1)
	var slowest time.Duration
	for _, n := range nodes {
		s, _ := n.fleet()
		took := s.Installed.Sub(published)
		slowest = max(slowest, took)
		if took > blacklistPoll+fetchAllowance {
			t.Errorf("%s installed version 1 %v after it was signed: more than one poll interval (%v) and a fetch (%v)", n.name, took, blacklistPoll, fetchAllowance)
		}
		if err := n.refuses("www.blocked-one.example"); err != nil {
			t.Error(err)
		}
	}
	t.Logf("version 1 reached all %d nodes %v after signing (poll interval %v)", len(nodes), slowest, blacklistPoll)

	// 2. The web server goes down; version 2 is published on node 1
	// through its admin API, and reaches the others from it.
	server.stop()
	unreachableBefore := make([]float64, len(nodes))
	for i, n := range nodes {
		unreachableBefore[i], _ = n.metric(`caddy_coral_blacklist_fetches_total{outcome="unreachable"}`)
	}
	writeList(t, work, "blocked-one.example   # lab: asked not to be served\nblocked-two.example expires=2099-01-01 # lab: the second\n")
	op.must(blocks["sign"])
	published = time.Now()
	if out := op.must(blocks["publish"]); !strings.Contains(out, "installed") || !strings.Contains(out, "version 2") {
		t.Fatalf("publish: %s", out)
	}
	waitForVersion(t, nodes, procs, 2)
	for _, n := range nodes[1:] {
		s, _ := n.fleet()
		if took := s.Installed.Sub(published); took > blacklistPoll+fetchAllowance {
			t.Errorf("%s installed version 2 from node 1 %v after it was published there: more than one poll interval", n.name, took)
		}
	}
	waitFor(t, "the unreachable web server in every node's status and metrics", 10*blacklistPoll, procs, func() error {
		for i, n := range nodes {
			s, err := n.fleet()
			if err != nil {
				return err
			}
			if o, e := s.source(listURL); o != "unreachable" || !strings.Contains(e, "connect") {
				return fmt.Errorf("%s: %s: %q %q", n.name, listURL, o, e)
			}
			v, err := n.metric(`caddy_coral_blacklist_fetches_total{outcome="unreachable"}`)
			if err != nil || v <= unreachableBefore[i] {
				return fmt.Errorf("%s: unreachable fetches %v (before %v): %v", n.name, v, unreachableBefore[i], err)
			}
			if v, err := n.metric("caddy_coral_blacklist_version"); err != nil || v != 2 {
				return fmt.Errorf("%s: caddy_coral_blacklist_version %v: %v", n.name, v, err)
			}
		}
		return nil
	})
	for _, n := range nodes {
		for _, origin := range []string{"www.blocked-one.example", "blocked-two.example"} {
			if err := n.refuses(origin); err != nil {
				t.Error(err)
			}
		}
	}
	if out := op.must(blocks["check"]); !strings.Contains(out, "version 2, ") || !strings.Contains(out, `"version":2`) ||
		!strings.Contains(out, "signature verified") {
		t.Errorf("the guide's check block:\n%s", out)
	}

	// 3. A list signed with another key: refused through the admin API,
	// and refused from the web server, back up and serving it; every
	// node keeps version 2.
	forger := operator{t: t, dir: t.TempDir(), bin: bin}
	forger.must(blocks["keygen"])
	writeList(t, forger.dir, "innocent.example\n")
	forger.must(blocks["sign"])
	forger.must(blocks["sign"])
	forger.must(blocks["sign"]) // version 3: newer than the fleet's, were it signed by the right key
	if out, err := forger.run(blocks["publish"]); err == nil || !strings.Contains(out, "forged") {
		t.Errorf("publishing a forged list: %v\n%s", err, out)
	}
	startListServer(t, forger.dir)
	forgedBefore := make([]float64, len(nodes))
	for i, n := range nodes {
		forgedBefore[i], _ = n.metric(`caddy_coral_blacklist_fetches_total{outcome="forged"}`)
	}
	waitFor(t, "the forged list refused by every node", 10*blacklistPoll, procs, func() error {
		for i, n := range nodes {
			s, err := n.fleet()
			if err != nil {
				return err
			}
			if o, e := s.source(listURL); o != "forged" || !strings.Contains(e, "not by a trusted publisher key") {
				return fmt.Errorf("%s: %s: %q %q", n.name, listURL, o, e)
			}
			if v, err := n.metric(`caddy_coral_blacklist_fetches_total{outcome="forged"}`); err != nil || v <= forgedBefore[i] {
				return fmt.Errorf("%s: forged %v: %v", n.name, v, err)
			}
			if s.Version != 2 {
				return fmt.Errorf("%s: version %d, want 2 kept", n.name, s.Version)
			}
		}
		return nil
	})
	for _, n := range nodes {
		if err := n.refuses("blocked-two.example"); err != nil {
			t.Error(err)
		}
	}

	// 4. Node 3 restarts: its saved list is in force from its first
	// answer, before any fetch could install one.
	last := nodes[2]
	last.stop()
	again := startBlacklistNode(t, 2, last.dir, pub)
	var first *fleetStatus
	waitFor(t, "node 3 back", 60*time.Second, []*proxy{again.proxy}, func() error {
		s, err := again.fleet()
		first = s
		return err
	})
	if first.Version != 2 || first.Outcomes["installed"] != 0 {
		t.Errorf("node 3 after a restart: version %d, %d installed: want version 2 from its state file", first.Version, first.Outcomes["installed"])
	}
	// (Its admin API answers before its sites listen.)
	waitFor(t, "node 3 refusing what its saved list names", 30*time.Second, []*proxy{again.proxy}, func() error {
		return again.refuses("blocked-two.example")
	})
}

func writeList(t *testing.T, dir, text string) {
	t.Helper()
	if err := os.WriteFile(filepath.Join(dir, "blacklist.txt"), []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
}

func waitForVersion(t *testing.T, nodes []*blacklistNode, procs []*proxy, version uint64) {
	t.Helper()
	waitFor(t, fmt.Sprintf("version %d at every node", version), 10*blacklistPoll, procs, func() error {
		var errs []error
		for _, n := range nodes {
			s, err := n.fleet()
			if err == nil && s.Version != version {
				err = fmt.Errorf("%s: version %d", n.name, s.Version)
			}
			errs = append(errs, err)
		}
		return errors.Join(errs...)
	})
}
