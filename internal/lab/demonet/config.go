package demonet

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/resolvers"
)

// The zones and names of the demo.
const (
	// CoralZone is the zone the name servers are authoritative for.
	CoralZone = "nyucd.test"
	// AliasZone is the zone users type: www.demo.test.nyud.test.
	AliasZone = "nyud.test"
	// OriginZone holds the origin's name, served by the fake root.
	OriginZone = "demo.test"
	// OriginName is the origin web server's host name.
	OriginName = "www." + OriginZone
	// IntranetName is a host in OriginZone on an address the proxies must
	// never fetch from (outside allow_origins).
	IntranetName = "intranet." + OriginZone
)

// Ports on each node's address.
const (
	PortDNS        = 53   // CoreDNS
	PortHTTP       = 80   // Caddy, coral_proxy
	PortAdmin      = 2019 // Caddy admin API (/coral/status, /coral/cache, /metrics)
	PortReady      = 8181 // CoreDNS ready plugin
	PortMetrics    = 9153 // CoreDNS prometheus plugin
	PortDHTCoreDNS = 4000 // UDP: the CoreDNS plugin's DSHT node
	PortDHTCaddy   = 4001 // UDP: the Caddy coral app's DSHT node
)

// Tuning of the demo network: what it changes from the plugins' defaults
// and why (see the package documentation).
const (
	// LiveWithin and CheckInterval make the name servers notice a dead
	// proxy within about 5 s instead of 15 s.
	LiveWithin    = "5s"
	CheckInterval = "1s"
	// AnswerTTL is the TTL of proxy addresses in answers (default 30 s, 60 s
	// at level 2), so resolvers drop a dead proxy soon.
	AnswerTTL = 5
)

// Layout is where everything of a demo network lives, in one /24.
type Layout struct {
	Prefix netip.Prefix // a /24 in 127.0.80.0/24–127.0.89.0/24
}

func (l Layout) host(i int) netip.Addr {
	b := l.Prefix.Addr().As4()
	b[3] = byte(i)
	return netip.AddrFrom4(b)
}

// Root is the fake DNS root (which also serves OriginZone): .1
func (l Layout) Root() netip.Addr { return l.host(1) }

// Origin is the origin web server: .2, port 80.
func (l Layout) Origin() netip.Addr { return l.host(2) }

// Resolver is the i-th recursive resolver: .3, .4, ...
func (l Layout) Resolver(i int) netip.Addr { return l.host(3 + i) }

// Intranet is the address IntranetName resolves to: .9. Nothing of the
// demo listens there; tests run a server there that must never be asked.
func (l Layout) Intranet() netip.Addr { return l.host(9) }

// Node is the i-th Coral node (CoreDNS and Caddy): .10, .11, ...
func (l Layout) Node(i int) netip.Addr { return l.host(10 + i) }

// maxNodes keeps node addresses within the /24.
const maxNodes = 40

// nsName is the name server name the coral plugin uses for addr.
func nsName(addr netip.Addr) string {
	return "ns-" + strings.ReplaceAll(addr.String(), ".", "-") + "." + CoralZone + "."
}

// zones returns the fake root's zone (delegating the Coral zones to every
// node and OriginZone to itself) and OriginZone.
func zones(l Layout, nodes int) (root, origin resolvers.Zone, err error) {
	var b strings.Builder
	b.WriteString(resolvers.RootZone([]netip.Addr{l.Root()}))
	for _, zone := range []string{CoralZone, AliasZone} {
		for i := range nodes {
			fmt.Fprintf(&b, "%s. 172800 IN NS %s\n", zone, nsName(l.Node(i)))
		}
	}
	for i := range nodes {
		fmt.Fprintf(&b, "%s 172800 IN A %s\n", nsName(l.Node(i)), l.Node(i))
	}
	fmt.Fprintf(&b, "%s. 172800 IN NS ns1.%s.\n", OriginZone, OriginZone)
	fmt.Fprintf(&b, "ns1.%s. 172800 IN A %s\n", OriginZone, l.Root())
	if root, err = resolvers.ParseZone(".", b.String()); err != nil {
		return
	}
	origin, err = resolvers.ParseZone(OriginZone, fmt.Sprintf(`$TTL 300
@        IN SOA ns1 hostmaster 1 3600 600 86400 60
@        IN NS  ns1
ns1      IN A   %s
www      IN A   %s
intranet IN A   %s
`, l.Root(), l.Origin(), l.Intranet()))
	return
}

// nodeSpec is what a node's configuration files need.
type nodeSpec struct {
	index     int
	addr      netip.Addr
	region    string
	dir       string
	keyFile   string
	bootstrap []netip.AddrPort // DSHT nodes to join through (not itself)
	resolvers []resolverSpec   // for classify
	layout    Layout
	https     httpsSpec
}

type resolverSpec struct {
	addr   netip.Addr
	region string
}

// ClusterAll is the level-1 cluster every node is pinned to; level 2 is
// the node's region.
const ClusterAll = "demo"

// corefile is the node's CoreDNS configuration: the coral plugin serving
// both zones on port 53 of the node's address, its DSHT node on
// PortDHTCoreDNS, clusters pinned (RTTs on loopback are all ~0, so
// measurement would put everything in one cluster), resolvers classified
// by region instead of measured (level 2 in their own region, 1
// elsewhere; others are level 0), and the liveness knobs lowered.
func corefile(s nodeSpec) string {
	coral := labconf.CoralPlugin{
		Zone:  CoralZone,
		Alias: AliasZone,
		Node: labconf.Node{Listen: netip.AddrPortFrom(s.addr, PortDHTCoreDNS), Bootstrap: s.bootstrap,
			KeyFile: s.keyFile, Clusters: map[int]string{1: ClusterAll, 2: s.region}},
		Probe:      "none",
		AnswerTTL:  AnswerTTL,
		LiveWithin: LiveWithin,
		CheckEvery: CheckInterval,
	}
	for _, r := range s.resolvers {
		level := 1
		if r.region == s.region {
			level = 2
		}
		coral.Classify = append(coral.Classify, fmt.Sprintf("%s/32 %d", r.addr, level))
	}
	return labconf.Corefile(header(s), labconf.D(CoralZone, AliasZone).With(
		labconf.D("bind", s.addr),
		coral.Directive(),
		labconf.D("log"),
		labconf.D("errors"),
		labconf.D("ready", netip.AddrPortFrom(s.addr, PortReady)),
		labconf.D("prometheus", netip.AddrPortFrom(s.addr, PortMetrics)),
	))
}

func header(s nodeSpec) string {
	return fmt.Sprintf("written by internal/lab/demonet: node %d (%s), region %s", s.index, s.addr, s.region)
}

// StatusSite gives the extra Caddyfile site block of each Caddy node: its
// status page (the coral_status handler, module/caddy/statuspage.go) on
// the node's own address, port 80, and the page's URL. Requests for the
// bare address get the page; every Coralized host still goes to the
// proxy (Caddy tries the site with a host first). It is a variable so
// that a program can move the page or leave it out (return an empty
// Directive and "").
var StatusSite = func(addr netip.Addr) (site labconf.Directive, url string) {
	return labconf.D("http://"+addr.String()).With(labconf.D("bind", addr), labconf.D("coral_status")).
			Commented("The node's status page; every other host goes to the proxy."),
		fmt.Sprintf("http://%s/", addr)
}

// caddyfile is the node's Caddy configuration: the coral app (its DSHT
// node on PortDHTCaddy, the same clusters as the node's CoreDNS),
// coral_proxy for the alias zone on port 80 of the node's address, and on
// port 443 for one-label names with the wildcard certificate (https.go;
// the settings that differ from the defaults are explained in README.md).
func caddyfile(s nodeSpec) string {
	admin := netip.AddrPortFrom(s.addr, PortAdmin)
	status, _ := StatusSite(s.addr)
	proxy := labconf.Proxy{
		Zone:      AliasZone,
		CacheDir:  filepath.Join(s.dir, "cache"),
		CacheSize: "256MiB",
		// Only the demo origin: everything else on loopback or private
		// addresses stays refused. The peers are on loopback, which
		// references may not name unless listed.
		AllowOrigins: []string{s.layout.Origin().String() + "/32"},
		AllowPeers:   []string{"127.0.0.0/8"},
		// Peers fetch over plain HTTP; say where, as the first request
		// may come over HTTPS.
		PeerAddress: netip.AddrPortFrom(s.addr, PortHTTP).String(),
		RateLimit:   "100 200",
		// min_ttl 0 honours short max-age (the default minimum is 5
		// min), so copies go stale within seconds; one-label names over
		// http go to https.
		Extra: []labconf.Directive{labconf.D("min_ttl", "0"), labconf.D("origin_timeout", "5s"), labconf.D("https_redirect")},
	}.Directive()
	sites := []labconf.Directive{
		labconf.D(fmt.Sprintf("http://:%d", PortHTTP)).With(labconf.D("bind", s.addr), labconf.D("log"), proxy),
		status,
	}
	return labconf.Caddy{
		Comment:      header(s),
		Admin:        admin,
		AdminOrigins: []string{admin.String(), fmt.Sprintf("localhost:%d", PortAdmin)},
		// No skip_install_trust: it would configure the pki app, whose
		// local CA every node would create at once in the shared
		// storage. No site uses the local CA (their issuer is the demo's
		// ACME CA), so no pki app runs and nothing is installed.
		Grace:   "2s",
		Options: append([]labconf.Directive{labconf.D("log").With(labconf.D("exclude", "admin.api"))}, s.https.globalOptions()...),
		Coral: labconf.Node{Listen: netip.AddrPortFrom(s.addr, PortDHTCaddy), Bootstrap: s.bootstrap,
			KeyFile: s.keyFile, Clusters: map[int]string{1: ClusterAll, 2: s.region}},
		Sites: append(sites, s.https.sites(s.addr, proxy)...),
	}.String()
}

// resolvConf is the resolver configuration Caddy sees (in a mount
// namespace of its own): the demo's first recursive resolver.
func resolvConf(resolver netip.Addr) string {
	return fmt.Sprintf("# written by internal/lab/demonet\nnameserver %s\noptions timeout:2 attempts:3\n", resolver)
}
