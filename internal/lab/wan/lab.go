//go:build linux

package wan

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coralcdn/coral/internal/lab/netns"
	"github.com/coralcdn/coral/internal/lab/proc"
)

// Options configure a wide-area lab.
type Options struct {
	// Sites are the sites, in the order of their indexes.
	Sites []Site
	// RTT is the round-trip time between two different sites that the
	// lab reproduces.
	RTT func(a, b int) time.Duration
	// SilentShare is the share of routers that send no ICMP Time
	// Exceeded (they still forward), drawn with Seed. Silent, if set,
	// decides instead, by router name ("core", "region3", "gw5").
	SilentShare float64
	Silent      func(router string) bool
	// Loss is the probability that a packet is lost on each wide-area
	// link it crosses (each way).
	Loss float64
	Seed uint64
	// Dir holds the delayer's configuration, log and counters (required).
	Dir  string
	Logf func(format string, args ...any)
}

// Router is one router namespace.
type Router struct {
	Name   string // "gw3", "region1", "core"
	Host   *netns.Host
	Addr   netip.Addr // the address it sends Time Exceeded from
	Silent bool
}

// SiteNet is one site as built: its gateway and its region's router.
type SiteNet struct {
	Index   int
	Site    Site
	Gateway *Router
	Region  *Router
}

// Lab is a running wide-area lab.
type Lab struct {
	NS      *netns.Lab
	Sites   []*SiteNet
	Regions []*Router
	Core    *Router
	Dir     string

	plan    *plan
	delayer *proc.Process
	logf    func(string, ...any)
	lock    *os.File // held while the lab runs (lockMachine)

	mu    sync.Mutex
	links int         // point-to-point links allocated
	veths map[int]int // per site: host links on its gateway
}

// Available says why a lab cannot run here.
func Available() error {
	if err := netns.Available(false); err != nil {
		return err
	}
	for _, tool := range []string{"iptables-restore", "tc"} {
		if _, err := lookPath(tool); err != nil {
			return fmt.Errorf("wan: %s not found (run internal/lab/wan/install-deps.sh)", tool)
		}
	}
	if _, err := os.Stat("/proc/net/netfilter"); err != nil {
		return errors.New("wan: no netfilter in this kernel")
	}
	return nil
}

func lookPath(name string) (string, error) {
	if p, err := exec.LookPath(name); err == nil {
		return p, nil
	}
	for _, dir := range []string{"/usr/sbin", "/sbin"} {
		if _, err := os.Stat(filepath.Join(dir, name)); err == nil {
			return filepath.Join(dir, name), nil
		}
	}
	return "", fmt.Errorf("%s not found", name)
}

// New builds the routers and sites, starts the delayer, and returns once
// it holds every router's queue.
func New(ctx context.Context, o Options) (_ *Lab, err error) {
	if err := Available(); err != nil {
		return nil, err
	}
	if o.Dir == "" || o.RTT == nil {
		return nil, errors.New("wan: Options.Dir and Options.RTT are required")
	}
	p, err := makePlan(o.Sites, o.RTT)
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	lock, err := lockMachine(ctx)
	if err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			lock.Close()
		}
	}()
	logf := o.Logf
	if logf == nil {
		logf = func(string, ...any) {}
	}
	ns, err := netns.New(netns.Options{})
	if err != nil {
		return nil, err
	}
	l := &Lab{NS: ns, Dir: o.Dir, plan: p, logf: logf, veths: map[int]int{}, lock: lock}
	defer func() {
		if err != nil {
			l.Close()
		}
	}()
	rng := rand.New(rand.NewPCG(o.Seed, 0x73696c656e74)) // "silent"
	silent := func(name string) bool {
		if o.Silent != nil {
			return o.Silent(name)
		}
		return rng.Float64() < o.SilentShare
	}
	newRouter := func(name string, addr netip.Addr) (*Router, error) {
		h, err := ns.AddNamespace(name, addr)
		if err != nil {
			return nil, err
		}
		return &Router{Name: name, Host: h, Addr: addr, Silent: silent(name)}, nil
	}
	var cfg delayerConfig
	cfg.Stats = filepath.Join(o.Dir, "delayer-stats.json")
	cfg.Seed = o.Seed
	routerCfg := map[*Router]*routerConfig{}
	addCfg := func(r *Router) *routerConfig {
		rc := &routerConfig{Name: r.Name, NS: "/run/netns/" + r.Host.NS, LinkDelay: map[string]time.Duration{}, Loss: o.Loss}
		routerCfg[r] = rc
		return rc
	}
	if l.Core, err = newRouter("core", CoreAddr); err != nil {
		return nil, err
	}
	coreCfg := addCfg(l.Core)
	if err := l.batch(l.Core.Host.NS, "addr add "+CoreAddr.String()+"/32 dev lo"); err != nil {
		return nil, err
	}
	for r, name := range p.regions {
		rt, err := newRouter(fmt.Sprintf("region%d", r), RegionRouterAddr(r))
		if err != nil {
			return nil, err
		}
		rt.Name = rt.Name + " (" + name + ")"
		l.Regions = append(l.Regions, rt)
		rc := addCfg(rt)
		// The trunk: "w0" in the region, "wr<r>" in the core.
		coreEnd, regionEnd := l.link()
		up := fmt.Sprintf("wr%d", r)
		if err := l.batch(l.Core.Host.NS,
			fmt.Sprintf("link add %s type veth peer name w0 netns %s", up, rt.Host.NS),
			fmt.Sprintf("addr add %s/31 dev %s", coreEnd, up),
			"link set "+up+" up"); err != nil {
			return nil, err
		}
		if err := l.batch(rt.Host.NS,
			"addr add "+RegionRouterAddr(r).String()+"/32 dev lo",
			fmt.Sprintf("addr add %s/31 dev w0", regionEnd),
			"link set w0 up",
			fmt.Sprintf("route add default via %s src %s", coreEnd, RegionRouterAddr(r)),
		); err != nil {
			return nil, err
		}
		if err := l.batch(l.Core.Host.NS, fmt.Sprintf("route add %s/32 via %s src %s", RegionRouterAddr(r), regionEnd, CoreAddr)); err != nil {
			return nil, err
		}
		rc.LinkDelay["w0"] = p.trunk[r]
		coreCfg.LinkDelay[up] = p.trunk[r]
	}
	for s, site := range o.Sites {
		r := p.region[s]
		region := l.Regions[r]
		gw, err := newRouter(fmt.Sprintf("gw%d", s), GatewayAddr(s))
		if err != nil {
			return nil, err
		}
		l.Sites = append(l.Sites, &SiteNet{Index: s, Site: site, Gateway: gw, Region: region})
		gwCfg := addCfg(gw)
		regionEnd, gwEnd := l.link()
		down := fmt.Sprintf("ws%d", s)
		if err := l.batch(region.Host.NS,
			fmt.Sprintf("link add %s type veth peer name w0 netns %s", down, gw.Host.NS),
			fmt.Sprintf("addr add %s/31 dev %s", regionEnd, down),
			"link set "+down+" up",
			fmt.Sprintf("route add %s via %s src %s", SiteLAN(s), gwEnd, region.Addr),
			fmt.Sprintf("route add %s via %s src %s", ClientLAN(s), gwEnd, region.Addr),
		); err != nil {
			return nil, err
		}
		if err := l.batch(gw.Host.NS,
			fmt.Sprintf("addr add %s/31 dev w0", gwEnd),
			"link set w0 up",
			"link add lan type bridge", "link set lan up",
			fmt.Sprintf("addr add %s/24 dev lan", GatewayAddr(s)),
			"link add cli type bridge", "link set cli up",
			fmt.Sprintf("addr add %s/24 dev cli", ClientAddr(s, 1)),
			fmt.Sprintf("route add default via %s src %s", regionEnd, GatewayAddr(s)),
		); err != nil {
			return nil, err
		}
		if err := l.batch(l.Core.Host.NS,
			fmt.Sprintf("route add %s via %s src %s", SiteLAN(s), l.trunkEnd(r), CoreAddr),
			fmt.Sprintf("route add %s via %s src %s", ClientLAN(s), l.trunkEnd(r), CoreAddr)); err != nil {
			return nil, err
		}
		gwCfg.LinkDelay["w0"] = p.access[s]
		routerCfg[region].LinkDelay[down] = p.access[s]
	}
	// Turns: at the region router for two sites of one region, else at
	// the core.
	for a := range p.sites {
		for b := range p.sites {
			if a == b || p.turn[a][b] == 0 {
				continue
			}
			rc := coreCfg
			if p.region[a] == p.region[b] {
				rc = routerCfg[l.Regions[p.region[a]]]
			}
			if rc.Turn == nil {
				rc.Turn = map[uint32]time.Duration{}
			}
			rc.Turn[pairKey(a, b)] = p.turn[a][b]
		}
	}
	for _, r := range l.Routers() {
		if err := l.setupRouter(r); err != nil {
			return nil, err
		}
		cfg.Routers = append(cfg.Routers, *routerCfg[r])
	}
	if err := l.startDelayer(ctx, cfg); err != nil {
		return nil, err
	}
	logf("wan: %d sites, %d regions, %d routers (%d silent); delayer pid %d", len(l.Sites), len(l.Regions),
		len(l.Routers()), l.silentCount(), l.delayer.Pid())
	return l, nil
}

// trunkEnd is the region end of region r's trunk (links are allocated
// in order: the core's trunks first, one per region).
func (l *Lab) trunkEnd(r int) netip.Addr {
	_, b := linkAddrs(r)
	return b
}

// link allocates a point-to-point link's two addresses.
func (l *Lab) link() (netip.Addr, netip.Addr) {
	l.mu.Lock()
	defer l.mu.Unlock()
	k := l.links
	l.links++
	if k >= maxLinks {
		panic("wan: out of link addresses")
	}
	return linkAddrs(k)
}

// Routers lists every router: the core, the region routers, the site
// gateways.
func (l *Lab) Routers() []*Router {
	out := []*Router{l.Core}
	out = append(out, l.Regions...)
	for _, s := range l.Sites {
		out = append(out, s.Gateway)
	}
	return out
}

func (l *Lab) silentCount() int {
	n := 0
	for _, r := range l.Routers() {
		if r.Silent {
			n++
		}
	}
	return n
}

// batch runs ip commands inside a namespace, one `ip -batch` for all.
func (l *Lab) batch(ns string, cmds ...string) error {
	l.logf("ip -n %s -batch: %s", ns, strings.Join(cmds, "; "))
	cmd := exec.Command("ip", "-n", ns, "-batch", "-")
	cmd.Stdin = strings.NewReader(strings.Join(cmds, "\n") + "\n")
	out, err := cmd.CombinedOutput()
	if err != nil {
		return fmt.Errorf("ip -n %s -batch (%s): %v: %s", ns, strings.Join(cmds, "; "), err, bytes.TrimSpace(out))
	}
	return nil
}

// setupRouter turns forwarding on, lets the router answer every trace
// (no ICMP rate limit), silences it if it is silent, and sends what it
// puts on a wide-area link through the delayer's queue.
func (l *Lab) setupRouter(r *Router) error {
	err := r.Host.Do(func() error {
		for key, val := range map[string]string{
			"net/ipv4/ip_forward":                     "1",
			"net/ipv4/conf/all/rp_filter":             "0",
			"net/ipv4/conf/default/rp_filter":         "0",
			"net/ipv4/icmp_ratelimit":                 "0",
			"net/ipv4/icmp_msgs_per_sec":              "100000",
			"net/ipv4/icmp_errors_use_inbound_ifaddr": "0",
		} {
			if err := os.WriteFile("/proc/sys/"+key, []byte(val), 0o644); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("wan: %s: sysctl: %w", r.Name, err)
	}
	rules := "*filter\n:INPUT ACCEPT [0:0]\n:FORWARD ACCEPT [0:0]\n:OUTPUT ACCEPT [0:0]\n"
	if r.Silent {
		rules += "-A OUTPUT -p icmp --icmp-type time-exceeded -j DROP\n"
	}
	rules += "-A FORWARD -o w+ -j NFQUEUE --queue-num 0\n-A OUTPUT -o w+ -j NFQUEUE --queue-num 0\nCOMMIT\n"
	restore, err := lookPath("iptables-restore")
	if err != nil {
		return err
	}
	argv := r.Host.Command(restore)
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdin = strings.NewReader(rules)
	if out, err := cmd.CombinedOutput(); err != nil {
		return fmt.Errorf("wan: %s: iptables-restore: %v: %s", r.Name, err, bytes.TrimSpace(out))
	}
	return nil
}

func (l *Lab) startDelayer(ctx context.Context, cfg delayerConfig) error {
	raw, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		return err
	}
	path := filepath.Join(l.Dir, "delayer.json")
	if err := os.WriteFile(path, raw, 0o644); err != nil {
		return err
	}
	exe, err := os.Executable()
	if err != nil {
		return err
	}
	chrt, err := exec.LookPath("chrt")
	if err != nil {
		return err
	}
	log := filepath.Join(l.Dir, "delayer.log")
	l.delayer, err = proc.Start([]string{chrt, "--fifo", "10", exe}, proc.Options{Name: "wan delayer", Log: log,
		Env: append(os.Environ(), delayerEnv+"="+path), Banner: "wan"})
	if err != nil {
		return err
	}
	deadline := time.Now().Add(30 * time.Second)
	for !strings.Contains(l.delayer.Log(), "wan delayer: ready") {
		if err := l.delayer.Exited(); err != nil {
			return err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			return fmt.Errorf("wan: the delayer is not ready after 30 s: %s", l.delayer.LogTail(10))
		}
		time.Sleep(20 * time.Millisecond)
	}
	return nil
}

// Check reports a delayer that died: without it no packet crosses a
// wide-area link.
func (l *Lab) Check() error { return l.delayer.Exited() }

// DelayStats reads the delayer's counters (rewritten every 2 s).
func (l *Lab) DelayStats() (DelayStats, error) {
	_ = l.delayer.Signal(syscall.SIGUSR1)
	time.Sleep(50 * time.Millisecond)
	raw, err := os.ReadFile(filepath.Join(l.Dir, "delayer-stats.json"))
	if err != nil {
		return nil, err
	}
	var st DelayStats
	return st, json.Unmarshal(raw, &st)
}

// Close stops the delayer and removes every namespace.
func (l *Lab) Close() error {
	var errs []error
	if l.delayer != nil {
		errs = append(errs, l.delayer.Stop(3*time.Second))
	}
	errs = append(errs, l.NS.Close())
	if l.lock != nil {
		l.lock.Close()
		l.lock = nil
	}
	return errors.Join(errs...)
}

// machineLock is the file whose flock a running lab holds. One wide-area
// lab runs on a machine at a time: each has a delayer at real-time
// priority whose releases are the lab's delays, and two of them on the
// same cores hold up each other's releases. Each router's estimate of a
// release's cost (early) then rises, and a packet whose releases happen
// to cost less than that at router after router arrives that much early
// at each: with two of eval/wan's short forms at once, a 43 ms pair's
// fastest of five pings came back in 36.4 ms (its median 42.9 ms). go
// test runs packages in parallel, so two tests that build labs
// (internal/lab/wan's, eval/wan's) could run together; they take turns
// instead. The kernel drops the lock of a process that dies.
var machineLock = filepath.Join(os.TempDir(), "coral-wan-lab.lock")

// lockMachine waits until no other wide-area lab runs on the machine (or
// ctx ends) and returns the locked file; closing it unlocks.
func lockMachine(ctx context.Context) (*os.File, error) {
	f, err := os.OpenFile(machineLock, os.O_RDWR|os.O_CREATE, 0o666)
	if err != nil {
		return nil, fmt.Errorf("wan: %w", err)
	}
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
		if err == nil {
			return f, nil
		}
		if !errors.Is(err, syscall.EWOULDBLOCK) {
			f.Close()
			return nil, fmt.Errorf("wan: locking %s: %w", machineLock, err)
		}
		select {
		case <-ctx.Done():
			f.Close()
			return nil, fmt.Errorf("wan: another wide-area lab runs on this machine (%s): %w", machineLock, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// AddHost creates a host at site s: a namespace whose eth0 is on the
// site's LAN or, for addresses in ClientLAN(s), on its client LAN, with
// every address given (all in the same one) and a default route through
// the gateway from the first.
func (l *Lab) AddHost(s int, name string, addrs ...netip.Addr) (*netns.Host, error) {
	if s < 0 || s >= len(l.Sites) || len(addrs) == 0 {
		return nil, fmt.Errorf("wan: host %s: site %d of %d, %d addresses", name, s, len(l.Sites), len(addrs))
	}
	lan, bridge := SiteLAN(s), "lan"
	if ClientLAN(s).Contains(addrs[0]) {
		lan, bridge = ClientLAN(s), "cli"
	}
	for _, a := range addrs {
		if !lan.Contains(a) || a.As4()[3] < 2 || a.As4()[3] == 255 {
			return nil, fmt.Errorf("wan: host %s: %v is not a host of %v", name, a, lan)
		}
	}
	h, err := l.NS.AddNamespace(name, addrs[0])
	if err != nil {
		return nil, err
	}
	gw := l.Sites[s].Gateway
	l.mu.Lock()
	k := l.veths[s]
	l.veths[s]++
	l.mu.Unlock()
	veth := fmt.Sprintf("h%d", k)
	if err := l.batch(gw.Host.NS,
		fmt.Sprintf("link add %s type veth peer name eth0 netns %s", veth, h.NS),
		fmt.Sprintf("link set %s master %s", veth, bridge),
		"link set "+veth+" up"); err != nil {
		return nil, err
	}
	cmds := []string{}
	for _, a := range addrs {
		cmds = append(cmds, fmt.Sprintf("addr add %s/24 dev eth0", a))
	}
	cmds = append(cmds, "link set eth0 up",
		fmt.Sprintf("route add default via %s src %s", lan.Addr().Next(), addrs[0]))
	if err := l.batch(h.NS, cmds...); err != nil {
		return nil, err
	}
	return h, nil
}

// Throttle limits what site s sends to the wide area to rate (tc's
// syntax, "384kbit") with a token bucket on its gateway's uplink, behind
// a queue of at most queue bytes: a thin access line.
func (l *Lab) Throttle(s int, rate string, queue int) error {
	tc, err := lookPath("tc")
	if err != nil {
		return err
	}
	argv := l.Sites[s].Gateway.Host.Command(tc, "qdisc", "replace", "dev", "w0", "root", "tbf",
		"rate", rate, "burst", "3000", "limit", fmt.Sprint(queue))
	if out, err := exec.Command(argv[0], argv[1:]...).CombinedOutput(); err != nil {
		return fmt.Errorf("wan: throttling site %d: %v: %s", s, err, bytes.TrimSpace(out))
	}
	return nil
}

// RTT is the round-trip time the lab gives sites a and b (0 within a
// site).
func (l *Lab) RTT(a, b int) time.Duration { return l.plan.oneWay(a, b) + l.plan.oneWay(b, a) }

// Path lists the routers between a host at site a and one at site b, in
// order: what a trace from a toward b meets, silent ones included.
func (l *Lab) Path(a, b int) []*Router {
	if a == b {
		return nil
	}
	sa, sb := l.Sites[a], l.Sites[b]
	out := []*Router{sa.Gateway, sa.Region}
	if sa.Region != sb.Region {
		out = append(out, l.Core, sb.Region)
	}
	return append(out, sb.Gateway)
}

// Heard is the addresses of the routers on Path(a, b) that answer a
// trace: the silent ones left out.
func (l *Lab) Heard(a, b int) []netip.Addr {
	var out []netip.Addr
	for _, r := range l.Path(a, b) {
		if !r.Silent {
			out = append(out, r.Addr)
		}
	}
	return out
}

// Describe is one line per router: its address, delays and silence.
func (l *Lab) Describe() string {
	var b strings.Builder
	for _, s := range l.Sites {
		fmt.Fprintf(&b, "site %d %s (region %s): gateway %s, access %v%s\n", s.Index, s.Site.Name, s.Site.Region,
			s.Gateway.Addr, l.plan.access[s.Index], map[bool]string{true: ", silent", false: ""}[s.Gateway.Silent])
	}
	for r, rt := range l.Regions {
		fmt.Fprintf(&b, "%s: %s, trunk %v%s\n", rt.Name, rt.Addr, l.plan.trunk[r], map[bool]string{true: ", silent", false: ""}[rt.Silent])
	}
	fmt.Fprintf(&b, "core: %s%s\n", l.Core.Addr, map[bool]string{true: ", silent", false: ""}[l.Core.Silent])
	return b.String()
}

// SiteOf is the site an address of the lab is at, or -1.
func SiteOf(a netip.Addr) int {
	if !a.Is4() {
		return -1
	}
	return siteOf(a.As4())
}
