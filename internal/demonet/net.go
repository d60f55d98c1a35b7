//go:build linux

package demonet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/test/resolverlab"
	"github.com/miekg/dns"
)

// Options configure a demo network. The zero value is the default demo.
type Options struct {
	// Dir is the run directory for configurations, logs and caches. Empty:
	// a new temporary directory, removed by Stop unless KeepDir.
	Dir     string
	KeepDir bool
	// Nodes is the number of Coral nodes (default 6). The first half are
	// region "east", the rest "west".
	Nodes int
	// Prefix is the /24 all addresses are taken from (default
	// 127.0.80.0/24). It must lie in 127.0.80.0/24–127.0.89.0/24.
	Prefix netip.Prefix
	// Resolvers are the recursive resolvers to start, on .3, .4, ... of the
	// prefix (default: Unbound alone). The first is what the proxies use
	// to resolve origin names. They alternate between the regions: the
	// first is east, the second west, and so on.
	Resolvers []resolverlab.Kind
	// CoreDNS and Caddy are the binaries (default: bin/coredns and
	// bin/caddy of the repository around the working directory).
	CoreDNS, Caddy string
	// StartTimeout bounds Start (default 2 min).
	StartTimeout time.Duration
	// Logf, if set, gets progress messages.
	Logf func(format string, args ...any)
}

// Regions of the demo: nodes and resolvers are in one or the other.
const (
	RegionEast = "east"
	RegionWest = "west"
)

// Node is one Coral node: a bin/coredns and a bin/caddy on one address.
type Node struct {
	Index  int
	Addr   netip.Addr
	Region string
	Dir    string
	// CoreDNS and Caddy are the running processes (replaced by
	// RestartNode).
	CoreDNS, Caddy *Process
	// StatusURL is the node's status page, if StatusSite gives one.
	StatusURL string

	corednsArgv, caddyArgv []string
	env                    []string
}

// Resolver is one recursive resolver of the demo.
type Resolver struct {
	*resolverlab.Resolver
	Region string
}

// Name is the resolver's product name: Unbound, BIND, Knot Resolver or
// PowerDNS Recursor.
func (r *Resolver) Name() string {
	switch r.Kind {
	case resolverlab.Unbound:
		return "Unbound"
	case resolverlab.BIND:
		return "BIND"
	case resolverlab.Knot:
		return "Knot Resolver"
	case resolverlab.PowerDNS:
		return "PowerDNS Recursor"
	}
	return string(r.Kind)
}

// Net is a running demo network.
type Net struct {
	Layout Layout
	Dir    string
	// KeyFile is the network key every DSHT node shares.
	KeyFile string
	// Root is the fake DNS root, which also serves OriginZone.
	Root *resolverlab.Authority
	// Origin is the origin web server.
	Origin    *Origin
	Resolvers []*Resolver
	Nodes     []*Node
	// OriginHost is the origin as it appears in Coralized names:
	// OriginName, or the origin's IP address when the proxies cannot be
	// given the demo's resolver (see the package documentation).
	OriginHost string
	// OriginNote says why OriginHost is an address, if it is.
	OriginNote string

	opts      Options
	removeDir bool
	originLog *os.File
	mu        sync.Mutex
	stopped   bool
}

// CoralHost is the origin's Coralized host name: www.demo.test.nyud.test.
func (n *Net) CoralHost() string { return n.OriginHost + "." + AliasZone }

// URL is the Coralized URL of a path (with query) on the origin.
func (n *Net) URL(pathQuery string) string { return "http://" + n.CoralHost() + pathQuery }

func (n *Net) logf(format string, args ...any) {
	if n.opts.Logf != nil {
		n.opts.Logf(format, args...)
	}
}

// FindRepo returns the repository root above dir: the directory with the
// go.mod of github.com/coralcdn/coral.
func FindRepo(dir string) (string, error) {
	dir, err := filepath.Abs(dir)
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/coralcdn/coral\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("demonet: not inside the coral repository (no go.mod of github.com/coralcdn/coral above the working directory)")
		}
		dir = parent
	}
}

// Binaries returns the default bin/coredns and bin/caddy, and an error
// naming what is missing.
func Binaries() (coredns, caddy string, err error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", "", err
	}
	root, err := FindRepo(wd)
	if err != nil {
		return "", "", err
	}
	coredns, caddy = filepath.Join(root, "bin", "coredns"), filepath.Join(root, "bin", "caddy")
	var missing []string
	for _, b := range []struct{ path, make string }{{coredns, "make coredns"}, {caddy, "make caddy"}} {
		if _, serr := os.Stat(b.path); serr != nil {
			missing = append(missing, fmt.Sprintf("%s missing (run `%s`)", b.path, b.make))
		}
	}
	if len(missing) > 0 {
		err = errors.New(strings.Join(missing, "; "))
	}
	return coredns, caddy, err
}

// Available reports why a demo network cannot run here: not root, a
// binary or resolver missing.
func Available(o Options) error {
	var why []string
	if os.Geteuid() != 0 {
		why = append(why, "not root (the demo binds ports 53 and 80 on loopback addresses)")
	}
	if o.CoreDNS == "" || o.Caddy == "" {
		if _, _, err := Binaries(); err != nil {
			why = append(why, err.Error())
		}
	}
	kinds := o.Resolvers
	if len(kinds) == 0 {
		kinds = []resolverlab.Kind{resolverlab.Unbound}
	}
	if os.Geteuid() == 0 {
		for _, k := range kinds {
			if err := resolverlab.Available(k); err != nil {
				why = append(why, fmt.Sprintf("%s: %v", k, err))
			}
		}
	}
	if len(why) == 0 {
		return nil
	}
	return errors.New(strings.Join(why, "; "))
}

func (o *Options) defaults() error {
	if o.Nodes == 0 {
		o.Nodes = 6
	}
	if o.Nodes < 2 || o.Nodes > maxNodes {
		return fmt.Errorf("demonet: %d nodes: want 2 to %d", o.Nodes, maxNodes)
	}
	if !o.Prefix.IsValid() {
		o.Prefix = netip.MustParsePrefix("127.0.80.0/24")
	}
	o.Prefix = o.Prefix.Masked()
	if o.Prefix.Bits() != 24 || !netip.MustParsePrefix("127.0.80.0/20").Contains(o.Prefix.Addr()) ||
		o.Prefix.Addr().As4()[2] > 89 {
		return fmt.Errorf("demonet: prefix %v: want a /24 in 127.0.80.0/24–127.0.89.0/24", o.Prefix)
	}
	if len(o.Resolvers) == 0 {
		o.Resolvers = []resolverlab.Kind{resolverlab.Unbound}
	}
	if len(o.Resolvers) > 6 {
		return errors.New("demonet: at most 6 resolvers")
	}
	if o.CoreDNS == "" || o.Caddy == "" {
		coredns, caddy, err := Binaries()
		if err != nil {
			return err
		}
		if o.CoreDNS == "" {
			o.CoreDNS = coredns
		}
		if o.Caddy == "" {
			o.Caddy = caddy
		}
	}
	if o.StartTimeout <= 0 {
		o.StartTimeout = 2 * time.Minute
	}
	return nil
}

// Region is the region of node i of count: the first half east.
func Region(i, count int) string {
	if i < (count+1)/2 {
		return RegionEast
	}
	return RegionWest
}

// Start starts a demo network and returns once it is ready: every name
// server has joined and sees every proxy live, every proxy has joined and
// knows its clusters, the resolvers answer. On failure everything started
// is stopped and the error includes the relevant log lines.
func Start(ctx context.Context, o Options) (*Net, error) {
	n, err := start(ctx, o)
	if err != nil {
		return nil, err
	}
	return n, nil
}

func start(ctx context.Context, o Options) (_ *Net, err error) {
	if err := o.defaults(); err != nil {
		return nil, err
	}
	if err := Available(o); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	n := &Net{Layout: Layout{Prefix: o.Prefix}, opts: o}
	defer func() {
		if err != nil {
			// Keep the logs of a failed start.
			n.removeDir = false
			if serr := n.Stop(); serr != nil {
				n.logf("stopping after a failed start: %v", serr)
			}
			if n.Dir != "" {
				err = fmt.Errorf("%w\n(configurations and logs are in %s)", err, n.Dir)
			}
		}
	}()
	if o.Dir == "" {
		if n.Dir, err = os.MkdirTemp("", "coraldemo-"); err != nil {
			return n, err
		}
		n.removeDir = !o.KeepDir
	} else {
		if n.Dir, err = filepath.Abs(o.Dir); err != nil {
			return n, err
		}
		if err = os.MkdirAll(n.Dir, 0o755); err != nil {
			return n, err
		}
	}
	n.KeyFile = filepath.Join(n.Dir, "network.key")
	if err = coraldht.WriteKeyFile(n.KeyFile); err != nil {
		return n, err
	}
	l := n.Layout

	// DNS above the Coral zones: the fake root, also serving the origin's
	// zone.
	rootZone, originZone, err := zones(l, o.Nodes)
	if err != nil {
		return n, err
	}
	if n.Root, err = resolverlab.StartAuthority(l.Root(), rootZone, originZone); err != nil {
		return n, err
	}
	n.logf("fake root on %s (also serving %s)", l.Root(), OriginZone)

	// The origin.
	if n.originLog, err = os.Create(filepath.Join(n.Dir, "origin.log")); err != nil {
		return n, err
	}
	n.Origin = NewOrigin(netip.AddrPortFrom(l.Origin(), PortHTTP), &lockedWriter{w: n.originLog})
	if err = n.Origin.Start(); err != nil {
		return n, err
	}
	n.logf("origin http://%s/ on %s", OriginName, n.Origin.Addr)

	// The resolvers, all at once.
	var wg sync.WaitGroup
	rerrs := make([]error, len(o.Resolvers))
	n.Resolvers = make([]*Resolver, len(o.Resolvers))
	for i, kind := range o.Resolvers {
		region := RegionEast
		if i%2 == 1 {
			region = RegionWest
		}
		wg.Go(func() {
			r, err := resolverlab.Start(ctx, kind, resolverlab.Options{
				Addr:              l.Resolver(i),
				RootHints:         []netip.Addr{l.Root()},
				QNameMinimisation: true,
				Dir:               filepath.Join(n.Dir, fmt.Sprintf("resolver%d-%s", i, kind)),
			})
			if err != nil {
				rerrs[i] = err
				return
			}
			n.mu.Lock()
			n.Resolvers[i] = &Resolver{Resolver: r, Region: region}
			n.mu.Unlock()
		})
	}
	wg.Wait()
	if err = errors.Join(rerrs...); err != nil {
		return n, err
	}
	for _, r := range n.Resolvers {
		n.logf("%s on %s (%s)", r.Name(), r.Addr, r.Region)
	}

	// Caddy resolves origin names with the system's resolver. Give it the
	// demo's (in a mount namespace of its own), or fall back to the
	// origin's address in Coralized names.
	n.OriginHost = OriginName
	wrap, note := resolvConfWrapper(n.Dir)
	if wrap == nil {
		n.OriginHost, n.OriginNote = l.Origin().String(), note
		n.logf("%s; Coralized names use the origin's address", note)
	}
	if err = os.WriteFile(filepath.Join(n.Dir, "resolv.conf"), []byte(resolvConf(n.Resolvers[0].Addr)), 0o644); err != nil {
		return n, err
	}

	// The nodes.
	var specs []resolverSpec
	for _, r := range n.Resolvers {
		specs = append(specs, resolverSpec{addr: r.Addr, region: r.Region})
	}
	for i := range o.Nodes {
		nd := &Node{Index: i, Addr: l.Node(i), Region: Region(i, o.Nodes), Dir: filepath.Join(n.Dir, fmt.Sprintf("node%d", i))}
		if err = os.MkdirAll(nd.Dir, 0o755); err != nil {
			return n, err
		}
		s := nodeSpec{index: i, addr: nd.Addr, region: nd.Region, dir: nd.Dir, keyFile: n.KeyFile,
			resolvers: specs, layout: l}
		// Every node joins through the first two nodes' CoreDNS DSHT
		// nodes; the first of those has no bootstrap: it starts the
		// network.
		var boot []netip.AddrPort
		for j := range min(2, o.Nodes) {
			boot = append(boot, netip.AddrPortFrom(l.Node(j), PortDHTCoreDNS))
		}
		cs := s
		cs.bootstrap = slices.DeleteFunc(slices.Clone(boot), func(b netip.AddrPort) bool { return b.Addr() == nd.Addr })
		if i == 0 {
			cs.bootstrap = nil
		}
		s.bootstrap = boot
		corePath, caddyPath := filepath.Join(nd.Dir, "Corefile"), filepath.Join(nd.Dir, "Caddyfile")
		if err = os.WriteFile(corePath, []byte(corefile(cs)), 0o644); err != nil {
			return n, err
		}
		if err = os.WriteFile(caddyPath, []byte(caddyfile(s)), 0o644); err != nil {
			return n, err
		}
		_, nd.StatusURL = StatusSite(nd.Addr)
		nd.corednsArgv = []string{o.CoreDNS, "-conf", corePath}
		nd.caddyArgv = slices.Concat(wrap, []string{o.Caddy, "run", "--config", caddyPath, "--adapter", "caddyfile"})
		// Caddy's data and config directories stay in the node's directory.
		nd.env = append(os.Environ(), "HOME="+nd.Dir, "XDG_DATA_HOME="+filepath.Join(nd.Dir, "data"),
			"XDG_CONFIG_HOME="+filepath.Join(nd.Dir, "config"))
		n.Nodes = append(n.Nodes, nd)
		if err = n.startNode(nd); err != nil {
			return n, err
		}
	}
	n.logf("started %d nodes on %s–%s; waiting for them to join", o.Nodes, l.Node(0), l.Node(o.Nodes-1))
	if err = n.WaitReady(ctx); err != nil {
		return n, err
	}
	return n, nil
}

func (n *Net) startNode(nd *Node) (err error) {
	nd.CoreDNS, err = startProcess(fmt.Sprintf("node%d/coredns", nd.Index), nd.Dir, filepath.Join(nd.Dir, "coredns.log"), nd.env, nd.corednsArgv...)
	if err != nil {
		return err
	}
	nd.Caddy, err = startProcess(fmt.Sprintf("node%d/caddy", nd.Index), nd.Dir, filepath.Join(nd.Dir, "caddy.log"), nd.env, nd.caddyArgv...)
	return err
}

// resolvConfWrapper returns the command prefix that runs a program with
// dir/resolv.conf bind-mounted over /etc/resolv.conf in a mount namespace
// of its own (so Caddy resolves origin names through the demo's
// resolver, and nothing else on the machine is affected), or nil and the
// reason when that is not possible here.
func resolvConfWrapper(dir string) ([]string, string) {
	unshare, err1 := exec.LookPath("unshare")
	sh, err2 := exec.LookPath("sh")
	if err := errors.Join(err1, err2); err != nil {
		return nil, "cannot give Caddy the demo's resolver: " + err.Error()
	}
	conf := filepath.Join(dir, "resolv.conf")
	wrap := []string{unshare, "--mount", "--propagation", "private", "--", sh, "-c",
		`mount --bind "$0" /etc/resolv.conf && exec "$@"`, conf}
	// Try it once.
	if err := os.WriteFile(conf, []byte("# probe\n"), 0o644); err != nil {
		return nil, err.Error()
	}
	out, err := exec.Command(wrap[0], append(wrap[1:], "grep", "-q", "^# probe", "/etc/resolv.conf")...).CombinedOutput()
	if err != nil {
		return nil, fmt.Sprintf("cannot give Caddy the demo's resolver (unshare --mount and a bind mount over /etc/resolv.conf: %v %s)",
			err, strings.TrimSpace(string(out)))
	}
	return wrap, ""
}

type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// WaitReady waits until the network works end to end: every running
// CoreDNS reports ready (joined, first sweep done) and sees every running
// proxy live at each level, and every running Caddy has joined and knows
// members of its clusters.
func (n *Net) WaitReady(ctx context.Context) error {
	var live []*Node
	for _, nd := range n.Nodes {
		if nd.Caddy.Running() {
			live = append(live, nd)
		}
	}
	region := map[string]int{}
	for _, nd := range live {
		region[nd.Region]++
	}
	for _, nd := range n.Nodes {
		if !nd.CoreDNS.Running() && !nd.Caddy.Running() {
			continue
		}
		if err := n.poll(ctx, nd.CoreDNS.Name+" ready", func() error {
			return httpOK("http://" + netip.AddrPortFrom(nd.Addr, PortReady).String() + "/ready")
		}); err != nil {
			return err
		}
		if err := n.poll(ctx, nd.Caddy.Name+" joined", func() error {
			st, err := nd.Status()
			if err != nil {
				return err
			}
			if st.Node == nil || !st.Node.Joined {
				return errors.New("not joined")
			}
			return nil
		}); err != nil {
			return err
		}
	}
	for _, nd := range n.Nodes {
		if !nd.CoreDNS.Running() {
			continue
		}
		want := map[int]int{0: len(live), 1: len(live), 2: region[nd.Region]}
		if err := n.poll(ctx, nd.CoreDNS.Name+" sees every proxy", func() error {
			got, err := nd.LiveProxies()
			if err != nil {
				return err
			}
			for lvl, w := range want {
				if got[lvl] != w {
					return fmt.Errorf("live proxies by level %v, want %v", got, want)
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// poll runs cond every 100 ms until it succeeds, ctx ends, or a process
// exits unexpectedly.
func (n *Net) poll(ctx context.Context, what string, cond func() error) error {
	var last error
	for {
		if err := n.unexpectedExits(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if last = cond(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// unexpectedExits reports processes that died without being told to.
func (n *Net) unexpectedExits() error {
	var errs []error
	for _, nd := range n.Nodes {
		for _, p := range []*Process{nd.CoreDNS, nd.Caddy} {
			if p != nil {
				errs = append(errs, p.unexpectedExit())
			}
		}
	}
	for _, r := range n.Resolvers {
		if r != nil && !r.Running() {
			errs = append(errs, fmt.Errorf("%s exited:\n%s", r.Kind, r.LogTail(2000)))
		}
	}
	return errors.Join(errs...)
}

// Check reports processes that exited without being told to.
func (n *Net) Check() error { return n.unexpectedExits() }

var plainClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

func httpOK(url string) error {
	resp, err := plainClient.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// Status is the part of a Caddy node's GET /coral/status the demo reads
// (module/caddy/admin.go).
type Status struct {
	Node *struct {
		ID      string `json:"id"`
		Address string `json:"address"`
		Joined  bool   `json:"joined"`
	} `json:"node"`
	Levels []struct {
		Level    int    `json:"level"`
		Cluster  string `json:"cluster"`
		Contacts int    `json:"contacts"`
	} `json:"levels"`
	Caches []struct {
		Objects    int   `json:"objects"`
		Bytes      int64 `json:"bytes"`
		InProgress int   `json:"in_progress"`
		Commits    int64 `json:"commits"`
	} `json:"caches"`
}

// AdminURL is the node's Caddy admin API address.
func (nd *Node) AdminURL() string {
	return "http://" + netip.AddrPortFrom(nd.Addr, PortAdmin).String()
}

// Admin GETs path from the node's Caddy admin API into v (JSON).
func (nd *Node) Admin(path string, v any) error {
	req, err := http.NewRequest(http.MethodGet, nd.AdminURL()+path, nil)
	if err != nil {
		return err
	}
	resp, err := plainClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("admin %s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Status returns the node's /coral/status.
func (nd *Node) Status() (*Status, error) {
	var st Status
	if err := nd.Admin("/coral/status", &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// CacheObject is one entry of GET /coral/cache.
type CacheObject struct {
	Key     string    `json:"key"`
	URL     string    `json:"url"`
	Status  int       `json:"status"`
	Size    int64     `json:"size"`
	Source  string    `json:"source"`
	Expires time.Time `json:"expires"`
	Writing bool      `json:"writing"`
}

// CacheObjects lists the node's cached objects (at most 1000).
func (nd *Node) CacheObjects() ([]CacheObject, error) {
	var page struct {
		Objects []CacheObject `json:"objects"`
	}
	err := nd.Admin("/coral/cache?limit=1000", &page)
	return page.Objects, err
}

// Metrics returns the node's CoreDNS metrics text.
func (nd *Node) Metrics() (string, error) {
	resp, err := plainClient.Get("http://" + netip.AddrPortFrom(nd.Addr, PortMetrics).String() + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// LiveProxies returns, by level, how many proxies the node's CoreDNS
// found live in its last sweep (coredns_coral_live_proxies).
func (nd *Node) LiveProxies() (map[int]int, error) {
	text, err := nd.Metrics()
	if err != nil {
		return nil, err
	}
	out := map[int]int{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "coredns_coral_live_proxies{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		var level int = -1
		for _, kv := range strings.Split(labels, ",") {
			if v, ok := strings.CutPrefix(kv, `level="`); ok {
				level, _ = strconv.Atoi(strings.TrimSuffix(v, `"`))
			}
		}
		f, err := strconv.ParseFloat(value, 64)
		if level >= 0 && err == nil {
			out[level] = int(f)
		}
	}
	return out, nil
}

// KillNode SIGKILLs node i's Caddy and CoreDNS, as if the machine died.
func (n *Net) KillNode(i int) {
	nd := n.Nodes[i]
	var wg sync.WaitGroup
	wg.Go(nd.Caddy.Kill)
	wg.Go(nd.CoreDNS.Kill)
	wg.Wait()
	n.logf("killed node %d (%s)", i, nd.Addr)
}

// RestartNode starts node i's processes again (after KillNode), with the
// same configuration and cache directory. It does not wait for them; use
// WaitReady.
func (n *Net) RestartNode(i int) error {
	nd := n.Nodes[i]
	if nd.Caddy.Running() || nd.CoreDNS.Running() {
		return fmt.Errorf("node %d is running", i)
	}
	return n.startNode(nd)
}

// KeepDir makes Stop leave the run directory in place (for its logs).
func (n *Net) KeepDir() {
	n.mu.Lock()
	n.removeDir = false
	n.mu.Unlock()
}

// StopOrigin stops the origin web server (connections refused from now).
func (n *Net) StopOrigin() error { return n.Origin.Stop() }

// StartOrigin starts it again.
func (n *Net) StartOrigin() error { return n.Origin.Start() }

// Stop stops everything: the nodes (SIGTERM, SIGKILL after a grace
// period), the resolvers, the origin and the fake root; it removes the run
// directory if Start made it and KeepDir is off. It reports processes that
// had died on their own or needed SIGKILL. Idempotent.
func (n *Net) Stop() error {
	n.mu.Lock()
	if n.stopped {
		n.mu.Unlock()
		return nil
	}
	n.stopped = true
	n.mu.Unlock()
	errs := []error{n.unexpectedExits()}
	var mu sync.Mutex
	var wg sync.WaitGroup
	for _, nd := range n.Nodes {
		for _, p := range []*Process{nd.Caddy, nd.CoreDNS} {
			if p == nil {
				continue
			}
			wg.Go(func() {
				err := p.Stop(5 * time.Second)
				mu.Lock()
				errs = append(errs, err)
				mu.Unlock()
			})
		}
	}
	wg.Wait()
	for _, r := range n.Resolvers {
		if r != nil {
			wg.Go(func() {
				if err := r.Stop(); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
	}
	wg.Wait()
	if n.Origin != nil {
		errs = append(errs, n.Origin.Stop())
	}
	if n.Root != nil {
		errs = append(errs, n.Root.Close())
		if n.Dir != "" {
			// Every query the fake root got, for the kept logs.
			errs = append(errs, os.WriteFile(filepath.Join(n.Dir, "root.log"), []byte(n.Root.QueryLog()), 0o644))
		}
	}
	if n.originLog != nil {
		errs = append(errs, n.originLog.Close())
	}
	n.mu.Lock()
	remove := n.removeDir
	n.mu.Unlock()
	if remove && n.Dir != "" {
		errs = append(errs, os.RemoveAll(n.Dir))
	}
	return errors.Join(errs...)
}

// Lookup asks resolver r for name's A records and returns the addresses
// in the order given, and the answer's smallest TTL.
func Lookup(ctx context.Context, r netip.Addr, name string) ([]netip.Addr, uint32, error) {
	c := &dns.Client{Timeout: 5 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	m.SetEdns0(1232, false)
	resp, _, err := c.ExchangeContext(ctx, m, netip.AddrPortFrom(r, 53).String())
	if err != nil {
		return nil, 0, err
	}
	if resp.Rcode != dns.RcodeSuccess {
		return nil, 0, fmt.Errorf("%s: %s", name, dns.RcodeToString[resp.Rcode])
	}
	var out []netip.Addr
	ttl := uint32(0)
	for _, rr := range resp.Answer {
		if a, ok := rr.(*dns.A); ok {
			ad, _ := netip.AddrFromSlice(a.A)
			out = append(out, ad.Unmap())
			if len(out) == 1 || a.Hdr.Ttl < ttl {
				ttl = a.Hdr.Ttl
			}
		}
	}
	if len(out) == 0 {
		return nil, 0, fmt.Errorf("%s: no addresses in the answer", name)
	}
	return out, ttl, nil
}

// NodeAt returns the node with address a, or nil.
func (n *Net) NodeAt(a netip.Addr) *Node {
	i := slices.IndexFunc(n.Nodes, func(nd *Node) bool { return nd.Addr == a })
	if i < 0 {
		return nil
	}
	return n.Nodes[i]
}
