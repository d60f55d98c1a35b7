package proxylab

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"sync"
	"testing"
)

// TestOneClientAcrossManyOrigins: issue 34 finding 1 against the real
// bin/caddy. One client address asks, all at once, for 16 slow cacheable
// URLs on each of 16 origins: 16 names (a wildcard domain, through the
// proxy's own /etc/hosts) resolving to one address, each on its own port.
// It used to get all 256 download slots, and an unrelated user 503 after
// download_wait. Now it holds at most its share (max_client_downloads, an
// eighth of max_downloads: 32) and the unrelated user is served.
func TestOneClientAcrossManyOrigins(t *testing.T) {
	if why := hostsSupported(); why != "" {
		if ciRun() {
			t.Fatal(why + " (CI=true)")
		}
		t.Skip(why)
	}
	const n = 16
	origins := make([]*origin, n)
	var hosts []string
	for i := range origins {
		origins[i] = newOrigin(t)
		hosts = append(hosts, fmt.Sprintf("%s o%d.wild.proxylab.test", originIP, i))
	}
	p := startOne(t, netip.MustParseAddr("127.0.79.50"), proxyOptions{hosts: hosts, extra: []string{"download_wait 3s"}})
	attacker := clientFrom(t, "127.0.80.2")
	var mu sync.Mutex
	var wg sync.WaitGroup
	statuses := map[int]int{}
	for i, o := range origins {
		host := fmt.Sprintf("o%d.wild.proxylab.test.%d.%s", i, o.addr.Port(), zone)
		for j := range n {
			path := fmt.Sprintf("/slow%d.bin", j)
			wg.Go(func() {
				ctx, cancel := context.WithCancel(context.Background())
				resp, err := attacker.Do(request(ctx, p, host, path+"?size=10000000&hold=1000"))
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					cancel()
					t.Errorf("%s%s: %v", host, path, err)
					return
				}
				statuses[resp.StatusCode]++
				if resp.StatusCode == http.StatusOK {
					t.Cleanup(func() { cancel(); resp.Body.Close(); o.release(path) })
					return
				}
				cancel()
				resp.Body.Close()
			})
		}
	}
	wg.Wait()
	if statuses[http.StatusOK] > 32 || statuses[http.StatusOK]+statuses[http.StatusServiceUnavailable] != n*n {
		t.Errorf("one client, 16 URLs on each of 16 origins of one address: %v; want at most 32 200s, the rest 503", statuses)
	}
	other := newOrigin(t)
	resp, body, err := fetch(clientFrom(t, "127.0.80.3"), p, other.coralHost(), "/page.html?size=1000")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK || len(body) != 1000 {
		t.Errorf("an unrelated user meanwhile: %d, %d bytes; want 200 and 1000", resp.StatusCode, len(body))
	}
	t.Logf("the client's requests were answered %v; the unrelated user got %d", statuses, resp.StatusCode)
}
