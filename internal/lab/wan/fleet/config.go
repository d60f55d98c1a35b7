//go:build linux

package fleet

import (
	"fmt"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
	"github.com/coralcdn/coral/internal/lab/resolvers"
)

// nsName is the name the Coral plugin gives a name server at a
// (ns-198-18-3-10.nyucd.test.).
func nsName(a netip.Addr) string {
	return "ns-" + strings.ReplaceAll(a.String(), ".", "-") + "." + CoralZone + "."
}

// zones are the fake root (it delegates test. to the TLD server) and the
// TLD, which delegates both Coral zones to the delegation's name servers
// with glue, as docs/operations.md's "The parent zones" says.
func (f *Fleet) zones(rootAddr, tldAddr netip.Addr) (root, tld resolvers.Zone, err error) {
	rootText := resolvers.RootZone([]netip.Addr{rootAddr}) +
		fmt.Sprintf("test. 172800 IN NS a.nic.test.\na.nic.test. 172800 IN A %s\n", tldAddr)
	if root, err = resolvers.ParseZone(".", rootText); err != nil {
		return root, tld, err
	}
	var b strings.Builder
	fmt.Fprintf(&b, "$TTL 86400\ntest. IN SOA a.nic.test. hostmaster.nic.test. 1 1800 900 604800 300\n")
	fmt.Fprintf(&b, "test. IN NS a.nic.test.\na.nic.test. IN A %s\n", tldAddr)
	for _, zone := range []string{CoralZone, AliasZone} {
		for _, a := range f.Delegation {
			fmt.Fprintf(&b, "%s. 172800 IN NS %s\n", zone, nsName(a))
		}
	}
	for _, a := range f.Delegation {
		fmt.Fprintf(&b, "%s 172800 IN A %s\n", nsName(a), a)
	}
	tld, err = resolvers.ParseZone("test.", b.String())
	return root, tld, err
}

// writeConfig writes the node's Corefile and Caddyfile: the operations
// guide's, with this lab's addresses and zones. The admin API, ready and
// metrics listen on the host's loopback (its own, the host being a
// namespace), as the guide says: never public.
func (f *Fleet) writeConfig(nd *Node) error {
	header := fmt.Sprintf("written by internal/lab/wan/fleet: %s (%s), as docs/operations.md configures a node", nd.Name(), nd.Addr())
	boot := f.bootstrap()
	loop := netip.MustParseAddr("127.0.0.1")
	cfg := f.opts.Config
	coral := labconf.CoralPlugin{
		Zone: CoralZone, Alias: AliasZone,
		Node:  labconf.Node{Listen: netip.AddrPortFrom(nd.Addr(), PortDHTCoreDNS), Bootstrap: boot, KeyFile: f.KeyFile, Levels: cfg.Levels},
		Extra: []labconf.Directive{labconf.If(cfg.NoProximity, labconf.D("proximity", "off"))},
	}
	corefile := labconf.Corefile(header, labconf.D(CoralZone, AliasZone).With(
		labconf.D("bind", nd.Addr()),
		coral.Directive(),
		labconf.D("ready", netip.AddrPortFrom(loop, PortReady)),
		labconf.D("prometheus", netip.AddrPortFrom(loop, PortMetrics)),
		labconf.D("errors"),
	))
	admin := netip.AddrPortFrom(loop, PortAdmin)
	proxy := labconf.Proxy{
		Zone: AliasZone, CacheDir: filepath.Join(nd.Dir, "cache"), CacheSize: "512MiB",
		// The lab's addresses are in 198.18.0.0/15, which the proxy
		// treats as non-public: the origin and the peers must be allowed.
		AllowOrigins: []string{f.OriginAddr().String() + "/32"},
		AllowPeers:   []string{"198.18.0.0/15"},
		Extra:        []labconf.Directive{labconf.If(cfg.PeerTimeout != "", labconf.D("peer_timeout", cfg.PeerTimeout))},
	}.Directive()
	caddyfile := labconf.Caddy{
		Comment: header, Admin: admin, HTTPSOff: true, Grace: "2s",
		Options: []labconf.Directive{labconf.D("log").With(labconf.D("exclude", "admin.api"))},
		Coral:   labconf.Node{Listen: netip.AddrPortFrom(nd.Addr(), PortDHTCaddy), Bootstrap: boot, KeyFile: f.KeyFile, Levels: cfg.Levels},
		Sites: []labconf.Directive{
			labconf.D(fmt.Sprintf(":%d", PortHTTP)).With(labconf.D("bind", nd.Addr()), proxy),
		},
	}.String()
	if err := labconf.WriteFile(filepath.Join(nd.Dir, "Corefile"), corefile); err != nil {
		return err
	}
	return labconf.WriteFile(filepath.Join(nd.Dir, "Caddyfile"), caddyfile)
}

func (f *Fleet) startNode(nd *Node) error {
	if err := f.writeConfig(nd); err != nil {
		return err
	}
	nd.mu.Lock()
	defer nd.mu.Unlock()
	start := func(what string, argv []string, env []string) (*proc.Process, error) {
		return nd.Host.Start(argv, proc.Options{Name: nd.Name() + "/" + what, Dir: nd.Dir, Env: env,
			Log: filepath.Join(nd.Dir, what+".log"), Banner: "fleet"})
	}
	var err error
	nd.started = time.Now()
	if nd.coreDNS, err = start("coredns", []string{f.opts.CoreDNS, "-conf", filepath.Join(nd.Dir, "Corefile")}, nil); err != nil {
		return err
	}
	nd.caddy, err = start("caddy", labconf.CaddyArgv(f.opts.Caddy, filepath.Join(nd.Dir, "Caddyfile")), labconf.CaddyEnv(nd.Dir))
	return err
}

// Started is when the node's processes were started.
func (nd *Node) Started() time.Time {
	nd.mu.Lock()
	defer nd.mu.Unlock()
	return nd.started
}
