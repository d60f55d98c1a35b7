package proxy

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// wildcardOrigins makes p's origin transport resolve every name under
// wild.test to 127.0.0.1, as a wildcard DNS record of an attacker's
// domain would: the names are many, the address is one.
func wildcardOrigins(p *localProxy) {
	tr := p.px.origin.Transport.(*http.Transport)
	dial := tr.DialContext
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		host, port, err := net.SplitHostPort(addr)
		if err == nil && strings.HasSuffix(host, ".wild.test") {
			addr = net.JoinHostPort("127.0.0.1", port)
		}
		return dial(ctx, network, addr)
	}
}

// manyOriginsAttack has client from ask, all at once, for perOrigin
// distinct slow cacheable URLs on each of the origins (one address: names
// under wild.test and different ports), and returns how many were
// answered 200 (a download slot each) and 503, once every request has
// its answer's header. The 200s stay open until the test ends.
func manyOriginsAttack(t *testing.T, p *localProxy, from string, origins []*slowBigOrigin, perOrigin int) (ok, busy int) {
	t.Helper()
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, o := range origins {
		port := netip.MustParseAddrPort(o.hostPort()).Port()
		host := fmt.Sprintf("o%d.wild.test.%d.nyud.test", i, port)
		for j := range perOrigin {
			wg.Go(func() {
				resp, cancel := p.openFrom(t, from, host, fmt.Sprintf("/%s/big%d", from, j))
				mu.Lock()
				defer mu.Unlock()
				switch resp.StatusCode {
				case http.StatusOK:
					ok++
					t.Cleanup(cancel)
				case http.StatusServiceUnavailable:
					busy++
					cancel()
				default:
					cancel()
					t.Errorf("%s/big%d: %d", host, j, resp.StatusCode)
				}
			})
		}
	}
	wg.Wait()
	return ok, busy
}

// TestOneClientAcrossManyOrigins: issue 34 finding 1. One client asking
// for 16 cacheable slow URLs on each of 16 origins (different names
// resolving to one address, on different ports) took all 256 download
// slots (16 per client and origin, 32 per origin name, nothing across
// origins), and an unrelated user got 503 after download_wait. Now the
// client holds at most its share (an eighth: 32), its other requests get
// 503 with Retry-After, and the unrelated user is served.
func TestOneClientAcrossManyOrigins(t *testing.T) {
	t.Parallel()
	origins := make([]*slowBigOrigin, 16)
	for i := range origins {
		origins[i] = newSlowBigOrigin(t)
	}
	p := startLocalProxy(t, 1<<30, func(c *Config, so *diskcache.Options) {
		c.DownloadWait = 2 * time.Second
	})
	wildcardOrigins(p)
	b := p.px.slots.b
	if b.total != 256 || b.perClientAll != 32 || b.perAddress != 64 {
		t.Fatalf("default bounds %+v, want 256 in all, 32 per client, 64 per origin address", b)
	}
	ok, busy := manyOriginsAttack(t, p, "127.0.0.2", origins, 16)
	if ok > b.perClientAll || ok+busy != 256 {
		t.Errorf("one client across 16 origins: %d served, %d refused; want at most %d served", ok, busy, b.perClientAll)
	}
	attacker := p.px.clientKey(&fetchRequest{clientAddr: netip.MustParseAddr("127.0.0.2")})
	if n := p.px.slots.counts(attacker, netip.Addr{}).client; n > b.perClientAll {
		t.Errorf("the client holds %d download slots, want at most %d", n, b.perClientAll)
	}
	// An unrelated user of an unrelated site is served, from a slot.
	site := newRecordingOrigin(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		io.WriteString(w, "hello")
	})
	resp, cancel := p.openFrom(t, "127.0.0.3", site.coralHost(), "/page")
	defer cancel()
	if body, _ := io.ReadAll(resp.Body); resp.StatusCode != http.StatusOK || string(body) != "hello" {
		t.Errorf("an unrelated user: %d %q, want 200 hello", resp.StatusCode, body)
	}
	t.Logf("one client: %d downloads served, %d refused", ok, busy)
}

// TestOneOriginAddressManyClients: the origins of one address (names
// under a wildcard, ports) are one origin for max_downloads_per_address:
// clients together hold at most that many of its downloads, whatever the
// names and ports.
func TestOneOriginAddressManyClients(t *testing.T) {
	t.Parallel()
	origins := make([]*slowBigOrigin, 8)
	for i := range origins {
		origins[i] = newSlowBigOrigin(t)
	}
	p := startLocalProxy(t, 1<<30, func(c *Config, so *diskcache.Options) {
		c.MaxDownloads, c.MaxDownloadsPerOrigin, c.MaxDownloadsPerAddress = 64, 8, 12
		c.DownloadWait = time.Second
	})
	wildcardOrigins(p)
	total := 0
	for _, from := range []string{"127.0.0.2", "127.0.0.4", "127.0.0.5"} {
		ok, busy := manyOriginsAttack(t, p, from, origins, 2)
		t.Logf("client %s: %d served, %d refused, addr count %d", from, ok, busy, p.px.slots.counts("", netip.MustParseAddr("127.0.0.1")).addr)
		total += ok
	}
	if n := p.px.slots.counts("", netip.MustParseAddr("127.0.0.1")).addr; total > 12 || n > 12 {
		t.Errorf("downloads from one origin address: %d served, %d counted; want at most 12", total, n)
	}
	t.Logf("served from one address: %d", total)
}

// TestClientPrefix: a client is its address's prefix of the configured
// length, IPv4-mapped addresses as IPv4, zones dropped.
func TestClientPrefix(t *testing.T) {
	for _, tc := range []struct {
		ip     string
		v4, v6 int
		want   string
	}{
		{"192.0.2.77", 32, 48, "192.0.2.77/32"},
		{"192.0.2.77", 24, 48, "192.0.2.0/24"},
		{"::ffff:192.0.2.77", 24, 48, "192.0.2.0/24"},
		{"2001:db8:1:2:3::9", 32, 48, "2001:db8:1::/48"},
		{"2001:db8:1:ab02::9", 32, 56, "2001:db8:1:ab00::/56"},
		{"fe80::1%eth0", 32, 64, "fe80::/64"},
		{"", 32, 48, ""},
	} {
		ip, _ := netip.ParseAddr(tc.ip)
		if got := clientPrefix(ip, tc.v4, tc.v6); got != tc.want {
			t.Errorf("clientPrefix(%s, %d, %d) = %q, want %q", tc.ip, tc.v4, tc.v6, got, tc.want)
		}
	}
}

// TestChargeBytes: a client's downloads charge their bytes to its share
// until it is spent; a refused charge charges nothing; the bytes come
// back with the slot; a download without a client is not bounded.
func TestChargeBytes(t *testing.T) {
	s := newDownloadSlots(slotBounds{total: 8, perOrigin: 8, perAddress: 8, perClient: 8, perClientAll: 8, perClientBytes: 100})
	ctx := context.Background()
	a, _ := s.acquire(ctx, "o", "c", 0)
	b, _ := s.acquire(ctx, "o", "c", 0)
	bg, _ := s.acquire(ctx, "o", "", 0)
	if !s.chargeBytes(a, 60) || !s.chargeBytes(b, 40) {
		t.Fatal("charges within the share refused")
	}
	if s.chargeBytes(b, 1) {
		t.Error("a charge past the share accepted")
	}
	if !s.chargeBytes(bg, 1<<30) {
		t.Error("a download without a client was bounded")
	}
	if n := s.clientBytes("c"); n != 100 {
		t.Errorf("client charged %d bytes, want 100", n)
	}
	s.release(a)
	if n := s.clientBytes("c"); n != 40 {
		t.Errorf("after one download ended the client is charged %d bytes, want 40", n)
	}
	if !s.chargeBytes(b, 60) || s.chargeBytes(b, 1) {
		t.Error("the bytes given back with a slot were not there to charge again, or too many were")
	}
	s.release(b)
	if n := s.clientBytes("c"); n != 0 {
		t.Errorf("after its downloads ended the client is charged %d bytes", n)
	}
}
