package proxylab

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
)

// TestFailedReloadLeavesNodeRunning (issue 22, defect 1) on the real
// bin/caddy: `caddy reload` with a Caddyfile that changes the bootstrap and
// names a blacklist file that does not exist fails, and the node goes on
// as it was: the same run and bootstrap in /coral/status, the DSHT and
// cache metrics on /metrics, the failure in caddy_coral_reload_success,
// and fetches still served from the peer. Addresses 127.0.140.60–.62.
func TestFailedReloadLeavesNodeRunning(t *testing.T) {
	bin := caddyBinary(t)
	o := newOrigin(t)
	a, b := netip.MustParseAddr("127.0.140.60"), netip.MustParseAddr("127.0.140.61")
	ps := startNetwork(t, []netip.Addr{a, b}, proxyOptions{})
	pa, pb := ps[0], ps[1]
	c := newClient(t)

	viaPeer := func(path string) {
		t.Helper()
		uri := path + "?size=1000"
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		if _, _, err := fetch(c, pa, o.coralHost(), uri); err != nil {
			t.Fatal(err)
		}
		waitDownloads(t, pa)
		resp, err := c.Do(request(ctx, pb, o.coralHost(), uri))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if d := detail(resp.Header.Get("Cache-Status")); !strings.HasPrefix(d, "peer") || o.count(path) != 1 {
			t.Errorf("%s at B: Cache-Status %q, origin asked %d times; want it from the peer", path, resp.Header.Get("Cache-Status"), o.count(path))
		}
	}
	viaPeer("/reload/before")
	before, err := pb.status()
	if err != nil {
		t.Fatal(err)
	}
	metrics := pb.metrics(t)
	for _, m := range []string{"caddy_coral_dht_joined{", "caddy_coral_dht_routing_table_contacts{", "caddy_coral_cache_objects "} {
		if !strings.Contains(metrics, m) {
			t.Fatalf("B's /metrics before the reload lacks %s", m)
		}
	}

	bad := caddyfile(pb.dir, b, netip.MustParseAddr("127.0.140.62"), proxyOptions{extra: []string{"blacklist " + filepath.Join(pb.dir, "no-such-blacklist")}})
	badPath := filepath.Join(pb.dir, "Caddyfile.bad")
	if err := labconf.WriteFile(badPath, bad); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(bin, "reload", "--config", badPath, "--adapter", "caddyfile",
		"--address", netip.AddrPortFrom(b, adminPort).String()).CombinedOutput()
	if err == nil {
		t.Fatalf("caddy reload of a Caddyfile with a missing blacklist succeeded:\n%s", out)
	}
	if !strings.Contains(string(out), "no-such-blacklist") {
		t.Errorf("caddy reload's error does not name the missing file:\n%s", out)
	}

	after, err := pb.status()
	if err != nil {
		t.Fatal(err)
	}
	if !after.Node.Started.Equal(before.Node.Started) || fmt.Sprint(after.Node.Bootstrap) != fmt.Sprint(before.Node.Bootstrap) || !after.Node.Joined {
		t.Errorf("B's node after the failed reload: started %v bootstrap %v joined %v; before: started %v bootstrap %v",
			after.Node.Started, after.Node.Bootstrap, after.Node.Joined, before.Node.Started, before.Node.Bootstrap)
	}
	metrics = pb.metrics(t)
	for _, m := range []string{"caddy_coral_dht_joined{", "caddy_coral_dht_routing_table_contacts{", "caddy_coral_cache_objects ",
		"caddy_coral_reload_success 0", "caddy_coral_reload_failures_total 1"} {
		if !strings.Contains(metrics, m) {
			t.Errorf("B's /metrics after the failed reload lacks %q", m)
		}
	}
	viaPeer("/reload/after")
}

// metrics is the process's /metrics, as Prometheus scrapes it.
func (p *proxy) metrics(t *testing.T) string {
	t.Helper()
	req, err := http.NewRequest(http.MethodGet, "http://"+netip.AddrPortFrom(p.ip, adminPort).String()+"/metrics", nil)
	if err != nil {
		t.Fatal(err)
	}
	req.Host = fmt.Sprintf("localhost:%d", adminPort)
	resp, err := adminClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/metrics: %d %v", resp.StatusCode, err)
	}
	return string(b)
}
