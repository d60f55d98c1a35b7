//go:build linux

// Package coralnet runs a Coral network as separate hosts (internal/lab/netns):
// every node — a bin/coredns and a bin/caddy — in a network namespace of
// its own, an origin host, two resolver hosts running Unbound (one per
// region, stub zones for the Coral zones pointing at every node's CoreDNS),
// a control host that reads the nodes' status and metrics, and client
// hosts. All addresses are in 198.18.0.0/24:
//
//	.2 origin (an http.Handler of the caller, port 80)
//	.3 Unbound, region east; .4 Unbound, region west
//	.5 control
//	.10+i node i (CoreDNS :53, Caddy :80, admin :2019, DSHT :4000/:4001)
//	.100+i client host i (even: east resolver, odd: west)
//
// The first half of the nodes is region (level-2 cluster) east, the rest
// west, as in internal/demonet. Coralized names carry the origin's address
// (198.18.0.2.nyud.test), so the proxies need no resolver of their own.
//
// Each node's binaries and key files can change between its restarts
// (a rolling upgrade, a key rotation): Node.CoreDNSBin, CaddyBin, Keys,
// then RestartNode or Reload.
package coralnet

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/netns"
	"github.com/coralcdn/coral/internal/lab/proc"
	"github.com/coralcdn/coral/internal/lab/resolvers"
)

// Zones, ports and tuning (as internal/demonet's).
const (
	CoralZone = "nyucd.test"
	AliasZone = "nyud.test"

	PortDNS        = 53
	PortHTTP       = 80
	PortAdmin      = 2019
	PortReady      = 8181
	PortMetrics    = 9153
	PortDHTCoreDNS = 4000
	PortDHTCaddy   = 4001

	// AnswerTTL is the TTL of proxy addresses in DNS answers: a client
	// holding a dead proxy's address drops it within this many seconds.
	AnswerTTL = 5
	// LiveWithin and CheckInterval: a name server stops answering with a
	// dead proxy within about LiveWithin.
	LiveWithin    = "5s"
	CheckInterval = "1s"
)

// Regions.
const (
	RegionEast = "east"
	RegionWest = "west"
)

// Options configure a network.
type Options struct {
	Dir     string // run directory (required)
	Nodes   int    // default 6
	Clients int    // client hosts, default 4
	// CoreDNS and Caddy are the binaries every node starts with.
	CoreDNS, Caddy string
	// Origin serves the origin host's port 80.
	Origin http.Handler
	// StartTimeout bounds Start (default 2 min).
	StartTimeout time.Duration
	Logf         func(format string, args ...any)
	// DebugProxy writes coral_proxy's debug log (why each download went
	// where it did) to coral-debug.log in each node's directory.
	DebugProxy bool
	// NodeOptions, if set, gives node i's Node.NodeOptions before it
	// first starts.
	NodeOptions func(i int, name string) []labconf.Directive
}

// Node is one Coral node.
type Node struct {
	Index  int
	Host   *netns.Host
	Region string
	Dir    string
	// CoreDNSBin and CaddyBin are the binaries the next start runs.
	CoreDNSBin, CaddyBin string
	// Keys are the DSHT key files the next configuration names: one is
	// written as key_file (every build reads it), more as `key PRIMARY
	// ACCEPTED...` (a build with the keyring).
	Keys []string
	// KeyDirective writes even one key as `key FILE` (once a rotation
	// has begun).
	KeyDirective bool
	// NodeOptions are more DSHT node option lines, written into both
	// servers' node options (coraldht/host's grammar): node identity
	// mode's identity, fleet and revocations, for one.
	NodeOptions []labconf.Directive

	mu             sync.Mutex
	coreDNS, caddy *proc.Process
}

// Addr is the node's address.
func (nd *Node) Addr() netip.Addr { return nd.Host.Addr }

// Running reports whether both of the node's processes run.
func (nd *Node) Running() bool {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.coreDNS != nil && nd.coreDNS.Running() && nd.caddy != nil && nd.caddy.Running()
}

// Resolver is an Unbound in a host of its own.
type Resolver struct {
	Host   *netns.Host
	Region string
	Proc   *proc.Process
}

// Client is a client host and the resolver it uses.
type Client struct {
	Host     *netns.Host
	Resolver netip.Addr
	Region   string
}

// Net is a running network.
type Net struct {
	Lab       *netns.Lab
	Dir       string
	Origin    *netns.Host
	Control   *netns.Host
	Resolvers []*Resolver
	Nodes     []*Node
	Clients   []*Client
	// KeyFile is the network key every node starts with.
	KeyFile string

	opts      Options
	originSrv *http.Server
	ctl       *http.Client
}

// Available says why a network cannot run here.
func Available() error {
	if err := netns.Available(true); err != nil {
		return err
	}
	return resolvers.Available(resolvers.Unbound)
}

func host(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, 0, byte(i)}) }

// OriginAddr is the origin's address.
func OriginAddr() netip.Addr { return host(2) }

// CoralHost is the Coralized host name of the origin.
func CoralHost() string { return OriginAddr().String() + "." + AliasZone }

// Start creates the hosts and starts everything, and returns once every
// node has joined and every name server sees every proxy.
func Start(ctx context.Context, o Options) (_ *Net, err error) {
	if err := o.normalize(); err != nil {
		return nil, err
	}
	if err := Available(); err != nil {
		return nil, err
	}
	lab, err := netns.New(netns.Options{})
	if err != nil {
		return nil, err
	}
	n := &Net{Lab: lab, Dir: o.Dir, opts: o}
	defer func() {
		if err != nil {
			n.Close()
		}
	}()
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	n.KeyFile = filepath.Join(o.Dir, "network.key")
	if err := coraldht.WriteKeyFile(n.KeyFile); err != nil {
		return nil, err
	}
	ctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	if err := n.addOrigin(); err != nil {
		return nil, err
	}
	if err := n.addHosts(); err != nil {
		return nil, err
	}
	for _, nd := range n.Nodes {
		if err := n.StartNode(nd); err != nil {
			return nil, err
		}
	}
	o.Logf("started %d nodes, 2 resolvers, %d client hosts in namespaces %s*", o.Nodes, o.Clients, n.Origin.NS[:len(n.Origin.NS)-len("origin")])
	if err := n.WaitReady(ctx); err != nil {
		return nil, fmt.Errorf("%w (logs in %s)", err, o.Dir)
	}
	return n, nil
}

// Close stops everything and removes the namespaces.
func (n *Net) Close() error {
	var errs []error
	for _, nd := range n.Nodes {
		nd.mu.Lock()
		for _, p := range []*proc.Process{nd.caddy, nd.coreDNS} {
			if p != nil {
				_ = p.Stop(3 * time.Second)
			}
		}
		nd.mu.Unlock()
	}
	for _, r := range n.Resolvers {
		if r.Proc != nil {
			_ = r.Proc.Stop(3 * time.Second)
		}
	}
	if n.originSrv != nil {
		_ = n.originSrv.Close()
	}
	errs = append(errs, n.Lab.Close())
	return errors.Join(errs...)
}

// unboundConf is a resolver's configuration: stub zones for the Coral
// zones at every node's CoreDNS, nothing else (clients ask only for
// Coralized names).
func (n *Net) unboundConf(r *Resolver, dir string) string {
	conf := fmt.Sprintf(`# written by internal/lab/netns/coralnet
server:
	directory: %[1]q
	chroot: ""
	username: ""
	pidfile: %[2]q
	use-syslog: no
	logfile: ""
	verbosity: 1
	interface: %[3]s@53
	outgoing-interface: %[3]s
	do-ip4: yes
	do-ip6: no
	access-control: 198.18.0.0/15 allow
	do-not-query-localhost: no
	module-config: "iterator"
	local-zone: "test." nodefault
	# Dead name servers are retried soon after they come back.
	infra-host-ttl: 30
remote-control:
	control-enable: no
`, dir, filepath.Join(dir, "unbound.pid"), r.Host.Addr)
	for _, zone := range []string{AliasZone, CoralZone} {
		conf += fmt.Sprintf("stub-zone:\n\tname: %q\n", zone)
		for _, nd := range n.Nodes {
			conf += fmt.Sprintf("\tstub-addr: %s\n", nd.Addr())
		}
	}
	return conf
}

func (n *Net) startUnbound(r *Resolver) error {
	dir := filepath.Join(n.Dir, r.Host.Name)
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	conf := filepath.Join(dir, "unbound.conf")
	if err := labconf.WriteFile(conf, n.unboundConf(r, dir)); err != nil {
		return err
	}
	bin, err := resolvers.LookPath("unbound")
	if err != nil {
		return err
	}
	r.Proc, err = r.Host.Start([]string{bin, "-d", "-d", "-c", conf}, proc.Options{Dir: dir, Log: filepath.Join(dir, "unbound.log"), Banner: "coralnet"})
	return err
}

// Check reports processes that died without being told to.
func (n *Net) Check() error {
	var errs []error
	for _, nd := range n.Nodes {
		nd.mu.Lock()
		for _, p := range []*proc.Process{nd.coreDNS, nd.caddy} {
			if p != nil {
				errs = append(errs, p.Exited())
			}
		}
		nd.mu.Unlock()
	}
	for _, r := range n.Resolvers {
		errs = append(errs, r.Proc.Exited())
	}
	return errors.Join(errs...)
}

// StartNode writes the node's configuration and starts its processes
// (not draining: a drain does not outlive its process).
func (n *Net) StartNode(nd *Node) error {
	if err := n.writeConfig(nd); err != nil {
		return err
	}
	if err := os.Remove(nd.drainFile()); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	nd.mu.Lock()
	defer nd.mu.Unlock()
	start := func(what string, argv []string, env []string) (*proc.Process, error) {
		return nd.Host.Start(argv, proc.Options{Name: nd.Host.Name + "/" + what, Dir: nd.Dir, Env: env,
			Log: filepath.Join(nd.Dir, what+".log"), Banner: "coralnet"})
	}
	var err error
	if nd.coreDNS, err = start("coredns", []string{nd.CoreDNSBin, "-conf", filepath.Join(nd.Dir, "Corefile")}, nil); err != nil {
		return err
	}
	nd.caddy, err = start("caddy", labconf.CaddyArgv(nd.CaddyBin, filepath.Join(nd.Dir, "Caddyfile")), labconf.CaddyEnv(nd.Dir))
	return err
}

// KillNode sends SIGKILL to both of the node's processes: the host is
// lost, with no goodbye to its peers. Its disk cache stays.
func (n *Net) KillNode(nd *Node) {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	for _, p := range []*proc.Process{nd.caddy, nd.coreDNS} {
		if p != nil {
			p.Kill()
		}
	}
}

// StopNode stops the node's processes gracefully (SIGTERM).
func (n *Net) StopNode(nd *Node) error {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	var errs []error
	for _, p := range []*proc.Process{nd.caddy, nd.coreDNS} {
		if p != nil {
			errs = append(errs, p.Stop(10*time.Second))
		}
	}
	return errors.Join(errs...)
}

// StopDNS stops the node's CoreDNS gracefully, leaving its Caddy running:
// what taking a node's name server out of the parent zone's delegation
// does to the resolvers, which then ask the others.
func (n *Net) StopDNS(nd *Node) error {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	if nd.coreDNS == nil {
		return nil
	}
	err := nd.coreDNS.Stop(10 * time.Second)
	nd.coreDNS = nil
	return err
}

// Reload rewrites the node's configuration and has both servers load it
// in place: Caddy through `caddy reload` (its admin API; it returns once
// the new configuration runs), CoreDNS through SIGUSR1 (Reload returns
// once its log says the reload completed).
func (n *Net) Reload(ctx context.Context, nd *Node) error {
	if err := n.writeConfig(nd); err != nil {
		return err
	}
	nd.mu.Lock()
	coreDNS := nd.coreDNS
	nd.mu.Unlock()
	if coreDNS == nil || !coreDNS.Running() {
		return fmt.Errorf("%s: CoreDNS not running", nd.Host.Name)
	}
	admin := netip.AddrPortFrom(nd.Addr(), PortAdmin).String()
	argv := append(labconf.CaddyArgv(nd.CaddyBin, filepath.Join(nd.Dir, "Caddyfile")), "--address", admin, "--force")
	argv[1] = "reload"
	if _, err := nd.Host.Run(ctx, argv...); err != nil {
		return err
	}
	const done = "Reloading complete"
	before := strings.Count(coreDNS.Log(), done)
	if err := coreDNS.Signal(syscall.SIGUSR1); err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	return n.poll(ctx, nd.Host.Name+"'s CoreDNS reload", func() error {
		if strings.Count(coreDNS.Log(), done) > before {
			return nil
		}
		return errors.New("not reloaded yet")
	})
}

// Drain takes the node out of DNS answers as the operations guide says
// before a stop: POST /coral/drain to its Caddy, its CoreDNS's drain file
// created. It returns once every other running name server has dropped
// it from its live proxies; clients holding its address from an earlier
// answer keep using it for up to the answer's TTL.
func (n *Net) Drain(ctx context.Context, nd *Node) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, fmt.Sprintf("http://%s/coral/drain", netip.AddrPortFrom(nd.Addr(), PortAdmin)), nil)
	if err != nil {
		return err
	}
	resp, err := n.ctl.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("%s: POST /coral/drain: %s", nd.Host.Name, resp.Status)
	}
	if err := os.WriteFile(nd.drainFile(), nil, 0o644); err != nil {
		return err
	}
	live := 0
	for _, o := range n.Nodes {
		if o.Running() {
			live++
		}
	}
	for _, o := range n.Nodes {
		if o == nd || !o.Running() {
			continue
		}
		if err := n.poll(ctx, o.Host.Name+" drops "+nd.Host.Name, func() error {
			got, err := n.Metric(ctx, o, PortMetrics, "coredns_coral_live_proxies", "level", "0")
			if err != nil {
				return err
			}
			if int(got) != live-1 {
				return fmt.Errorf("%v live proxies, want %d", got, live-1)
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// Get GETs url from the control host.
func (n *Net) Get(ctx context.Context, url string) (*http.Response, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	return n.ctl.Do(req)
}

// Dialer returns a dial function for an http.Transport in host h.
func Dialer(h *netns.Host) func(ctx context.Context, network, addr string) (net.Conn, error) {
	return h.DialContext
}
