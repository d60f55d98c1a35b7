package proxy

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coralcdn/coral/module/caddy/abuse"
	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// originOn starts an origin serving body (cacheable) on addr (a port of
// its own).
func originOn(t *testing.T, addr, body string) *httptest.Server {
	t.Helper()
	ln, err := net.Listen("tcp", addr+":0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		fmt.Fprint(w, body)
	}))
	srv.Listener.Close()
	srv.Listener = ln
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// TestFairSharesOfTheBudget: issue 41. Two origins behind one proxy with a
// short bandwidth budget, one hot: with fair shares the hot one's clients
// are redirected (coral-no-serve) once it has used its share while the
// small site keeps being served; with the per-node budget of before the
// hot one spends it all and the small site is redirected too. The hot
// origin is named (localhost), so its account is the address the proxy
// connected to, learned from its download (the test's dialer resolves
// hot.example to 127.0.0.1).
func TestFairSharesOfTheBudget(t *testing.T) {
	const limit, bigSize, smallSize = 100_000, 10_000, 1_000
	hot := originOn(t, "127.0.0.1", strings.Repeat("h", bigSize))
	small := originOn(t, "127.0.41.2", strings.Repeat("s", smallSize))
	hotPort := hot.Listener.Addr().(*net.TCPAddr).Port
	hotHost := fmt.Sprintf("hot.example.%d.nyud.test", hotPort)
	smallHost := fmt.Sprintf("127.0.41.2.%d.nyud.test", small.Listener.Addr().(*net.TCPAddr).Port)

	for _, mode := range []string{"fair", "node"} {
		t.Run(mode, func(t *testing.T) {
			var mu sync.Mutex
			decisions := map[abuse.Decision]int{}
			budget := abuse.NewFairBudget(limit, time.Hour, 0, 0)
			if mode == "node" {
				budget = abuse.NewBudget(limit, time.Hour)
			}
			controls := &abuse.Controls{Budget: budget, OnBudget: func(d abuse.Decision) {
				mu.Lock()
				decisions[d]++
				mu.Unlock()
			}}
			p := startLocalProxy(t, 0, func(c *Config, _ *diskcache.Options) {
				c.Abuse = controls
				c.AllowOrigins = append(c.AllowOrigins, prefixes("127.0.41.2/32")...)
			})
			tr := p.px.origin.Transport.(*http.Transport)
			dialer := &net.Dialer{Timeout: time.Second, Control: p.px.guard.control}
			tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
				if addr == fmt.Sprintf("hot.example:%d", hotPort) {
					addr = hot.Listener.Addr().String()
				}
				return dialer.DialContext(ctx, network, addr)
			}
			noRedirect := func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }
			p.srv.Client().CheckRedirect = noRedirect

			if resp, body := p.get(t, smallHost, "/s"); resp.StatusCode != http.StatusOK {
				t.Fatalf("small site's first request: %d %s", resp.StatusCode, body)
			}
			hotServed, hotRedirected := 0, 0
			for range 20 {
				resp, _ := p.get(t, hotHost, "/h")
				switch resp.StatusCode {
				case http.StatusOK:
					hotServed++
				case http.StatusFound:
					if loc := resp.Header.Get("Location"); !strings.HasSuffix(loc, "/h?coral-no-serve") || !strings.HasPrefix(loc, "http://hot.example:") {
						t.Errorf("redirect to %q", loc)
					}
					hotRedirected++
				default:
					t.Fatalf("hot origin: %d", resp.StatusCode)
				}
			}
			smallServed := 0
			for range 20 {
				if resp, body := p.get(t, smallHost, "/s"); resp.StatusCode == http.StatusOK && len(body) == smallSize {
					smallServed++
				}
			}
			mu.Lock()
			defer mu.Unlock()
			t.Logf("%s: hot served %d, redirected %d; small served %d of 21; decisions %v", mode, hotServed, hotRedirected, smallServed+1, decisions)
			switch mode {
			case "fair":
				// c = 50 000: the hot origin gets five 10 000-byte bodies,
				// the small one every request.
				if hotServed != 5 || smallServed != 20 {
					t.Errorf("fair: hot served %d (want 5), small served %d of 20 after the hot one was redirected (want 20)", hotServed, smallServed)
				}
				if decisions[abuse.WithinShare] != 26 || decisions[abuse.OverShare] != 15 || decisions[abuse.Exhausted] != 0 {
					t.Errorf("fair: decisions %v, want 26 within_share, 15 over_share", decisions)
				}
				_, accts := budget.Shares(time.Now())
				if len(accts) != 2 || accts[0].Account != "127.0.0.1" || accts[1].Account != "127.0.41.2" {
					t.Errorf("accounts %+v, want the hot origin's address and the small one's", accts)
				}
			case "node":
				// The first 10 hot bodies spend it (1 000 + 100 000 ≥
				// 100 000 after the tenth), then nothing is served.
				if hotServed != 10 || smallServed != 0 {
					t.Errorf("per node: hot served %d (want 10), small served %d (want 0)", hotServed, smallServed)
				}
				if decisions[abuse.Exhausted] != 30 || decisions[abuse.OverShare] != 0 {
					t.Errorf("per node: decisions %v, want 30 exhausted", decisions)
				}
			}
		})
	}
}
