package coralcaddy

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/module/caddy/diskcache"
	"go.uber.org/zap"
)

// testProxy is a coral_proxy handler outside Caddy: its own disk cache, a
// real DSHT node on UDP loopback and an HTTP server on its own 127.0.4.x.
type testProxy struct {
	h    *Handler
	node *coraldht.Node
	srv  *httptest.Server
}

func startTestProxies(t *testing.T, n int) []*testProxy {
	t.Helper()
	var out []*testProxy
	var boot []netip.AddrPort
	for i := range n {
		ip := netip.AddrFrom4([4]byte{127, 0, 4, byte(10 + i)})
		cfg := coraldht.DefaultConfig()
		cfg.Services = coraldht.ServiceHTTP
		cfg.HintHops = 0
		tr, err := coraldht.ListenUDP(netip.AddrPortFrom(ip, 4000).String())
		if err != nil {
			t.Fatal(err)
		}
		node, err := coraldht.NewNode(cfg, tr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { node.Close() })
		store, err := diskcache.Open(diskcache.Options{Dir: t.TempDir(), MaxBytes: 64 << 20})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { store.Close() })
		h := &Handler{Zone: "nyud.test", PeerTimeout: 3e9, logger: zap.NewNop()}
		h.setup(store, node, originGuard{allow: []netip.Prefix{netip.MustParsePrefix("127.0.0.0/8")}},
			DefaultPolicy())
		ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, 0).String())
		if err != nil {
			t.Fatal(err)
		}
		srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if err := h.ServeHTTP(w, r, nil); err != nil {
				var he caddyhttp.HandlerError
				if errors.As(err, &he) {
					http.Error(w, he.Error(), he.StatusCode)
					return
				}
				http.Error(w, err.Error(), http.StatusInternalServerError)
			}
		}))
		srv.Listener = ln
		srv.Start()
		t.Cleanup(srv.Close)
		ap := netip.MustParseAddrPort(ln.Addr().String())
		h.eng.peerAddr.Store(&ap)
		out = append(out, &testProxy{h: h, node: node, srv: srv})
		boot = append(boot, node.Addr())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for _, p := range out {
		if err := p.node.Bootstrap(ctx, boot...); err != nil {
			t.Fatal(err)
		}
	}
	return out
}

// TestFlashCrowdAcrossProxies: five proxies asked for the same objects at
// the same instant fetch each object from the origin once; the others get
// it from a peer (or by joining a download), and every body is complete.
func TestFlashCrowdAcrossProxies(t *testing.T) {
	proxies := startTestProxies(t, 5)
	objects := []string{"/a.jpg", "/b.jpg", "/c.jpg"}
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		time.Sleep(50 * time.Millisecond) // a slow origin (DSL line), not a synchronisation
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Write(bytes.Repeat([]byte(r.URL.Path), 10_000))
	})
	start := make(chan struct{})
	var wg sync.WaitGroup
	sources := make(chan string, len(proxies)*len(objects))
	for _, p := range proxies {
		for _, obj := range objects {
			wg.Go(func() {
				<-start
				req, _ := http.NewRequest(http.MethodGet, p.srv.URL+obj, nil)
				req.Host = o.coralHost()
				resp, err := http.DefaultClient.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				defer resp.Body.Close()
				var buf bytes.Buffer
				if _, err := buf.ReadFrom(resp.Body); err != nil {
					t.Errorf("%s via %s: %v", obj, p.srv.URL, err)
				}
				if resp.StatusCode != http.StatusOK || !bytes.Equal(buf.Bytes(), bytes.Repeat([]byte(obj), 10_000)) {
					t.Errorf("%s via %s: status %d, %d bytes", obj, p.srv.URL, resp.StatusCode, buf.Len())
				}
				sources <- resp.Header.Get("Cache-Status")
			})
		}
	}
	close(start)
	wg.Wait()
	close(sources)
	for _, obj := range objects {
		if n := o.count(obj); n != 1 {
			t.Errorf("%s fetched from the origin %d times by %d proxies, want 1", obj, n, len(proxies))
		}
	}
	kinds := map[string]int{}
	for s := range sources {
		for _, part := range strings.Split(s, ";") {
			if strings.HasPrefix(strings.TrimSpace(part), "detail=") {
				kinds[strings.TrimSpace(part)]++
			}
		}
	}
	t.Logf("where the bytes came from: %v", kinds)
	if kinds[`detail="origin"`] == len(proxies)*len(objects) {
		t.Errorf("no proxy used a peer")
	}
}
