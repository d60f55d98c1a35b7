//go:build linux

package identitylab

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/netns/coralnet"
)

// poll is the lab's revocation list poll interval.
const poll = 2 * time.Second

// revoked is the node the operations guide's revoke block names.
const revoked = "node3"

func missing(t *testing.T, err error) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatalf("CI: %v", err)
	}
	t.Skipf("skipping: %v", err)
}

func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// guideBlocks returns the command blocks of docs/operations.md marked
// `<!-- identity: NAME -->` on the line before their fence.
func guideBlocks(t *testing.T) map[string]string {
	t.Helper()
	blocks, err := labconf.MarkedBlocks(filepath.Join(repoRoot(t), "docs/operations.md"), "identity")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"init", "issue", "revoke"} {
		if blocks[want] == "" {
			t.Fatalf("docs/operations.md has no identity block %q", want)
		}
	}
	return blocks
}

// fleetTool builds cmd/coral-fleet and returns the directory it is in.
func fleetTool(t *testing.T) string {
	t.Helper()
	dir := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(dir, "coral-fleet"), "./cmd/coral-fleet")
	build.Dir = repoRoot(t)
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building coral-fleet: %v\n%s", err, out)
	}
	return dir
}

// sh runs a block of the guide, as written, in dir.
func sh(t *testing.T, dir, path, block string) string {
	t.Helper()
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "PATH="+path+":"+os.Getenv("PATH"))
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s: %v\n%s", block, err, out)
	}
	return string(out)
}

// clients fetch the origin's objects through the proxies their DNS
// answers name, until stopped, and count what failed.
type clients struct {
	ok, failed atomic.Int64
	mu         sync.Mutex
	errs       []string
	stop       chan struct{}
	wg         sync.WaitGroup
}

func startClients(n *coralnet.Net) *clients {
	c := &clients{stop: make(chan struct{})}
	for i, cl := range n.Clients {
		c.wg.Go(func() {
			hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: cl.Host.DialContext}}
			for k := 0; ; k++ {
				select {
				case <-c.stop:
					return
				case <-time.After(50 * time.Millisecond):
				}
				ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
				err := fetch(ctx, hc, cl, fmt.Sprintf("/obj-%d", (i*7+k)%24))
				cancel()
				if err != nil {
					c.failed.Add(1)
					c.mu.Lock()
					c.errs = append(c.errs, err.Error())
					c.mu.Unlock()
				} else {
					c.ok.Add(1)
				}
			}
		})
	}
	return c
}

func fetch(ctx context.Context, hc *http.Client, cl *coralnet.Client, path string) error {
	addrs, _, err := cl.Lookup(ctx, coralnet.CoralHost())
	if err != nil {
		return fmt.Errorf("%s: lookup: %w", cl.Host.Name, err)
	}
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+addrs[0].String()+path, nil)
	req.Host = coralnet.CoralHost()
	resp, err := hc.Do(req)
	if err != nil {
		return fmt.Errorf("%s via %v: %w", cl.Host.Name, addrs[0], err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK || string(b) != "object "+path {
		return fmt.Errorf("%s via %v: %s %q", cl.Host.Name, addrs[0], resp.Status, b)
	}
	return nil
}

// TestRevokeOneNode is issue 35's acceptance in the lab of separate
// hosts: six nodes (bin/coredns and bin/caddy each, so twelve DSHT nodes)
// in node identity mode, set up with the operations guide's coral-fleet
// blocks. One node is revoked with the guide's revoke block, the list
// copied to every other node and the node's name server taken out of the
// delegation (stopped), as the guide says: every other node installs the
// list within one poll interval, their name servers stop handing the
// revoked proxy out, they drop the datagrams the revoked node goes on
// sending, and the clients fetching all along see no failure.
func TestRevokeOneNode(t *testing.T) {
	if testing.Short() {
		t.Skip("skipping: -short")
	}
	if err := coralnet.Available(); err != nil {
		missing(t, err)
	}
	bins := map[string]string{}
	for _, b := range []string{"coredns", "caddy"} {
		p, err := labconf.Binary(b)
		if err != nil {
			missing(t, err)
		}
		bins[b] = p
	}
	blocks := guideBlocks(t)
	tool := fleetTool(t)
	work := t.TempDir()
	sh(t, work, tool, blocks["init"])
	issue := blocks["issue"]
	for i := range 6 {
		sh(t, work, tool, strings.ReplaceAll(issue, revoked, fmt.Sprintf("node%d", i)))
	}
	fleetDir := filepath.Join(work, "fleet")
	lists := map[string]string{}
	origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = io.WriteString(w, "object "+r.URL.Path)
	})
	ctx := context.Background()
	n, err := coralnet.Start(ctx, coralnet.Options{Dir: t.TempDir(), Nodes: 6, Clients: 4, CoreDNS: bins["coredns"], Caddy: bins["caddy"],
		Origin: origin, Logf: t.Logf,
		NodeOptions: func(i int, name string) []labconf.Directive {
			// As the guide says to configure a node: its certificate
			// and key, the fleet's public key, the revocation list
			// (not there yet), here read every 2 s.
			lists[name] = filepath.Join(work, name+"-revoked.list")
			return []labconf.Directive{
				labconf.D("identity", filepath.Join(fleetDir, "nodes", name+".cert"), filepath.Join(fleetDir, "nodes", name+".key")),
				labconf.D("fleet", filepath.Join(fleetDir, "fleet.pub")),
				labconf.D("revocations", lists[name], poll.String()),
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
	})
	var bad *coralnet.Node
	var others []*coralnet.Node
	for _, nd := range n.Nodes {
		if nd.Host.Name == revoked {
			bad = nd
		} else {
			others = append(others, nd)
		}
	}
	metric := func(nd *coralnet.Node, port uint16, name, key, val string) float64 {
		t.Helper()
		v, err := n.Metric(ctx, nd, port, name, key, val)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	servers := []struct {
		port   uint16
		prefix string
	}{{coralnet.PortMetrics, "coredns_coral_dht_"}, {coralnet.PortAdmin, "caddy_coral_dht_"}}
	for _, nd := range n.Nodes {
		for _, s := range servers {
			if metric(nd, s.port, s.prefix+"identity_certificate_expiry_seconds", "", "") == 0 {
				t.Fatalf("%s (%s) does not run in identity mode", nd.Host.Name, s.prefix)
			}
		}
	}

	cl := startClients(n)
	time.Sleep(5 * time.Second) // traffic before the revocation

	sh(t, work, tool, blocks["revoke"])
	list, err := os.ReadFile(filepath.Join(fleetDir, "revoked.list"))
	if err != nil {
		t.Fatal(err)
	}
	// Distributed as configuration management would: onto every node but
	// the revoked one, which, compromised, would not install a list that
	// cuts it off; it goes on as before and its datagrams show it.
	for _, nd := range others {
		tmp := lists[nd.Host.Name] + ".new"
		if err := os.WriteFile(tmp, list, 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, lists[nd.Host.Name]); err != nil {
			t.Fatal(err)
		}
	}
	distributed := time.Now()
	// And, as the guide says, out of the delegation: its name server, cut
	// off from the DSHT, would soon know no live proxy to answer with.
	// Its proxy keeps running: clients that hold its address still get
	// their objects (from the origin).
	if err := n.StopDNS(bad); err != nil {
		t.Fatal(err)
	}

	// Every other node's servers install the list within one poll
	// interval (plus the time to scrape them all).
	installedBy := map[string]time.Duration{}
	deadline := distributed.Add(3 * poll)
	for len(installedBy) < 2*len(others) {
		for _, nd := range others {
			for _, s := range servers {
				k := nd.Host.Name + "/" + s.prefix
				if _, ok := installedBy[k]; !ok && metric(nd, s.port, s.prefix+"identity_revocation_list", "", "") == 1 {
					installedBy[k] = time.Since(distributed)
				}
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("after %v, only %d of %d servers installed the list: %v", 3*poll, len(installedBy), 2*len(others), installedBy)
		}
		time.Sleep(100 * time.Millisecond)
	}
	slowest := time.Duration(0)
	for _, d := range installedBy {
		slowest = max(slowest, d)
	}
	// A scrape of 10 servers takes a few hundred ms; the bound is the
	// poll interval and one round of scrapes.
	if slowest > poll+time.Second {
		t.Errorf("the slowest server installed the list %v after it was distributed; the poll interval is %v", slowest, poll)
	}
	t.Logf("list installed on every other server within %v (poll interval %v): %v", slowest.Round(time.Millisecond), poll, installedBy)

	// The revoked node at work: its proxy asked for objects it does not
	// have sends its put+gets to the others (it may take its lookups'
	// timeouts before it goes to the origin: these are not the clients').
	var probes sync.WaitGroup
	for k := range 3 {
		probes.Go(func() {
			hc := &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{DialContext: n.Control.DialContext}}
			req, _ := http.NewRequest(http.MethodGet, fmt.Sprintf("http://%s/fresh-%d", bad.Addr(), k), nil)
			req.Host = coralnet.CoralHost()
			if resp, err := hc.Do(req); err == nil {
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
			}
		})
	}
	// Dropped: the revoked node's datagrams are refused everywhere, and
	// its proxy leaves every other name server's live set.
	wctx, cancel := context.WithTimeout(ctx, 45*time.Second)
	defer cancel()
	for _, nd := range others {
		for {
			live := metric(nd, coralnet.PortMetrics, "coredns_coral_live_proxies", "level", "0")
			drops := metric(nd, coralnet.PortMetrics, "coredns_coral_dht_drops_total", "reason", "revoked") +
				metric(nd, coralnet.PortAdmin, "caddy_coral_dht_drops_total", "reason", "revoked")
			if int(live) == len(others) && drops > 0 {
				break
			}
			select {
			case <-wctx.Done():
				t.Fatalf("%s: %v live proxies (want %d), %v datagrams dropped as revoked", nd.Host.Name, live, len(others), drops)
			case <-time.After(200 * time.Millisecond):
			}
		}
	}
	t.Logf("every other node drops %s's datagrams and no longer hands out its proxy, %v after the list was distributed",
		revoked, time.Since(distributed).Round(time.Millisecond))
	probes.Wait()

	time.Sleep(10 * time.Second) // clients after the revocation
	close(cl.stop)
	cl.wg.Wait()
	if f := cl.failed.Load(); f != 0 || cl.ok.Load() < 100 {
		t.Fatalf("clients: %d fetches ok, %d failed: %v", cl.ok.Load(), f, cl.errs[:min(len(cl.errs), 5)])
	}
	t.Logf("clients: %d fetches, none failed", cl.ok.Load())
	if err := n.Check(); err != nil {
		t.Fatal(err)
	}
}
