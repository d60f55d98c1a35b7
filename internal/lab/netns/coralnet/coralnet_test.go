//go:build linux

package coralnet

import (
	"context"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
)

// A client host resolves the Coralized name through its region's Unbound
// and gets the origin's object from a proxy on another host.
func TestClientFetchesThroughAProxy(t *testing.T) {
	if err := Available(); err != nil {
		t.Skipf("skipping: %v", err)
	}
	coredns, err1 := labconf.Binary("coredns")
	caddy, err2 := labconf.Binary("caddy")
	if err1 != nil || err2 != nil {
		t.Skipf("skipping: %v %v", err1, err2)
	}
	origin := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "public, max-age=3600")
		_, _ = io.WriteString(w, "object "+r.URL.Path)
	})
	ctx := context.Background()
	n, err := Start(ctx, Options{Dir: t.TempDir(), Nodes: 4, Clients: 2, CoreDNS: coredns, Caddy: caddy, Origin: origin, Logf: t.Logf})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := n.Close(); err != nil {
			t.Error(err)
		}
		if left := n.Lab.Namespaces(); len(left) > 0 {
			t.Errorf("namespaces left: %v", left)
		}
	})
	for _, c := range n.Clients {
		addrs, ttl, err := c.Lookup(ctx, CoralHost())
		if err != nil {
			t.Fatal(err)
		}
		if ttl > AnswerTTL*time.Second {
			t.Errorf("TTL %v, want at most %ds", ttl, AnswerTTL)
		}
		hc := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: c.Host.DialContext}}
		req, _ := http.NewRequest(http.MethodGet, "http://"+addrs[0].String()+"/a", nil)
		req.Host = CoralHost()
		resp, err := hc.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		b, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != 200 || string(b) != "object /a" {
			t.Fatalf("%s from %v: %s %q", c.Host.Name, addrs, resp.Status, b)
		}
	}
	// A reload (Caddy through its admin API, CoreDNS through SIGUSR1)
	// leaves the node serving and in the network.
	nd := n.Nodes[1]
	if err := n.Reload(ctx, nd); err != nil {
		t.Fatal(err)
	}
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	if err := n.WaitReady(wctx); err != nil {
		t.Fatal(err)
	}
	if !nd.Running() {
		t.Fatal("node 1 not running after the reload")
	}
	nd.mu.Lock()
	caddyLog := nd.caddy.Log()
	nd.mu.Unlock()
	if !strings.Contains(caddyLog, "stopped previous server") {
		t.Errorf("Caddy's log shows no reload:\n%s", caddyLog)
	}
	// A drained node leaves the answers once the resolvers' copies
	// expire (the answer TTL); Drain itself returns once the other name
	// servers dropped it.
	drained := n.Nodes[2]
	if err := n.Drain(wctx, drained); err != nil {
		t.Fatal(err)
	}
	c := n.Clients[0]
	for {
		addrs, _, err := c.Lookup(wctx, CoralHost())
		if err == nil && !slices.Contains(addrs, drained.Addr()) {
			break
		}
		select {
		case <-wctx.Done():
			t.Fatalf("the drained node is still in the answers: %v %v", addrs, err)
		case <-time.After(250 * time.Millisecond):
		}
	}
}
