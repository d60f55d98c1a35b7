//go:build linux

package coralnet

import (
	"fmt"
	"net/netip"
	"path/filepath"

	"github.com/coralcdn/coral/internal/lab/labconf"
)

// ClusterAll is the level-1 cluster of every node; level 2 is its region.
const ClusterAll = "lab"

// dshtNode is the node's DSHT settings for one of its servers (port),
// joining through the first two nodes' CoreDNS; and the key line: none
// when the node has one key (written as key_file, which every build
// reads), else `key PRIMARY ACCEPTED...` (the keyring).
func (n *Net) dshtNode(nd *Node, port uint16) (labconf.Node, labconf.Directive) {
	var boot []netip.AddrPort
	for j := range min(2, len(n.Nodes)) {
		b := netip.AddrPortFrom(n.Nodes[j].Addr(), PortDHTCoreDNS)
		if port == PortDHTCoreDNS && b.Addr() == nd.Addr() {
			continue
		}
		boot = append(boot, b)
	}
	if port == PortDHTCoreDNS && nd.Index == 0 {
		boot = nil // node 0's CoreDNS starts the network
	}
	node := labconf.Node{Listen: netip.AddrPortFrom(nd.Addr(), port), Bootstrap: boot,
		Clusters: map[int]string{1: ClusterAll, 2: nd.Region}}
	var key labconf.Directive
	switch len(nd.Keys) {
	case 0:
	case 1:
		if nd.KeyDirective {
			key = labconf.D("key", nd.Keys)
			break
		}
		node.KeyFile = nd.Keys[0]
	default:
		key = labconf.D("key", nd.Keys)
	}
	return node, key
}

func (nd *Node) drainFile() string { return filepath.Join(nd.Dir, "drain") }

func (n *Net) writeConfig(nd *Node) error {
	header := fmt.Sprintf("written by internal/lab/netns/coralnet: %s (%s), region %s", nd.Host.Name, nd.Addr(), nd.Region)
	node, key := n.dshtNode(nd, PortDHTCoreDNS)
	coral := labconf.CoralPlugin{
		Zone: CoralZone, Alias: AliasZone, Node: node, Probe: "none",
		AnswerTTL: AnswerTTL, LiveWithin: LiveWithin, CheckEvery: CheckInterval,
		// The operations guide's drain: while this file exists the name
		// server is out of the answers (Net.Drain).
		Extra: append([]labconf.Directive{key, labconf.D("drain_file", nd.drainFile())}, nd.NodeOptions...),
	}
	for _, r := range n.Resolvers {
		level := 1
		if r.Region == nd.Region {
			level = 2
		}
		coral.Classify = append(coral.Classify, fmt.Sprintf("%s/32 %d", r.Host.Addr, level))
	}
	corefile := labconf.Corefile(header, labconf.D(CoralZone, AliasZone).With(
		labconf.D("bind", nd.Addr()),
		coral.Directive(),
		labconf.D("errors"),
		labconf.D("ready", netip.AddrPortFrom(nd.Addr(), PortReady)),
		labconf.D("prometheus", netip.AddrPortFrom(nd.Addr(), PortMetrics)),
	))
	cnode, ckey := n.dshtNode(nd, PortDHTCaddy)
	admin := netip.AddrPortFrom(nd.Addr(), PortAdmin)
	proxy := labconf.Proxy{
		Zone: AliasZone, CacheDir: filepath.Join(nd.Dir, "cache"), CacheSize: "512MiB",
		AllowOrigins: []string{OriginAddr().String() + "/32"},
		AllowPeers:   []string{"198.18.0.0/15"},
		PeerAddress:  netip.AddrPortFrom(nd.Addr(), PortHTTP).String(),
		// The clients come from a few client hosts' addresses.
		RateLimit: "off",
		Extra:     []labconf.Directive{labconf.D("origin_timeout", "10s")},
	}.Directive()
	coralApp := labconf.D("coral").With(append(append(cnode.Directives(), ckey), nd.NodeOptions...)...)
	caddyfile := labconf.Caddy{
		Comment: header, Admin: admin, AdminOrigins: []string{admin.String()},
		HTTPSOff: true, Grace: "2s",
		Options: append([]labconf.Directive{labconf.D("log").With(labconf.D("exclude", "admin.api")), coralApp}, n.debugLog(nd)...),
		Sites: []labconf.Directive{
			labconf.D(fmt.Sprintf("http://:%d", PortHTTP)).With(labconf.D("bind", nd.Addr()), proxy),
		},
	}.String()
	if err := labconf.WriteFile(filepath.Join(nd.Dir, "Corefile"), corefile); err != nil {
		return err
	}
	return labconf.WriteFile(filepath.Join(nd.Dir, "Caddyfile"), caddyfile)
}

// debugLog is the Caddy logger of coral_proxy's debug lines, with
// Options.DebugProxy.
func (n *Net) debugLog(nd *Node) []labconf.Directive {
	if !n.opts.DebugProxy {
		return nil
	}
	return []labconf.Directive{labconf.D("log", "coraldebug").With(
		labconf.D("level", "DEBUG"),
		labconf.D("include", "http.handlers.coral_proxy"),
		labconf.D("output", "file", filepath.Join(nd.Dir, "coral-debug.log")))}
}
