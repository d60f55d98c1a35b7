//go:build linux

// Command wan runs the real bin/coredns and bin/caddy as a Coral fleet on
// an emulated wide area (internal/lab/wan, internal/lab/wan/fleet) and
// measures the paper's Figures 7, 5 and 4 on them, side by side with the
// same sites and workload in virtual time:
//
//	go run ./eval/wan [-groups 4 -groupsize 3 -persite 2] [-out docs/eval]   # the figure run
//	go run ./eval/wan -mode dht -dht-sizes 100,200,400                      # the DSHT alone at scale
//
// The world is the topology's (eval/internal/topology: the synthetic world,
// or the WonderProxy matrix when CORAL_RTT_DATA names it): metros of
// -groupsize sites within 20 ms of each other, chosen in pairs under
// 60 ms apart and far from the other pairs, each site with -persite Coral
// nodes; client-only sites (one in the first metro, the rest far from
// every node); the origin on the site farthest from the nodes, behind a
// 384 kbit/s line; the DNS root and TLD on the nearest. Each site's
// routers answer traces except a -silent share of them. In order:
//
//  1. the lab's own check: RTTs of sampled site pairs against the matrix,
//     and traces against the routers expected;
//  2. Figure 7: the nodes' clusters, snapshotted while they form, judged
//     as eval/clusters judges its virtual network, and the same node sites
//     clustered in virtual time (this command's -mode virtual);
//  3. Figure 4: a flash crowd from every site on cold caches (the paper's
//     12 files), with the lab check repeated under its load;
//  4. Figure 5: the paper's three configurations, each freshly deployed,
//     under eval/endtoend's workload, against eval/endtoend run on the
//     same node sites in virtual time.
//
// It prints the tables and writes wan.json, the PNG figures, and with
// -mode dht wan-dht.json, to -out. It needs root, bin/coredns and
// bin/caddy (make coredns caddy) and internal/lab/wan/install-deps.sh.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/eval/internal/sim"
	"github.com/coralcdn/coral/eval/internal/topology"
	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/netns"
	"github.com/coralcdn/coral/internal/lab/wan"
	"github.com/coralcdn/coral/internal/lab/wan/fleet"
)

// params are a figure run's settings.
type params struct {
	Groups, GroupSize, PerSite int
	ClientOnly                 int
	Clients, LANClients        int
	Silent, Loss               float64
	Seed                       uint64
	Watch                      time.Duration // Figure 7: how long the clusters are watched
	Warmup                     time.Duration // Figure 5: before each configuration's clients
	E2E                        workload
	Crowd                      workload
	Pairs                      int
	Figures                    string // which of 7, 4, 5 to run
	CrowdPeerTimeout           string // a second crowd with this peer_timeout ("": none)
	Virtual                    bool
	Out, Name                  string
	Reduced                    bool
	Note                       string
	Dir                        string
}

func main() {
	p := params{}
	mode := flag.String("mode", "figures", "figures, dht, recompare (the models and the comparison of -out/-name.json again, from its raw data), or virtual (internal)")
	flag.IntVar(&p.Groups, "groups", 4, "metros with Coral nodes")
	flag.IntVar(&p.GroupSize, "groupsize", 3, "node sites per metro")
	flag.IntVar(&p.PerSite, "persite", 2, "Coral nodes per node site")
	flag.IntVar(&p.ClientOnly, "clientonly", 2, "sites with clients but no node")
	flag.IntVar(&p.Clients, "clients", 2, "clients per site beside the proxies (its LAN)")
	flag.IntVar(&p.LANClients, "lanclients", 1, "clients per site on its client LAN")
	flag.Float64Var(&p.Silent, "silent", 0.15, "share of routers that send no Time Exceeded")
	flag.Float64Var(&p.Loss, "loss", 0, "probability that a wide-area link loses a packet")
	flag.Uint64Var(&p.Seed, "seed", 1, "seed of the world, the silent routers and the clients")
	flag.DurationVar(&p.Watch, "watch", 4*time.Minute, "Figure 7: how long the clusters are watched as they form")
	flag.DurationVar(&p.Warmup, "warmup", 2*time.Minute, "Figure 5: clustering time before each configuration's clients")
	flag.DurationVar(&p.E2E.Duration, "duration", 5*time.Minute, "Figure 5: how long the clients load pages, per configuration")
	flag.DurationVar(&p.E2E.Think, "think", 10*time.Second, "Figure 5: mean pause between a client's pages (exponential)")
	flag.DurationVar(&p.E2E.Jitter, "jitter", time.Minute, "Figure 5: clients start uniformly over this")
	flag.DurationVar(&p.Crowd.Duration, "crowd", 4*time.Minute, "Figure 4: how long the flash crowd lasts")
	flag.DurationVar(&p.Crowd.Think, "crowd-think", 5*time.Second, "Figure 4: pause between a client's pages (uniform 0.5–1.5×)")
	flag.IntVar(&p.Pairs, "pairs", 16, "site pairs the lab check samples")
	flag.StringVar(&p.Figures, "figs", "7,4,5", "which figures to run (the lab check always runs)")
	flag.StringVar(&p.CrowdPeerTimeout, "crowd-peer-timeout", "18s", "Figure 4: run the crowd again on a fresh deployment with this coral_proxy peer_timeout (\"\": don't)")
	flag.BoolVar(&p.Virtual, "virtual", true, "run the virtual-time side of the comparison")
	flag.StringVar(&p.Out, "out", "docs/eval", "directory for the JSON and PNG files")
	flag.StringVar(&p.Name, "name", "wan", "file name prefix of the results")
	flag.BoolVar(&p.Reduced, "reduced", false, "mark the results as a reduced run (with -note saying how)")
	flag.StringVar(&p.Note, "note", "", "a note stored with the results")
	flag.StringVar(&p.Dir, "dir", "", "run directory for logs (default: a temporary one, removed)")
	matrix := flag.String("matrix", "", "virtual: the data set directory")
	vstep := flag.Duration("step", 5*time.Second, "virtual: snapshot interval")
	vout := flag.String("virtual-out", "", "virtual: output file")
	dhtSizes := flag.String("dht-sizes", "100,200,400", "dht: network sizes, one run each")
	dhtPerSite := flag.Int("dht-persite", 10, "dht: nodes per site")
	dhtWatch := flag.Duration("dht-watch", 4*time.Minute, "dht: how long each network runs before the lookups")
	flag.Parse()
	p.E2E.Exp, p.E2E.Files, p.E2E.Size, p.E2E.Seed = true, 12, 41<<10, p.Seed
	p.Crowd.Files, p.Crowd.Size, p.Crowd.Seed, p.Crowd.Jitter = 12, 41<<10, p.Seed+1, 2*time.Second
	if *mode == "recompare" {
		if err := recompare(filepath.Join(p.Out, p.Name+".json")); err != nil {
			fmt.Fprintln(os.Stderr, "wan:", err)
			os.Exit(1)
		}
		return
	}
	if *mode == "virtual" {
		runVirtual(*matrix, p.PerSite, p.Watch, *vstep, p.Seed, *vout)
		return
	}
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	var err error
	switch *mode {
	case "figures":
		err = figures(ctx, p, os.Stdout)
	case "dht":
		err = dhtScale(ctx, p, *dhtSizes, *dhtPerSite, *dhtWatch, os.Stdout)
	default:
		err = fmt.Errorf("unknown -mode %q", *mode)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "wan:", err)
		os.Exit(1)
	}
}

// wanReport is wan.json.
type wanReport struct {
	Provenance provenance `json:"provenance"`
	World      worldInfo  `json:"world"`
	LabChecks  []labCheck `json:"lab_checks"`
	Figure7    struct {
		Real    *clusterRun `json:"real"`
		Virtual *clusterRun `json:"virtual,omitempty"`
	} `json:"figure7_clusters"`
	Figure4 *crowdRun `json:"figure4_flash_crowd"`
	// Figure4PeerTimeout is the same crowd with a longer peer_timeout.
	Figure4PeerTimeout *crowdRun `json:"figure4_flash_crowd_peer_timeout,omitempty"`
	Figure5            struct {
		Workload workload         `json:"workload"`
		Warmup   float64          `json:"warmup_seconds"`
		Real     []*e2eRun        `json:"real"`
		Virtual  *endToEndVirtual `json:"virtual,omitempty"`
	} `json:"figure5_end_to_end"`
	Comparison []comparison `json:"simulation_vs_reality"`
	Cost       cost         `json:"cost"`
}

// worldInfo describes the emulated world.
type worldInfo struct {
	// The lab's sites as indexes of the matrix; the rest are lab indexes
	// (see world).
	MatrixSites []int    `json:"matrix_sites"`
	NodeSites   []int    `json:"node_sites"`
	ClientSites []int    `json:"client_only_sites"`
	OriginSite  int      `json:"origin_site"`
	DNSSite     int      `json:"dns_site"`
	GroupSize   int      `json:"group_size"`
	SiteNames   []string `json:"site_names"`
	Regions     []string `json:"site_regions"`
	Nodes       int      `json:"nodes"`
	PerSite     int      `json:"nodes_per_site"`
	Clients     int      `json:"clients"`
	Routers     int      `json:"routers"`
	Silent      []string `json:"silent_routers"`
	Description string   `json:"lab"`
}

// cost is what the fleet used of the machine with no client load.
type cost struct {
	IdleFleetCores    float64 `json:"idle_fleet_cores"` // all CoreDNS and Caddy processes
	IdleMachineCores  float64 `json:"idle_machine_cores"`
	MeasuredSeconds   float64 `json:"measured_seconds"`
	CoreDNSRSSMiB     float64 `json:"coredns_rss_mib_mean"`
	CaddyRSSMiB       float64 `json:"caddy_rss_mib_mean"`
	Processes         int     `json:"server_processes"`
	LabBuildSeconds   float64 `json:"lab_build_seconds"`
	FleetReadySeconds float64 `json:"fleet_ready_seconds"`
}

func figures(ctx context.Context, p params, out io.Writer) error {
	busy0 := evalrun.MachineBusy()
	m := topology.Load(p.Seed)
	prov := newProvenance(p.Name, m, p.Seed, p.Reduced, p.Note)
	w, err := pickWorld(m, worldShape{Groups: p.Groups, GroupSize: p.GroupSize, ClientOnly: p.ClientOnly}, p.Seed)
	if err != nil {
		return err
	}
	coredns, err := labconf.Binary("coredns")
	if err != nil {
		return err
	}
	caddy, err := labconf.Binary("caddy")
	if err != nil {
		return err
	}
	dir := p.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "coral-wan-"); err != nil {
			return err
		}
		defer os.RemoveAll(dir)
	}
	rep := &wanReport{}
	fmt.Fprintf(out, "Coral on an emulated wide area: %s (%s)\n", m.Source, m.Stats())
	began := time.Now()
	l, err := buildLab(ctx, w, labOptions{Dir: dir, Silent: p.Silent, Loss: p.Loss, Seed: p.Seed})
	if err != nil {
		return err
	}
	defer l.Close()
	rep.Cost.LabBuildSeconds = time.Since(began).Seconds()
	fmt.Fprint(out, l.Describe())
	org := newOrigin(p.E2E.Files, p.E2E.Size)
	lo := labOptions{Dir: dir, Seed: p.Seed, PerSite: p.PerSite, Clients: p.Clients, LANClients: p.LANClients,
		OriginLine: "384kbit", CoreDNS: coredns, Caddy: caddy, Logf: func(f string, a ...any) { fmt.Fprintf(out, f+"\n", a...) }}
	fleetStart := time.Now()
	f, err := startFleet(ctx, l, w, lo, org)
	if err != nil {
		return err
	}
	defer f.Close()
	rep.Cost.FleetReadySeconds = time.Since(fleetStart).Seconds()
	rep.World = describeWorld(w, l, f, p)
	fmt.Fprintf(out, "fleet ready %.1f s after its start: %d nodes (%d processes), %d clients\n\n", rep.Cost.FleetReadySeconds,
		len(f.Nodes), 2*len(f.Nodes), len(f.Clients))

	// 1. The lab itself.
	hosts := probeHosts(f)
	var probeSites []int
	for s := range w.Sites {
		if hosts[s] != nil {
			probeSites = append(probeSites, s)
		}
	}
	pairs := samplePairs(probeSites, p.Pairs, p.Seed)
	check := func(phase string, traces bool) {
		c := checkLab(ctx, l, w, hosts, pairs, 5, traces, phase, began)
		c.print(out)
		rep.LabChecks = append(rep.LabChecks, c)
	}
	check("idle fleet", true)

	run := func(fig string) bool { return slices.Contains(strings.Split(p.Figures, ","), fig) }
	// 2. Figure 7. (Figure 4's model needs its clusters: it is always
	// watched, for -watch.)
	fmt.Fprintf(out, "\nFigure 7: watching the clusters form for %v\n", p.Watch)
	rep.Figure7.Real, err = watchClusters(ctx, f, w, fleetStart, p.Watch, 5*time.Second)
	if err != nil {
		return err
	}
	printClusters(out, w, "real servers", rep.Figure7.Real)
	rep.Cost = idleCost(ctx, f, rep.Cost, 30*time.Second)
	fmt.Fprintf(out, "idle fleet: %.3f cores for %d server processes (machine %.2f), RSS CoreDNS %.0f MiB, Caddy %.0f MiB per process\n",
		rep.Cost.IdleFleetCores, rep.Cost.Processes, rep.Cost.IdleMachineCores, rep.Cost.CoreDNSRSSMiB, rep.Cost.CaddyRSSMiB)
	if p.Virtual && run("7") {
		rep.Figure7.Virtual, err = virtualClusterRun(w, filepath.Join(dir, "virtual"), p.PerSite, p.Watch, 5*time.Second, p.Seed)
		if err != nil {
			return err
		}
		printClusters(out, w, "virtual time, same node sites", rep.Figure7.Virtual)
	}
	if err := plotClusters(p.Out, p.Name, w, rep.Figure7.Real); err != nil {
		return err
	}

	if err := figure4(ctx, p, f, l, org, rep, out, check, run("4")); err != nil {
		return err
	}
	if err := figure5(ctx, p, f, l, w, dir, rep, out, check, run("5")); err != nil {
		return err
	}
	rep.Comparison = compare(rep)
	printComparison(out, rep.Comparison)
	prov.finish(busy0)
	rep.Provenance = prov
	rep.dropRequests()
	path := filepath.Join(p.Out, p.Name+".json")
	if err := sim.WriteJSON(path, rep); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nwrote %s and %s-*.png (wall %.0f s, load %s)\n", path, filepath.Join(p.Out, p.Name), prov.WallSeconds, prov.LoadAfter)
	return nil
}

// figure4 runs the flash crowd on the caches still cold, and again with
// p.CrowdPeerTimeout on a fresh deployment.
func figure4(ctx context.Context, p params, f *fleet.Fleet, l *wan.Lab, org *origin, rep *wanReport, out io.Writer,
	check func(string, bool), enabled bool) error {
	if !enabled {
		return nil
	}
	var err error
	fmt.Fprintf(out, "\nFigure 4: a flash crowd of %d clients for %v\n", len(f.Clients), p.Crowd.Duration)
	rep.Figure4, err = runFigure4(ctx, f, l, org.log, p.Crowd, rep.Figure7.Real.last().Labels, out, func() {
		check("under the flash crowd", false)
	})
	if err != nil {
		return err
	}
	if err := plotCrowd(p.Out, p.Name, rep.Figure4); err != nil {
		return err
	}
	if p.CrowdPeerTimeout != "" {
		if err := f.Redeploy(ctx, fleet.Config{PeerTimeout: p.CrowdPeerTimeout}); err != nil {
			return err
		}
		fmt.Fprintf(out, "\nFigure 4 again, peer_timeout %s, on a fresh deployment (%v to cluster)\n", p.CrowdPeerTimeout, p.Warmup)
		sleep(ctx, p.Warmup)
		labels, err := currentLabels(ctx, f)
		if err != nil {
			return err
		}
		if rep.Figure4PeerTimeout, err = runFigure4(ctx, f, l, org.log, p.Crowd, labels, out, nil); err != nil {
			return err
		}
	}
	return nil
}

// figure5 runs the three configurations and their virtual-time side.
func figure5(ctx context.Context, p params, f *fleet.Fleet, l *wan.Lab, w *world, dir string, rep *wanReport, out io.Writer,
	check func(string, bool), enabled bool) error {
	if !enabled {
		return nil
	}
	var err error
	fmt.Fprintf(out, "\nFigure 5: %d clients, think %v, for %v per configuration\n", len(f.Clients), p.E2E.Think, p.E2E.Duration)
	rep.Figure5.Workload, rep.Figure5.Warmup = p.E2E, p.Warmup.Seconds()
	rep.Figure5.Real, err = runFigure5(ctx, f, l, p.E2E, p.Warmup, out, func(name string) {
		if name == e2eConfigs[len(e2eConfigs)-1].Name {
			check("under the Figure 5 clients", false)
		}
	})
	if err != nil {
		return err
	}
	if p.Virtual {
		fmt.Fprintln(out, "Figure 5 in virtual time (eval/endtoend on the same node sites)...")
		rep.Figure5.Virtual, err = runEndToEndVirtual(w, filepath.Join(dir, "virtual"), p.PerSite, p.E2E, p.Warmup)
		if err != nil {
			return err
		}
	}
	title := fmt.Sprintf("End-to-end latency on real servers (paper Fig. 5): %d nodes at %d sites, %s", len(f.Nodes), len(w.NodeSites), w.M.Source)
	return plotEndToEnd(filepath.Join(p.Out, p.Name+"-endtoend.png"), title, rep.Figure5.Real, rep.Figure5.Virtual)
}

// currentLabels are the nodes' clusters at levels 1 and 2 now.
func currentLabels(ctx context.Context, f *fleet.Fleet) ([][]string, error) {
	labels := [][]string{make([]string, len(f.Nodes)), make([]string, len(f.Nodes))}
	for i, nd := range f.Nodes {
		st, err := nd.Status(ctx)
		if err != nil {
			return nil, err
		}
		for _, lv := range st.Levels {
			if lv.Level >= 1 && lv.Level <= 2 {
				labels[lv.Level-1][i] = lv.Cluster
			}
		}
	}
	return labels, nil
}

// probeHosts is a host per site to measure from: a client host, or the
// origin, or the DNS host.
func probeHosts(f *fleet.Fleet) map[int]*netns.Host {
	hosts := map[int]*netns.Host{}
	for _, c := range f.Clients {
		if hosts[c.Site] == nil && c.Beside {
			hosts[c.Site] = c.Host
		}
	}
	hosts[wan.SiteOf(f.OriginAddr())] = f.Origin
	if d := f.DNSHost(); d != nil {
		hosts[wan.SiteOf(d.Addr)] = d
	}
	return hosts
}

func describeWorld(w *world, l *wan.Lab, f *fleet.Fleet, p params) worldInfo {
	wi := worldInfo{MatrixSites: w.Sites, NodeSites: w.NodeSites, ClientSites: w.ClientSites, OriginSite: w.OriginSite,
		DNSSite: w.DNSSite, GroupSize: w.GroupSize, Nodes: len(f.Nodes), PerSite: p.PerSite, Clients: len(f.Clients), Routers: len(l.Routers()),
		Description: l.Describe()}
	for s := range w.Sites {
		wi.SiteNames = append(wi.SiteNames, w.name(s))
		wi.Regions = append(wi.Regions, w.region(s))
	}
	for _, r := range l.Routers() {
		if r.Silent {
			wi.Silent = append(wi.Silent, r.Name)
		}
	}
	return wi
}

// idleCost measures the fleet's CPU over d with no client load, and its
// processes' memory.
func idleCost(ctx context.Context, f *fleet.Fleet, c cost, d time.Duration) cost {
	cd, cy := f.Pids()
	sum := func() float64 {
		var s float64
		for _, p := range append(cd, cy...) {
			s += evalrun.ProcessCPU(p)
		}
		return s
	}
	c0, m0, t0 := sum(), evalrun.MachineBusy(), time.Now()
	sleep(ctx, d)
	el := time.Since(t0).Seconds()
	c.IdleFleetCores, c.IdleMachineCores, c.MeasuredSeconds = (sum()-c0)/el, (evalrun.MachineBusy()-m0)/el, el
	c.CoreDNSRSSMiB, c.CaddyRSSMiB = meanRSS(cd), meanRSS(cy)
	c.Processes = len(cd) + len(cy)
	return c
}
