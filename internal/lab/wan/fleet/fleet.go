//go:build linux

// Package fleet deploys a Coral CDN on an emulated wide area
// (internal/lab/wan) the way docs/operations.md tells an operator to: at
// each of some sites, Coral nodes, each a host of its own running
// bin/coredns and bin/caddy on its one address, with the operations
// guide's Corefile and Caddyfile (its DSHT ports, a network key, two
// bootstrap nodes at other sites, the admin API, ready and metrics on
// the host's loopback, every other setting at its default: no pinned
// cluster, no classify line, no hint prefix); at every site with clients,
// an Unbound for them; a fake root and a fake "test." TLD at a site of
// their own, which delegate the two Coral zones to a few Coral name
// servers with glue, as the parent zone would; an origin far away behind
// a thin line; and clients: addresses on a client host of each site, some
// in the site's LAN beside the proxies, some on the site's client LAN.
// Everything a Coral node learns, it learns on its own: its clusters from
// the RTTs it measures, its locality hints from its start-up trace, the
// resolvers' levels from its probes, a client's routers from its traces.
//
// Addresses (see internal/lab/wan): node i of site s is 198.18.s.(10+i),
// the site's Unbound 198.18.s.53, clients 198.18.s.(100+j) and, on the
// client LAN, 198.19.s.(100+j); the root and TLD servers 198.18.d.53 and
// .54 at the DNS site d; the origin 198.18.o.80, serving on port 80, whose
// Coralized name is 198.18.o.80.nyud.test.
package fleet

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/internal/lab/netns"
	"github.com/coralcdn/coral/internal/lab/proc"
	"github.com/coralcdn/coral/internal/lab/resolvers"
	"github.com/coralcdn/coral/internal/lab/wan"
)

// Zones and ports, as in docs/operations.md with the lab's TLD.
const (
	CoralZone = "nyucd.test"
	AliasZone = "nyud.test"

	PortDNS          = 53
	PortHTTP         = 80
	PortDHTCaddy     = 4000
	PortDHTCoreDNS   = 4001
	PortAdmin        = 2019
	PortReady        = 8181
	PortMetrics      = 9153
	originHost       = 80
	resolverHost     = 53
	rootHost         = 53
	tldHost          = 54
	firstNodeHost    = 10
	firstClientHost  = 100
	maxClientsPerLAN = 100
)

// Options describe a fleet.
type Options struct {
	// Lab is the wide area, built by the caller.
	Lab *wan.Lab
	// NodeSites have Coral nodes, NodesPerSite each (default 2).
	NodeSites    []int
	NodesPerSite int
	// ClientSites have clients and a resolver (the node sites have both
	// anyway); Clients is the number of clients in each site's LAN
	// (default 4) and LANClients on its client LAN (default 0).
	ClientSites []int
	Clients     int
	LANClients  int
	// OriginSite holds the origin; OriginLine, if set, is the rate of its
	// site's line to the world ("384kbit"), behind a queue of
	// OriginQueue bytes (default 64 KiB).
	OriginSite  int
	OriginLine  string
	OriginQueue int
	Origin      http.Handler
	// DNSSite holds the fake root and TLD servers.
	DNSSite int
	// Delegated is how many Coral name servers the TLD delegates the
	// Coral zones to (default 4), at as many sites as it can.
	Delegated int
	// CoreDNS and Caddy are the binaries (bin/coredns, bin/caddy).
	CoreDNS, Caddy string
	Dir            string
	// Config is what the nodes run beyond the operations guide's
	// defaults (none by default).
	Config Config
	// StartTimeout bounds Start's wait for every node to be ready
	// (default 3 min).
	StartTimeout time.Duration
	Logf         func(format string, args ...any)
}

// Config are the settings a fleet may run with beyond the defaults, for
// the experiments that compare configurations.
type Config struct {
	// Levels, if set, are both servers' `levels` ("60ms 20ms").
	Levels string
	// NoProximity sets CoreDNS's `proximity off`: answers chosen without
	// a trace toward the client.
	NoProximity bool
	// PeerTimeout, if set, is coral_proxy's `peer_timeout`.
	PeerTimeout string
}

// Node is one Coral node: a host running bin/coredns and bin/caddy.
type Node struct {
	Site  int
	Index int // within the site
	Host  *netns.Host
	Dir   string

	// ctl reaches the node's admin API, ready and metrics on its
	// loopback, from inside its namespace.
	ctl *http.Client

	mu             sync.Mutex
	coreDNS, caddy *proc.Process
	started        time.Time
}

// Addr is the node's address.
func (nd *Node) Addr() netip.Addr { return nd.Host.Addr }

// Name is the node's host name ("n3.1": site 3, node 1).
func (nd *Node) Name() string { return nd.Host.Name }

// Client is one client address and the resolver of its site.
type Client struct {
	Site     int
	Addr     netip.Addr
	Host     *netns.Host
	Resolver netip.Addr
	// Beside is true for a client in the site's LAN, beside the site's
	// proxies if it has any; false on the client LAN.
	Beside bool
}

// Fleet is a running Coral deployment.
type Fleet struct {
	Lab       *wan.Lab
	Nodes     []*Node
	Clients   []*Client
	Resolvers map[int]*resolvers.Resolver // by site
	Origin    *netns.Host
	// Delegation lists the name servers the TLD delegates to.
	Delegation []netip.Addr
	KeyFile    string

	opts      Options
	root, tld *resolvers.Authority
	dnsHost   *netns.Host
	originSrv *http.Server
}

// OriginAddr is the origin's address.
func (f *Fleet) OriginAddr() netip.Addr { return wan.HostAddr(f.opts.OriginSite, originHost) }

// CoralHost is the origin's Coralized host name.
func (f *Fleet) CoralHost() string { return f.OriginAddr().String() + "." + AliasZone }

func (o *Options) normalize() error {
	if o.Lab == nil || o.Dir == "" || o.Origin == nil || o.CoreDNS == "" || o.Caddy == "" || len(o.NodeSites) == 0 {
		return errors.New("fleet: Lab, Dir, Origin, CoreDNS, Caddy and NodeSites are required")
	}
	if o.NodesPerSite == 0 {
		o.NodesPerSite = 2
	}
	if o.Clients == 0 {
		o.Clients = 4
	}
	if o.Delegated == 0 {
		o.Delegated = 4
	}
	if o.OriginQueue == 0 {
		o.OriginQueue = 64 << 10
	}
	if o.StartTimeout == 0 {
		o.StartTimeout = 3 * time.Minute
	}
	if o.Logf == nil {
		o.Logf = func(string, ...any) {}
	}
	if o.NodesPerSite > firstClientHost-firstNodeHost || o.Clients > maxClientsPerLAN || o.LANClients > maxClientsPerLAN {
		return fmt.Errorf("fleet: %d nodes, %d and %d clients per site: too many", o.NodesPerSite, o.Clients, o.LANClients)
	}
	for _, s := range append(slices.Clone(o.NodeSites), o.OriginSite, o.DNSSite) {
		if s < 0 || s >= len(o.Lab.Sites) {
			return fmt.Errorf("fleet: site %d not in the lab", s)
		}
	}
	return nil
}

// Start deploys the fleet and returns once every name server is ready
// and sees every proxy live, and every proxy has joined.
func Start(ctx context.Context, o Options) (_ *Fleet, err error) {
	if err := o.normalize(); err != nil {
		return nil, err
	}
	if err := resolvers.Available(resolvers.Unbound); err != nil {
		return nil, err
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	f := &Fleet{Lab: o.Lab, opts: o, Resolvers: map[int]*resolvers.Resolver{}}
	defer func() {
		if err != nil {
			f.Close()
		}
	}()
	f.KeyFile = filepath.Join(o.Dir, "network.key")
	if err := coraldht.WriteKeyFile(f.KeyFile); err != nil {
		return nil, err
	}
	if err := f.addNodes(); err != nil {
		return nil, err
	}
	if err := f.startDNS(); err != nil {
		return nil, err
	}
	if err := f.startOrigin(); err != nil {
		return nil, err
	}
	if err := f.addClients(ctx); err != nil {
		return nil, err
	}
	for _, nd := range f.Nodes {
		if err := f.startNode(nd); err != nil {
			return nil, err
		}
	}
	o.Logf("fleet: %d nodes at %d sites, %d clients, origin at site %d, root at site %d", len(f.Nodes), len(o.NodeSites),
		len(f.Clients), o.OriginSite, o.DNSSite)
	sctx, cancel := context.WithTimeout(ctx, o.StartTimeout)
	defer cancel()
	if err := f.WaitReady(sctx); err != nil {
		return nil, fmt.Errorf("%w (logs in %s)", err, o.Dir)
	}
	return f, nil
}

func (f *Fleet) addNodes() error {
	for _, s := range f.opts.NodeSites {
		for i := range f.opts.NodesPerSite {
			name := fmt.Sprintf("n%d.%d", s, i)
			h, err := f.Lab.AddHost(s, name, wan.HostAddr(s, firstNodeHost+i))
			if err != nil {
				return err
			}
			nd := &Node{Site: s, Index: i, Host: h, Dir: filepath.Join(f.opts.Dir, name)}
			nd.ctl = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{DialContext: h.DialContext, DisableKeepAlives: true}}
			if err := os.MkdirAll(nd.Dir, 0o755); err != nil {
				return err
			}
			f.Nodes = append(f.Nodes, nd)
		}
	}
	return nil
}

// bootstrap is every node's bootstrap list: the Caddy DSHT address of the
// first node at each of the first two node sites.
func (f *Fleet) bootstrap() []netip.AddrPort {
	var out []netip.AddrPort
	for _, s := range f.opts.NodeSites[:min(2, len(f.opts.NodeSites))] {
		out = append(out, netip.AddrPortFrom(wan.HostAddr(s, firstNodeHost), PortDHTCaddy))
	}
	return out
}

// startDNS starts the root and TLD servers, and an Unbound at every site
// with clients.
func (f *Fleet) startDNS() error {
	d := f.opts.DNSSite
	rootAddr, tldAddr := wan.HostAddr(d, rootHost), wan.HostAddr(d, tldHost)
	h, err := f.Lab.AddHost(d, "dns", rootAddr, tldAddr)
	if err != nil {
		return err
	}
	f.dnsHost = h
	f.Delegation = f.delegation()
	root, tld, err := f.zones(rootAddr, tldAddr)
	if err != nil {
		return err
	}
	err = h.Do(func() (err error) {
		if f.root, err = resolvers.StartAuthority(rootAddr, root); err != nil {
			return err
		}
		f.tld, err = resolvers.StartAuthority(tldAddr, tld)
		return err
	})
	if err != nil {
		return err
	}
	for _, s := range f.clientSites() {
		rh, err := f.Lab.AddHost(s, fmt.Sprintf("unbound%d", s), wan.HostAddr(s, resolverHost))
		if err != nil {
			return err
		}
		r, err := resolvers.Start(context.Background(), resolvers.Unbound, resolvers.Options{
			Addr: rh.Addr, RootHints: []netip.Addr{rootAddr}, QNameMinimisation: true,
			Dir: filepath.Join(f.opts.Dir, rh.Name), Command: rh.Command, Dial: rh.DialContext,
			Allow: []netip.Prefix{wan.SiteLAN(s), wan.ClientLAN(s)}, Quiet: true, StartTimeout: time.Minute,
		})
		if err != nil {
			return err
		}
		f.Resolvers[s] = r
	}
	return nil
}

// clientSites are the sites with clients: every node site, then the
// client sites.
func (f *Fleet) clientSites() []int {
	var out []int
	for _, s := range append(slices.Clone(f.opts.NodeSites), f.opts.ClientSites...) {
		if !slices.Contains(out, s) {
			out = append(out, s)
		}
	}
	return out
}

// delegation picks the name servers of the parent zone's delegation: the
// first node of as many sites as it can, then the second ones.
func (f *Fleet) delegation() []netip.Addr {
	var out []netip.Addr
	for i := 0; len(out) < f.opts.Delegated && i < f.opts.NodesPerSite; i++ {
		for _, s := range f.opts.NodeSites {
			if len(out) < f.opts.Delegated {
				out = append(out, wan.HostAddr(s, firstNodeHost+i))
			}
		}
	}
	return out
}

func (f *Fleet) startOrigin() error {
	o := f.opts.OriginSite
	h, err := f.Lab.AddHost(o, "origin", f.OriginAddr())
	if err != nil {
		return err
	}
	f.Origin = h
	if f.opts.OriginLine != "" {
		if err := f.Lab.Throttle(o, f.opts.OriginLine, f.opts.OriginQueue); err != nil {
			return err
		}
	}
	ln, err := h.Listen("tcp", netip.AddrPortFrom(f.OriginAddr(), PortHTTP).String())
	if err != nil {
		return err
	}
	f.originSrv = &http.Server{Handler: f.opts.Origin, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = f.originSrv.Serve(ln) }()
	return nil
}

func (f *Fleet) addClients(ctx context.Context) error {
	for _, s := range f.clientSites() {
		for _, lan := range []struct {
			n      int
			addr   func(s, h int) netip.Addr
			name   string
			beside bool
		}{{f.opts.Clients, wan.HostAddr, "c%d", true}, {f.opts.LANClients, wan.ClientAddr, "cl%d", false}} {
			if lan.n == 0 {
				continue
			}
			var addrs []netip.Addr
			for j := range lan.n {
				addrs = append(addrs, lan.addr(s, firstClientHost+j))
			}
			h, err := f.Lab.AddHost(s, fmt.Sprintf(lan.name, s), addrs...)
			if err != nil {
				return err
			}
			for _, a := range addrs {
				f.Clients = append(f.Clients, &Client{Site: s, Addr: a, Host: h, Resolver: f.Resolvers[s].Addr, Beside: lan.beside})
			}
		}
	}
	return nil
}

// Redeploy stops every node, empties its cache and state, starts it again
// with cfg, flushes the resolvers' caches, and waits until the fleet is
// ready: a fresh deployment on the same hosts.
func (f *Fleet) Redeploy(ctx context.Context, cfg Config) error {
	f.stopNodes()
	for _, nd := range f.Nodes {
		for _, sub := range []string{"cache", "data", "config"} {
			if err := os.RemoveAll(filepath.Join(nd.Dir, sub)); err != nil {
				return err
			}
		}
	}
	f.opts.Config = cfg
	for _, r := range f.Resolvers {
		if err := r.FlushCache(); err != nil {
			return err
		}
	}
	for _, nd := range f.Nodes {
		if err := f.startNode(nd); err != nil {
			return err
		}
	}
	sctx, cancel := context.WithTimeout(ctx, f.opts.StartTimeout)
	defer cancel()
	return f.WaitReady(sctx)
}

func (f *Fleet) stopNodes() {
	var wg sync.WaitGroup
	for _, nd := range f.Nodes {
		wg.Go(func() {
			nd.mu.Lock()
			defer nd.mu.Unlock()
			for _, p := range []*proc.Process{nd.caddy, nd.coreDNS} {
				if p != nil {
					_ = p.Stop(3 * time.Second)
				}
			}
		})
	}
	wg.Wait()
}

// Close stops everything and removes the lab's namespaces of the fleet
// (the lab itself is the caller's).
func (f *Fleet) Close() error {
	var errs []error
	f.stopNodes()
	for _, r := range f.Resolvers {
		errs = append(errs, r.Stop())
	}
	if f.originSrv != nil {
		_ = f.originSrv.Close()
	}
	for _, a := range []*resolvers.Authority{f.root, f.tld} {
		if a != nil {
			errs = append(errs, a.Close())
		}
	}
	return errors.Join(errs...)
}

// Check reports processes that died on their own, and a dead delayer.
func (f *Fleet) Check() error {
	errs := []error{f.Lab.Check()}
	for _, nd := range f.Nodes {
		nd.mu.Lock()
		for _, p := range []*proc.Process{nd.coreDNS, nd.caddy} {
			if p != nil {
				errs = append(errs, p.Exited())
			}
		}
		nd.mu.Unlock()
	}
	for _, r := range f.Resolvers {
		if !r.Running() {
			errs = append(errs, fmt.Errorf("unbound at %v died: %s", r.Addr, r.LogTail(10)))
		}
	}
	return errors.Join(errs...)
}

// DNSHost is the host of the root and TLD servers.
func (f *Fleet) DNSHost() *netns.Host { return f.dnsHost }

// NodeAt returns the node with address a, or nil.
func (f *Fleet) NodeAt(a netip.Addr) *Node {
	for _, nd := range f.Nodes {
		if nd.Addr() == a {
			return nd
		}
	}
	return nil
}

// Pids are the process IDs of every node's CoreDNS and Caddy.
func (f *Fleet) Pids() (coreDNS, caddy []int) {
	for _, nd := range f.Nodes {
		nd.mu.Lock()
		if nd.coreDNS != nil {
			coreDNS = append(coreDNS, nd.coreDNS.Pid())
		}
		if nd.caddy != nil {
			caddy = append(caddy, nd.caddy.Pid())
		}
		nd.mu.Unlock()
	}
	return coreDNS, caddy
}
