package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
)

// Fixed parts of the set-up.
const (
	zone      = "nyud.test"
	dhtPort   = 4000
	adminPort = 2019
	// The RTT thresholds of levels 1 and 2, the paper's (and the default):
	// on loopback every RTT is below both, so the clusters are pinned
	// unless -pin=false.
	levelsLine = "60ms 20ms"
	// formedSettle is -settle's default with -pin=false: one clustering
	// period (5 minutes) and some.
	formedSettle = 6 * time.Minute
)

// proxy is one bin/caddy process.
type proxy struct {
	i         int
	addr      netip.Addr
	l1, l2    int // cluster index at levels 1 and 2
	dir       string
	caddyfile string
	srv       *proc.Process
}

func (x *proxy) l1Name() string { return fmt.Sprintf("region-%c", 'a'+x.l1) }
func (x *proxy) l2Name() string { return fmt.Sprintf("metro-%c%d", 'a'+x.l1, x.l2) }
func (x *proxy) admin(path string) string {
	return fmt.Sprintf("http://%v:%d%s", x.addr, adminPort, path)
}
func (x *proxy) url(port int, p string) string {
	return fmt.Sprintf("http://%v:%d%s", x.addr, port, p)
}

// clusterOf places proxy i of n: level-2 cluster c2 of l2 (consecutive
// proxies together) and the level-1 cluster that contains it.
func clusterOf(i, n, l1, l2 int) (c1, c2 int) {
	c2 = i * l2 / n
	return c2 * l1 / l2, c2
}

// network is the running set-up: the proxies and the files they need.
type network struct {
	p       params
	dir     string
	keyFile string
	proxies []*proxy
}

func newNetwork(p params, dir string) (*network, error) {
	nw := &network{p: p, dir: dir, keyFile: filepath.Join(dir, "network.key")}
	if err := coraldht.WriteKeyFile(nw.keyFile); err != nil {
		return nil, err
	}
	for i := range p.Proxies {
		a, err := netip.ParseAddr(fmt.Sprintf("%s.%d", p.Net, 10+i))
		if err != nil {
			return nil, err
		}
		c1, c2 := clusterOf(i, p.Proxies, p.L1, p.L2)
		x := &proxy{i: i, addr: a, l1: c1, l2: c2 - c1*(p.L2/p.L1), dir: filepath.Join(dir, fmt.Sprintf("proxy-%02d", i))}
		if err := os.MkdirAll(x.dir, 0o755); err != nil {
			return nil, err
		}
		nw.proxies = append(nw.proxies, x)
	}
	boot := netip.AddrPortFrom(nw.proxies[0].addr, dhtPort)
	for _, x := range nw.proxies {
		x.caddyfile = nw.caddyfileText(x, boot)
		if err := labconf.WriteFile(filepath.Join(x.dir, "Caddyfile"), x.caddyfile); err != nil {
			return nil, err
		}
	}
	return nw, nil
}

// caddyfileText is proxy x's configuration. Everything else is coral_proxy's
// defaults, the per-client rate limit (10/s, bursts of 50) included: each
// client has an address of its own and stays well below it.
func (nw *network) caddyfileText(x *proxy, boot netip.AddrPort) string {
	level := "INFO"
	if nw.p.Debug {
		level = "DEBUG"
	}
	admin := netip.AddrPortFrom(x.addr, adminPort)
	node := labconf.Node{Listen: netip.AddrPortFrom(x.addr, dhtPort), KeyFile: nw.keyFile, Levels: levelsLine}
	comment := fmt.Sprintf("Flash-crowd proxy %d: level-1 cluster %s, level-2 cluster %s.", x.i, x.l1Name(), x.l2Name())
	if nw.p.Pin {
		node.Clusters = map[int]string{1: x.l1Name(), 2: x.l2Name()}
	} else {
		comment = fmt.Sprintf("Flash-crowd proxy %d: clusters formed by the nodes, not pinned.", x.i)
	}
	if x.i != 0 {
		node.Bootstrap = []netip.AddrPort{boot}
	}
	peers := nw.p.Net + ".0/24"
	return labconf.Caddy{
		Comment:      comment,
		Admin:        admin,
		AdminOrigins: []string{admin.String()},
		HTTPSOff:     true,
		Options: []labconf.Directive{labconf.D("log").With(
			labconf.D("output", "stderr"), labconf.D("format", "json"), labconf.D("level", level))},
		Coral: node,
		Sites: []labconf.Directive{labconf.D(fmt.Sprintf("http://:%d", nw.p.Port)).With(
			labconf.D("bind", x.addr),
			labconf.Proxy{Zone: zone, CacheDir: filepath.Join(x.dir, "cache"), CacheSize: "256MiB",
				AllowOrigins: []string{peers}, AllowPeers: []string{peers},
				PeerAddress: netip.AddrPortFrom(x.addr, uint16(nw.p.Port)).String()}.Directive(),
		)},
	}.String()
}

// checkFree fails when an address the set-up needs is taken.
func (nw *network) checkFree(origin netip.AddrPort) error {
	tcp := []netip.AddrPort{origin}
	for _, x := range nw.proxies {
		tcp = append(tcp, netip.AddrPortFrom(x.addr, uint16(nw.p.Port)), netip.AddrPortFrom(x.addr, adminPort))
		c, err := net.ListenPacket("udp", netip.AddrPortFrom(x.addr, dhtPort).String())
		if err != nil {
			return fmt.Errorf("UDP %v:%d is taken (another run?): %v", x.addr, dhtPort, err)
		}
		c.Close()
	}
	for _, a := range tcp {
		ln, err := net.Listen("tcp", a.String())
		if err != nil {
			return fmt.Errorf("TCP %v is taken (another run?): %v", a, err)
		}
		ln.Close()
	}
	return nil
}

// start runs every proxy, proxy 0 (the bootstrap node) first.
func (nw *network) start(ctx context.Context) error {
	for _, x := range nw.proxies {
		name := fmt.Sprintf("caddy-%02d", x.i)
		srv, err := proc.Start(labconf.CaddyArgv(nw.p.Caddy, filepath.Join(x.dir, "Caddyfile")), proc.Options{
			Name: name, Dir: x.dir, Env: labconf.CaddyEnv(x.dir), Log: filepath.Join(x.dir, name+".log"), TailLines: 20})
		if err != nil {
			return err
		}
		x.srv = srv
		if x.i == 0 {
			if err := evalrun.WaitFor(ctx, "proxy 0's admin API", 20*time.Second, srv.Exited, func() error {
				_, err := proxyStatus(ctx, x)
				return err
			}); err != nil {
				return err
			}
		}
	}
	return nil
}

// stop ends every proxy.
func (nw *network) stop() {
	var wg sync.WaitGroup
	for _, x := range nw.proxies {
		if x.srv != nil {
			wg.Go(func() { _ = x.srv.Stop(5 * time.Second) })
		}
	}
	wg.Wait()
}

// alive reports the first proxy that has exited.
func (nw *network) alive() error {
	for _, x := range nw.proxies {
		if x.srv != nil {
			if err := x.srv.Exited(); err != nil {
				return err
			}
		}
	}
	return nil
}

// status is the part of the admin API's /coral/status the experiment reads.
type status struct {
	Node *struct {
		ID      string `json:"id"`
		Address string `json:"address"`
		Joined  bool   `json:"joined"`
	} `json:"node"`
	Levels []struct {
		Level    int    `json:"level"`
		Cluster  string `json:"cluster"`
		Contacts int    `json:"contacts"`
		Pinned   bool   `json:"pinned"`
	} `json:"levels"`
	DHT    map[string]any `json:"dht"`
	Caches []struct {
		Objects int   `json:"objects"`
		Bytes   int64 `json:"bytes"`
		Hits    int64 `json:"hits"`
		Misses  int64 `json:"misses"`
		Commits int64 `json:"commits"`
		Aborts  int64 `json:"aborts"`
	} `json:"caches"`
	RecentFetches []struct {
		Time       time.Time `json:"time"`
		URL        string    `json:"url"`
		Source     string    `json:"source"`
		Status     int       `json:"status"`
		Bytes      int64     `json:"bytes"`
		DurationMS float64   `json:"duration_ms"`
	} `json:"recent_fetches"`
}

var adminClient = &http.Client{Timeout: 5 * time.Second}

func proxyStatus(ctx context.Context, x *proxy) (*status, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, x.admin("/coral/status"), nil)
	if err != nil {
		return nil, err
	}
	resp, err := adminClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("%s: %s: %s", x.admin("/coral/status"), resp.Status, strings.TrimSpace(string(body)))
	}
	var st status
	if err := json.Unmarshal(body, &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// readiness is what waiting for the network found.
type readiness struct {
	Seconds float64 `json:"seconds"` // from starting proxy 0
	// Ready: every node joined and knew every member of its clusters
	// (pinned), or was in one cluster with every other node at levels 1
	// and 2 (Formed: -pin=false).
	Ready  bool          `json:"ready"`
	Formed bool          `json:"formed"`
	Nodes  []nodeReading `json:"nodes"`
	// Clusters counts the distinct clusters the nodes were in, per level
	// (0, 1, 2), when the load started.
	Clusters []int `json:"clusters_per_level"`
}

type nodeReading struct {
	Proxy    int    `json:"proxy"`
	ID       string `json:"id"`
	Joined   bool   `json:"joined"`
	Clusters []int  `json:"contacts"` // routing-table size per level
	Want     []int  `json:"want"`     // the other members of its cluster per level
	Pinned   bool   `json:"pinned"`
	HTTP     bool   `json:"http"` // coral_proxy answered
	// ClusterIDs are the node's clusters per level.
	ClusterIDs []string `json:"cluster_ids"`
}

func (r nodeReading) ready(pinned bool) bool {
	return r.Joined && r.Pinned == pinned && r.HTTP && slices.Equal(r.Clusters, r.Want)
}

// waitReady polls every proxy's /coral/status until every node has joined
// and knows every other member of each of its clusters, and its coral_proxy
// answers (a request for a host outside the zone: 421, no fetch), or until
// settle is over. Not ready by then is reported, not fatal.
func (nw *network) waitReady(ctx context.Context, started time.Time) (*readiness, error) {
	n := len(nw.proxies)
	want := func(x *proxy) []int {
		if !nw.p.Pin {
			// Loopback RTTs are below every threshold: formed clusters
			// end as one of every node at each level.
			return []int{n - 1, n - 1, n - 1}
		}
		same1, same2 := 0, 0
		for _, y := range nw.proxies {
			if y != x && y.l1 == x.l1 {
				same1++
			}
			if y != x && y.l1 == x.l1 && y.l2 == x.l2 {
				same2++
			}
		}
		return []int{n - 1, same1, same2}
	}
	deadline := time.Now().Add(nw.p.Settle)
	httpOK := make([]bool, n)
	for {
		rd := &readiness{Ready: true, Formed: !nw.p.Pin}
		ids := make([]map[string]bool, 3)
		for i := range ids {
			ids[i] = map[string]bool{}
		}
		for _, x := range nw.proxies {
			r := nodeReading{Proxy: x.i, Want: want(x)}
			if st, err := proxyStatus(ctx, x); err == nil && st.Node != nil {
				r.ID, r.Joined = st.Node.ID, st.Node.Joined
				r.Pinned = len(st.Levels) == 3
				for _, l := range st.Levels {
					r.Clusters = append(r.Clusters, l.Contacts)
					r.ClusterIDs = append(r.ClusterIDs, l.Cluster)
					if l.Level >= 0 && l.Level < len(ids) {
						ids[l.Level][l.Cluster] = true
					}
					if l.Level > 0 && !l.Pinned {
						r.Pinned = false
					}
				}
			}
			if !httpOK[x.i] {
				httpOK[x.i] = probeHTTP(ctx, x, nw.p.Port)
			}
			r.HTTP = httpOK[x.i]
			rd.Ready = rd.Ready && r.ready(nw.p.Pin)
			rd.Nodes = append(rd.Nodes, r)
		}
		rd.Seconds = time.Since(started).Seconds()
		rd.Clusters = nil
		for _, m := range ids {
			rd.Clusters = append(rd.Clusters, len(m))
		}
		if rd.Formed && (rd.Clusters[1] != 1 || rd.Clusters[2] != 1) {
			rd.Ready = false
		}
		if rd.Ready || time.Now().After(deadline) {
			return rd, nil
		}
		if err := nw.alive(); err != nil {
			return nil, err
		}
		select {
		case <-ctx.Done():
			return nil, ctx.Err()
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// probeHTTP asks coral_proxy for a host outside its zone: it answers 421
// without fetching anything.
func probeHTTP(ctx context.Context, x *proxy, port int) bool {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, x.url(port, "/"), nil)
	if err != nil {
		return false
	}
	req.Host = "not-coralized.example"
	resp, err := adminClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusMisdirectedRequest
}
