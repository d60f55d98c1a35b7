//go:build linux

package demonet

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
	"github.com/coralcdn/coral/internal/lab/resolvers"
)

// Node is one Coral node: a bin/coredns and a bin/caddy on one address.
type Node struct {
	Index  int
	Addr   netip.Addr
	Region string
	Dir    string
	// CoreDNS and Caddy are the running processes (replaced by
	// RestartNode).
	CoreDNS, Caddy *proc.Process
	// StatusURL is the node's status page, if StatusSite gives one.
	StatusURL string

	corednsArgv, caddyArgv []string
	env                    []string
}

// Resolver is one recursive resolver of the demo.
type Resolver struct {
	*resolvers.Resolver
	Region string
}

// Name is the resolver's product name: Unbound, BIND, Knot Resolver or
// PowerDNS Recursor.
func (r *Resolver) Name() string {
	switch r.Kind {
	case resolvers.Unbound:
		return "Unbound"
	case resolvers.BIND:
		return "BIND"
	case resolvers.Knot:
		return "Knot Resolver"
	case resolvers.PowerDNS:
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
	Root *resolvers.Authority
	// CA is the demo's ACME CA (a bin/caddy with acme_server), and CARoot
	// the file with its root certificate, which clients trust.
	CA     *proc.Process
	CARoot string
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
	for _, step := range []func(context.Context) error{n.makeDir, n.startRootAndOrigin, n.startResolvers, n.startCA, n.startNodes} {
		if err = step(ctx); err != nil {
			return n, err
		}
	}
	n.logf("started %d nodes on %s–%s; waiting for them to join", o.Nodes, n.Layout.Node(0), n.Layout.Node(o.Nodes-1))
	if err = n.WaitReady(ctx); err != nil {
		return n, err
	}
	return n, nil
}

// makeDir makes the run directory and the network key in it.
func (n *Net) makeDir(context.Context) (err error) {
	if n.opts.Dir == "" {
		if n.Dir, err = os.MkdirTemp("", "coraldemo-"); err != nil {
			return err
		}
		n.removeDir = !n.opts.KeepDir
	} else {
		if n.Dir, err = filepath.Abs(n.opts.Dir); err != nil {
			return err
		}
		if err = os.MkdirAll(n.Dir, 0o755); err != nil {
			return err
		}
	}
	n.KeyFile = filepath.Join(n.Dir, "network.key")
	return coraldht.WriteKeyFile(n.KeyFile)
}

// startRootAndOrigin starts the DNS above the Coral zones, the fake root
// (also serving the origin's zone), and the origin web server.
func (n *Net) startRootAndOrigin(context.Context) (err error) {
	l := n.Layout
	rootZone, originZone, err := zones(l, n.opts.Nodes)
	if err != nil {
		return err
	}
	if n.Root, err = resolvers.StartAuthority(l.Root(), rootZone, originZone); err != nil {
		return err
	}
	n.logf("fake root on %s (also serving %s)", l.Root(), OriginZone)
	if n.originLog, err = os.Create(filepath.Join(n.Dir, "origin.log")); err != nil {
		return err
	}
	n.Origin = NewOrigin(netip.AddrPortFrom(l.Origin(), PortHTTP), &lockedWriter{w: n.originLog})
	if err = n.Origin.Start(); err != nil {
		return err
	}
	n.logf("origin http://%s/ on %s", OriginName, n.Origin.Addr)
	return nil
}

// startResolvers starts the recursive resolvers, all at once.
func (n *Net) startResolvers(ctx context.Context) error {
	var wg sync.WaitGroup
	kinds := n.opts.Resolvers
	rerrs := make([]error, len(kinds))
	n.Resolvers = make([]*Resolver, len(kinds))
	for i, kind := range kinds {
		region := RegionEast
		if i%2 == 1 {
			region = RegionWest
		}
		wg.Go(func() {
			r, err := resolvers.Start(ctx, kind, resolvers.Options{
				Addr:              n.Layout.Resolver(i),
				RootHints:         []netip.Addr{n.Layout.Root()},
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
	if err := errors.Join(rerrs...); err != nil {
		return err
	}
	for _, r := range n.Resolvers {
		n.logf("%s on %s (%s)", r.Name(), r.Addr, r.Region)
	}
	return nil
}

// startNodes writes every node's configuration and starts its processes.
func (n *Net) startNodes(context.Context) error {
	// Caddy resolves origin names with the system's resolver. Give it the
	// demo's (in a mount namespace of its own), or fall back to the
	// origin's address in Coralized names.
	n.OriginHost = OriginName
	wrap, note := resolvConfWrapper(n.Dir)
	if wrap == nil {
		n.OriginHost, n.OriginNote = n.Layout.Origin().String(), note
		n.logf("%s; Coralized names use the origin's address", note)
	}
	if err := os.WriteFile(filepath.Join(n.Dir, "resolv.conf"), []byte(resolvConf(n.Resolvers[0].Addr)), 0o644); err != nil {
		return err
	}
	var specs []resolverSpec
	for _, r := range n.Resolvers {
		specs = append(specs, resolverSpec{addr: r.Addr, region: r.Region})
	}
	for i := range n.opts.Nodes {
		nd, err := n.newNode(i, specs, wrap)
		if err != nil {
			return err
		}
		n.Nodes = append(n.Nodes, nd)
		if err := n.startNode(nd); err != nil {
			return err
		}
	}
	return nil
}

// newNode writes node i's Corefile and Caddyfile and its command lines.
// wrap is the command prefix Caddy runs under (resolvConfWrapper).
func (n *Net) newNode(i int, specs []resolverSpec, wrap []string) (*Node, error) {
	l, o := n.Layout, n.opts
	nd := &Node{Index: i, Addr: l.Node(i), Region: Region(i, o.Nodes), Dir: filepath.Join(n.Dir, fmt.Sprintf("node%d", i))}
	if err := os.MkdirAll(nd.Dir, 0o755); err != nil {
		return nil, err
	}
	s := nodeSpec{index: i, addr: nd.Addr, region: nd.Region, dir: nd.Dir, keyFile: n.KeyFile,
		resolvers: specs, layout: l, https: httpsSpec{directory: n.ACMEDirectory(), root: n.CARoot,
			storage: n.certStorage(), resolver: n.Resolvers[0].Addr, renewInterval: o.RenewInterval, renewalRatio: o.RenewalRatio}}
	// Every node joins through the first two nodes' CoreDNS DSHT nodes;
	// the first of those has no bootstrap: it starts the network.
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
	if err := labconf.WriteFile(corePath, corefile(cs)); err != nil {
		return nil, err
	}
	if err := labconf.WriteFile(caddyPath, caddyfile(s)); err != nil {
		return nil, err
	}
	_, nd.StatusURL = StatusSite(nd.Addr)
	nd.corednsArgv = []string{o.CoreDNS, "-conf", corePath}
	nd.caddyArgv = slices.Concat(wrap, labconf.CaddyArgv(o.Caddy, caddyPath))
	// Caddy's data and config directories stay in the node's directory.
	nd.env = labconf.CaddyEnv(nd.Dir)
	return nd, nil
}

func (n *Net) startNode(nd *Node) (err error) {
	start := func(what string, argv []string) (*proc.Process, error) {
		return proc.Start(argv, proc.Options{Name: fmt.Sprintf("node%d/%s", nd.Index, what), Dir: nd.Dir,
			Env: nd.env, Log: filepath.Join(nd.Dir, what+".log"), Banner: "demonet"})
	}
	if nd.CoreDNS, err = start("coredns", nd.corednsArgv); err != nil {
		return err
	}
	nd.Caddy, err = start("caddy", nd.caddyArgv)
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
		for _, p := range []*proc.Process{nd.Caddy, nd.CoreDNS} {
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
	if n.CA != nil {
		wg.Go(func() {
			err := n.CA.Stop(5 * time.Second)
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		})
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

// NodeAt returns the node with address a, or nil.
func (n *Net) NodeAt(a netip.Addr) *Node {
	i := slices.IndexFunc(n.Nodes, func(nd *Node) bool { return nd.Addr == a })
	if i < 0 {
		return nil
	}
	return n.Nodes[i]
}
