//go:build linux

package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/eval/internal/sim"
	"github.com/coralcdn/coral/eval/internal/topology"
	"github.com/coralcdn/coral/internal/lab/netns"
	"github.com/coralcdn/coral/internal/lab/proc"
	"github.com/coralcdn/coral/internal/lab/wan"
)

// The DSHT alone at the size of the deployed system: n processes of
// eval/wan/dhtnode, perSite at each of n/perSite sites of the topology,
// on the emulated wide area.

// dhtRun is one network size.
type dhtRun struct {
	N       int `json:"n"`
	Sites   int `json:"sites"`
	PerSite int `json:"per_site"`
	// Joined is how many joined; JoinS the seconds from a process's start
	// to its join, percentiles; StartSpreadS how long starting them all
	// took.
	Joined       int                `json:"joined"`
	JoinS        map[string]float64 `json:"join_seconds"`
	StartSpreadS float64            `json:"start_spread_seconds"`
	Clusters     *clusterRun        `json:"clusters"`
	// Lookups: a put from a random node, then a get of it from another.
	Lookups     int                `json:"lookups"`
	Found       int                `json:"found"`
	Hops        map[string]float64 `json:"get_hops"`
	RPCs        map[string]float64 `json:"get_rpcs"`
	LatencyMs   map[string]float64 `json:"get_latency_ms"`
	PutMs       map[string]float64 `json:"put_latency_ms"`
	GetLevels   map[string]int     `json:"gets_by_level"`
	RSSMiB      map[string]float64 `json:"rss_mib"` // per process: mean, p50, max
	IdleCores   float64            `json:"idle_cores"`
	IdleCPUPct  float64            `json:"idle_cpu_pct_per_node"`
	MachineBusy float64            `json:"idle_machine_cores"`
	DelayerCPU  float64            `json:"delayer_cores"`
	WallSeconds float64            `json:"wall_seconds"`
	Load        string             `json:"load_at_end"`
}

type dhtReport struct {
	Provenance provenance `json:"provenance"`
	Runs       []*dhtRun  `json:"runs"`
	MemTotal   string     `json:"machine_memory"`
}

func dhtScale(ctx context.Context, p params, sizes string, perSite int, watch time.Duration, out io.Writer) error {
	busy0 := evalrun.MachineBusy()
	m := topology.Load(p.Seed)
	prov := newProvenance(p.Name+"-dht", m, p.Seed, p.Reduced, p.Note)
	dir := p.Dir
	var err error
	if dir == "" {
		if dir, err = os.MkdirTemp("", "coral-wan-dht-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	bin := filepath.Join(dir, "dhtnode")
	if b, err := goBuild(bin, "./eval/wan/dhtnode"); err != nil {
		return fmt.Errorf("building dhtnode: %v: %s", err, b)
	}
	rep := &dhtReport{MemTotal: memTotal()}
	for _, f := range strings.Split(sizes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 2*perSite {
			return fmt.Errorf("-dht-sizes: %q", f)
		}
		r, err := dhtOnce(ctx, m, bin, filepath.Join(dir, fmt.Sprint(n)), n, perSite, watch, p.Seed, out)
		if err != nil {
			return err
		}
		rep.Runs = append(rep.Runs, r)
	}
	prov.finish(busy0)
	rep.Provenance = prov
	path := filepath.Join(p.Out, p.Name+"-dht.json")
	if err := sim.WriteJSON(path, rep); err != nil {
		return err
	}
	fmt.Fprintf(out, "wrote %s\n", path)
	return nil
}

func goBuild(out, pkg string) ([]byte, error) {
	cmd := goRun(pkg)
	cmd.Args = []string{"go", "build", "-o", out, pkg}
	return cmd.CombinedOutput()
}

func memTotal() string {
	b, _ := os.ReadFile("/proc/meminfo")
	line, _, _ := strings.Cut(string(b), "\n")
	return strings.Join(strings.Fields(line)[1:], " ")
}

type dhtNode struct {
	site int
	addr netip.Addr
	host *netns.Host
	proc *proc.Process
	ctl  *http.Client
}

func (d *dhtNode) call(ctx context.Context, method, path string, v any) error {
	req, err := http.NewRequestWithContext(ctx, method, "http://"+netip.AddrPortFrom(d.addr, 8000).String()+path, nil)
	if err != nil {
		return err
	}
	resp, err := d.ctl.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	return json.NewDecoder(resp.Body).Decode(v)
}

type dhtStatus struct {
	Joined   bool    `json:"joined"`
	JoinedMs float64 `json:"joined_after_ms"`
	Levels   []level `json:"levels"`
	RSS      uint64  `json:"rss_bytes"`
	CPU      float64 `json:"cpu_seconds"`
}

type level struct {
	Level   int    `json:"level"`
	Cluster string `json:"cluster"`
}

func dhtOnce(ctx context.Context, m *topology.Matrix, bin, dir string, n, perSite int, watch time.Duration, seed uint64, out io.Writer) (*dhtRun, error) {
	began := time.Now()
	nsites := (n + perSite - 1) / perSite
	rng := rand.New(rand.NewPCG(seed, uint64(n)))
	w := &world{M: m, GroupSize: 1}
	w.Sites = append(w.Sites, rng.Perm(m.Len())[:nsites]...)
	w.NodeSites = make([]int, nsites)
	for i := range w.NodeSites {
		w.NodeSites[i] = i
	}
	l, err := buildLab(ctx, w, labOptions{Dir: dir, Seed: seed})
	if err != nil {
		return nil, err
	}
	defer l.Close()
	key := filepath.Join(dir, "network.key")
	if err := coraldht.WriteKeyFile(key); err != nil {
		return nil, err
	}
	var nodes []*dhtNode
	for s := range nsites {
		var addrs []netip.Addr
		for i := range min(perSite, n-s*perSite) {
			addrs = append(addrs, wan.HostAddr(s, 10+i))
		}
		h, err := l.AddHost(s, fmt.Sprintf("d%d", s), addrs...)
		if err != nil {
			return nil, err
		}
		ctl := &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DialContext: h.DialContext, DisableKeepAlives: true}}
		for _, a := range addrs {
			nodes = append(nodes, &dhtNode{site: s, addr: a, host: h, ctl: ctl})
		}
	}
	boot := netip.AddrPortFrom(nodes[0].addr, 4000).String() + "," + netip.AddrPortFrom(nodes[perSite].addr, 4000).String()
	fmt.Fprintf(out, "DSHT alone: %d node processes at %d sites of %s, started at 20 a second\n", n, nsites, m.Source)
	start := time.Now()
	for i, d := range nodes {
		argv := []string{bin, "-listen", netip.AddrPortFrom(d.addr, 4000).String(), "-bootstrap", boot, "-key", key,
			"-control", netip.AddrPortFrom(d.addr, 8000).String()}
		d.proc, err = d.host.Start(argv, proc.Options{Name: fmt.Sprintf("dht%d", i), Log: filepath.Join(dir, fmt.Sprintf("node%d.log", i))})
		if err != nil {
			return nil, err
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return nil, ctx.Err()
		}
	}
	defer func() {
		var wg sync.WaitGroup
		for _, d := range nodes {
			wg.Go(func() { _ = d.proc.Stop(3 * time.Second) })
		}
		wg.Wait()
	}()
	r := &dhtRun{N: n, Sites: nsites, PerSite: perSite, StartSpreadS: time.Since(start).Seconds()}
	sites := make([]int, len(nodes))
	for i, d := range nodes {
		sites[i] = d.site
	}
	r.Clusters = &clusterRun{NodeSites: sites}
	var statuses []dhtStatus
	poll := func() {
		statuses = make([]dhtStatus, len(nodes))
		var wg sync.WaitGroup
		sem := make(chan struct{}, 16)
		for i, d := range nodes {
			wg.Go(func() {
				sem <- struct{}{}
				defer func() { <-sem }()
				_ = d.call(ctx, http.MethodGet, "/status", &statuses[i])
			})
		}
		wg.Wait()
		labels := [][]string{make([]string, len(nodes)), make([]string, len(nodes))}
		joined := 0
		for i, st := range statuses {
			if st.Joined {
				joined++
			}
			for _, lv := range st.Levels {
				if lv.Level >= 1 && lv.Level <= 2 {
					labels[lv.Level-1][i] = lv.Cluster
				}
			}
			if labels[0][i] == "" {
				labels[0][i], labels[1][i] = fmt.Sprint("none", i), fmt.Sprint("none", i)
			}
		}
		r.Clusters.judge(w, time.Since(start), labels)
		q := r.Clusters.last().Quality
		fmt.Fprintf(out, "  %4.0f s: %d of %d joined; level 1: %d clusters, %.0f %% not alone; level 2: %d clusters, %.0f %% not alone; load %s\n",
			time.Since(start).Seconds(), joined, n, q[0].Clusters, 100*q[0].NonSingletonOfThose, q[1].Clusters, 100*q[1].NonSingletonOfThose, evalrun.LoadAvg())
	}
	for time.Since(start) < watch && ctx.Err() == nil {
		poll()
		sleep(ctx, 15*time.Second)
	}
	poll()
	r.Clusters.settle()
	var joins []float64
	for _, st := range statuses {
		if st.Joined {
			r.Joined++
			joins = append(joins, st.JoinedMs/1000)
		}
	}
	r.JoinS = percentiles(joins)
	// Idle cost.
	cpu := func() float64 {
		var s float64
		for _, d := range nodes {
			s += evalrun.ProcessCPU(d.proc.Pid())
		}
		return s
	}
	c0, m0, t0 := cpu(), evalrun.MachineBusy(), time.Now()
	sleep(ctx, 30*time.Second)
	el := time.Since(t0).Seconds()
	r.IdleCores, r.MachineBusy = (cpu()-c0)/el, (evalrun.MachineBusy()-m0)/el
	r.IdleCPUPct = 100 * r.IdleCores / float64(n)
	var rss []float64
	for _, d := range nodes {
		rss = append(rss, meanRSS([]int{d.proc.Pid()}))
	}
	slices.Sort(rss)
	var sum float64
	for _, v := range rss {
		sum += v
	}
	r.RSSMiB = map[string]float64{"mean": sum / float64(len(rss)), "p50": pct(rss, 50), "max": rss[len(rss)-1], "total": sum}
	// Lookups.
	type result struct {
		Found bool    `json:"found"`
		Level int     `json:"level"`
		Hops  int     `json:"hops"`
		RPCs  int     `json:"rpcs"`
		Ms    float64 `json:"ms"`
		OK    bool    `json:"ok"`
	}
	r.GetLevels = map[string]int{}
	var hops, rpcs, lat, puts []float64
	lookups := 200
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, 8)
	for k := range lookups {
		a, b := nodes[rng.IntN(len(nodes))], nodes[rng.IntN(len(nodes))]
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			keyName := fmt.Sprintf("wan-dht-%d-%d", n, k)
			var put, get result
			if a.call(ctx, http.MethodPost, "/put?ttl=1h&key="+keyName, &put) != nil || !put.OK {
				return
			}
			if b.call(ctx, http.MethodGet, "/get?key="+keyName, &get) != nil {
				return
			}
			mu.Lock()
			defer mu.Unlock()
			r.Lookups++
			puts = append(puts, put.Ms)
			if get.Found {
				r.Found++
				r.GetLevels[fmt.Sprint(get.Level)]++
				hops = append(hops, float64(get.Hops))
				rpcs = append(rpcs, float64(get.RPCs))
				lat = append(lat, get.Ms)
			}
		})
	}
	wg.Wait()
	r.Hops, r.RPCs, r.LatencyMs, r.PutMs = percentiles(hops), percentiles(rpcs), percentiles(lat), percentiles(puts)
	r.WallSeconds = time.Since(began).Seconds()
	r.Load = evalrun.LoadAvg()
	q := r.Clusters.last().Quality
	fmt.Fprintf(out, "n = %d: %d joined (join s p50 %.1f, p90 %.1f, max %.1f); level 1 %d clusters (pairs80 %.0f %%), level 2 %d (%.0f %%), criteria at %.0f / %.0f s\n",
		n, r.Joined, r.JoinS["p50"], r.JoinS["p90"], r.JoinS["max"], q[0].Clusters, 100*q[0].PairRuleOK, q[1].Clusters, 100*q[1].PairRuleOK,
		r.Clusters.CriteriaS[0], r.Clusters.CriteriaS[1])
	fmt.Fprintf(out, "  gets: %d of %d found; hops p50 %.0f p99 %.0f; RPCs p50 %.0f; latency ms p50 %.0f p90 %.0f p99 %.0f; by level %v\n",
		r.Found, r.Lookups, r.Hops["p50"], r.Hops["p99"], r.RPCs["p50"], r.LatencyMs["p50"], r.LatencyMs["p90"], r.LatencyMs["p99"], r.GetLevels)
	fmt.Fprintf(out, "  idle: %.2f cores for %d processes (%.2f %% of a core each; machine %.2f), RSS per process %.1f MiB mean, %.1f max, %.0f MiB in all\n",
		r.IdleCores, n, r.IdleCPUPct, r.MachineBusy, r.RSSMiB["mean"], r.RSSMiB["max"], r.RSSMiB["total"])
	return r, nil
}

// percentiles of v: p50, p90, p99, max, and the count.
func percentiles(v []float64) map[string]float64 {
	s := sortedCopy(v)
	out := map[string]float64{"n": float64(len(s))}
	if len(s) == 0 {
		return out
	}
	out["p50"], out["p90"], out["p99"], out["max"] = pct(s, 50), pct(s, 90), pct(s, 99), s[len(s)-1]
	return out
}
