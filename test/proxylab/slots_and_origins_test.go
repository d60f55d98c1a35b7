package proxylab

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"
)

// Issue 19 against the real bin/caddy: abandoned downloads and one client
// cannot lock an origin out (defect 4), the node's own addresses are not
// origins (5), and the ACME HTTP-01 path is not relayed (9).

// clientFrom is an HTTP client whose connections come from the local
// address from (a client address of its own for the proxy's per-client
// bounds), without keep-alive or redirects.
func clientFrom(t *testing.T, from string) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP(from)}}
	tr := &http.Transport{Proxy: nil, DialContext: d.DialContext, DisableCompression: true, DisableKeepAlives: true}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// openHeld GETs path at p and returns once the header and the first bytes
// are in; the download behind it is held at the origin (hold=). cancel
// abandons the request.
func openHeld(t *testing.T, c *http.Client, p *proxy, host, path string) (resp *http.Response, cancel func()) {
	t.Helper()
	ctx, stop := context.WithCancel(context.Background())
	resp, err := c.Do(request(ctx, p, host, path))
	if err != nil {
		stop()
		t.Fatalf("%s: %v", path, err)
	}
	if resp.StatusCode == http.StatusOK {
		if _, err := io.ReadFull(resp.Body, make([]byte, 1000)); err != nil {
			t.Fatalf("%s: first bytes: %v", path, err)
		}
	}
	return resp, func() { stop(); resp.Body.Close() }
}

// TestAbandonedAndGreedyDownloads: clients that abandon requests for
// distinct URLs of a big, held object do not keep the origin's slots (the
// next client is served at once, not after download_timeout), and one
// client address cannot take more than max_downloads_per_client of them.
func TestAbandonedAndGreedyDownloads(t *testing.T) {
	o := newOrigin(t)
	p := startOne(t, netip.MustParseAddr("127.0.79.35"), proxyOptions{extra: []string{
		"max_downloads 64 4 2", "download_wait 3s", "download_timeout 10m",
	}})
	host := o.coralHost()
	var paths []string
	defer func() {
		for _, path := range paths {
			o.release(path)
		}
	}()
	held := func(c *http.Client, i int) (*http.Response, func()) {
		path := fmt.Sprintf("/big%d.bin", i)
		paths = append(paths, path)
		return openHeld(t, c, p, host, path+"?size=100000000&hold=100000")
	}
	// Two clients abandon two downloads each: the origin's 4 slots.
	i := 0
	for _, from := range []string{"127.0.0.1", "127.0.0.2"} {
		c := clientFrom(t, from)
		for range 2 {
			resp, cancel := held(c, i)
			i++
			if resp.StatusCode != http.StatusOK {
				t.Fatalf("client %s, download %d: %d", from, i, resp.StatusCode)
			}
			cancel()
		}
	}
	start := time.Now()
	resp, cancel := held(clientFrom(t, "127.0.0.3"), i)
	i++
	cancel()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("the next client after 4 abandoned downloads: %d after %s, want 200", resp.StatusCode, time.Since(start).Round(time.Millisecond))
	}
	t.Logf("the next client was served after %s", time.Since(start).Round(time.Millisecond))

	// One client holds two downloads and reads on; its third waits for
	// one of its own slots and gets 503, while another client is served.
	greedy := clientFrom(t, "127.0.0.4")
	for range 2 {
		resp, cancel := held(greedy, i)
		i++
		defer cancel()
		if resp.StatusCode != http.StatusOK {
			t.Fatalf("greedy client, download %d: %d", i, resp.StatusCode)
		}
	}
	resp, cancel = held(greedy, i)
	i++
	cancel()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("a third download for one client: %d (Retry-After %q), want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	resp, cancel = held(clientFrom(t, "127.0.0.5"), i)
	cancel()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("another client meanwhile: %d, want 200", resp.StatusCode)
	}
}

// TestNodeAddressesNotOrigins: with allow_origins 127.0.0.0/8 (for the
// lab's origin), the proxy still refuses Coralized names of its own
// addresses (its HTTP listener, its admin API with /metrics, its DSHT
// address, a loopback interface address), and relays them only where
// allow_origins lists the address alone. ACME HTTP-01 challenges are not
// relayed from any origin.
func TestNodeAddressesNotOrigins(t *testing.T) {
	o := newOrigin(t)
	ip := netip.MustParseAddr("127.0.79.33")
	p := startOne(t, ip, proxyOptions{})
	c := newClient(t)
	for _, tc := range []struct {
		host, path string
		want       int
	}{
		{fmt.Sprintf("%s.%d.%s", ip, httpPort, zone), "/", http.StatusForbidden},
		{fmt.Sprintf("%s.%d.%s", ip, adminPort, zone), "/metrics", http.StatusForbidden},
		{fmt.Sprintf("%s.%d.%s", ip, dhtPort, zone), "/", http.StatusForbidden},
		{fmt.Sprintf("127.0.0.1.%d.%s", adminPort, zone), "/metrics", http.StatusForbidden},
		{o.coralHost(), "/.well-known/acme-challenge/token", http.StatusForbidden},
		{o.coralHost(), "/public.bin?size=1000", http.StatusOK},
	} {
		resp, b, err := fetch(c, p, tc.host, tc.path)
		if err != nil {
			t.Errorf("%s%s: %v", tc.host, tc.path, err)
			continue
		}
		t.Logf("%s%s: %d %s", tc.host, tc.path, resp.StatusCode, errorText(resp, b))
		if resp.StatusCode != tc.want {
			t.Errorf("%s%s: %d, want %d", tc.host, tc.path, resp.StatusCode, tc.want)
		}
	}
	if n := o.count("/.well-known/acme-challenge/token"); n != 0 {
		t.Errorf("the origin was asked for the ACME challenge %d times", n)
	}

	// Listed alone, the node's own address is an origin like another.
	ip2 := netip.MustParseAddr("127.0.79.34")
	p2 := startOne(t, ip2, proxyOptions{extra: []string{"allow_origins " + ip2.String()}})
	resp, b, err := fetch(c, p2, fmt.Sprintf("%s.%d.%s", ip2, adminPort, zone), "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		t.Errorf("its own admin /metrics with allow_origins %s: %d %s, want 200", ip2, resp.StatusCode, errorText(resp, b))
	}
}
