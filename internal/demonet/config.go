package demonet

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"

	"github.com/coralcdn/coral/test/resolverlab"
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
func zones(l Layout, nodes int) (root, origin resolverlab.Zone, err error) {
	var b strings.Builder
	b.WriteString(resolverlab.RootZone([]netip.Addr{l.Root()}))
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
	if root, err = resolverlab.ParseZone(".", b.String()); err != nil {
		return
	}
	origin, err = resolverlab.ParseZone(OriginZone, fmt.Sprintf(`$TTL 300
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
// by region instead of measured, and the liveness knobs lowered.
func corefile(s nodeSpec) string {
	var boot []string
	for _, b := range s.bootstrap {
		boot = append(boot, b.String())
	}
	var classify strings.Builder
	for _, r := range s.resolvers {
		level := 1
		if r.region == s.region {
			level = 2
		}
		fmt.Fprintf(&classify, "        classify %s/32 %d\n", r.addr, level)
	}
	bootLine := ""
	if len(boot) > 0 {
		bootLine = "        bootstrap " + strings.Join(boot, " ") + "\n"
	}
	return fmt.Sprintf(`# written by internal/demonet: node %[1]d (%[2]s), region %[3]s
%[4]s %[5]s {
    bind %[2]s
    coral %[4]s {
        alias %[5]s
        listen %[2]s:%[6]d
%[7]s        key_file %[8]s
        cluster 1 %[9]s
        cluster 2 %[3]s
        # Loopback RTTs say nothing: resolvers are placed by region instead
        # (level 2 in their own region, 1 elsewhere); others are level 0.
        probe none
%[10]s        answer_ttl %[11]d
        live_within %[12]s
        check_interval %[13]s
    }
    log
    errors
    ready %[2]s:%[14]d
    prometheus %[2]s:%[15]d
}
`, s.index, s.addr, s.region, CoralZone, AliasZone, PortDHTCoreDNS, bootLine, s.keyFile, ClusterAll,
		classify.String(), AnswerTTL, LiveWithin, CheckInterval, PortReady, PortMetrics)
}

// StatusSite gives the extra Caddyfile site block of each Caddy node: its
// status page (the coral_status handler, module/caddy/statuspage.go) on
// the node's own address, port 80, and the page's URL. Requests for the
// bare address get the page; every Coralized host still goes to the
// proxy (Caddy tries the site with a host first). It is a variable so
// that a program can move the page or leave it out (return "", "").
var StatusSite = func(addr netip.Addr) (siteBlock, url string) {
	return fmt.Sprintf("\n# The node's status page; every other host goes to the proxy.\nhttp://%[1]s {\n\tbind %[1]s\n\tcoral_status\n}\n", addr),
		fmt.Sprintf("http://%s/", addr)
}

// caddyfile is the node's Caddy configuration: the coral app (its DSHT
// node on PortDHTCaddy, the same clusters as the node's CoreDNS) and
// coral_proxy for the alias zone on port 80 of the node's address.
func caddyfile(s nodeSpec) string {
	var boot []string
	for _, b := range s.bootstrap {
		boot = append(boot, b.String())
	}
	bootLine := ""
	if len(boot) > 0 {
		bootLine = "\t\tbootstrap " + strings.Join(boot, " ") + "\n"
	}
	status, _ := StatusSite(s.addr)
	return fmt.Sprintf(`# written by internal/demonet: node %[1]d (%[2]s), region %[3]s
{
	admin %[2]s:%[4]d {
		origins %[2]s:%[4]d localhost:%[4]d
	}
	auto_https off
	skip_install_trust
	persist_config off
	grace_period 2s
	log {
		exclude admin.api
	}
	coral {
		listen %[2]s:%[5]d
%[6]s		key_file %[7]s
		cluster 1 %[8]s
		cluster 2 %[3]s
	}
}

:%[9]d {
	bind %[2]s
	log
	coral_proxy %[10]s {
		cache_dir %[11]s
		cache_size 256MiB
		# Only the demo origin; everything else on loopback or private
		# addresses stays refused.
		allow_origins %[12]s/32
		# The demo's peers are on loopback, which references may not
		# name unless listed.
		allow_peers 127.0.0.0/8
		# Honour short max-age (the default minimum is 5 min), so copies go
		# stale within seconds and stale serving can be seen.
		min_ttl 0
		origin_timeout 5s
		rate_limit 100 200
	}
}
%[13]s`, s.index, s.addr, s.region, PortAdmin, PortDHTCaddy, bootLine, s.keyFile, ClusterAll,
		PortHTTP, AliasZone, filepath.Join(s.dir, "cache"), s.layout.Origin(), status)
}

// resolvConf is the resolver configuration Caddy sees (in a mount
// namespace of its own): the demo's first recursive resolver.
func resolvConf(resolver netip.Addr) string {
	return fmt.Sprintf("# written by internal/demonet\nnameserver %s\noptions timeout:2 attempts:3\n", resolver)
}
