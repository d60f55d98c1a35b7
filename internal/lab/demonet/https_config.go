package demonet

import (
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
)

// The HTTPS configuration of the demo: the CA's Caddyfile and the nodes'
// HTTPS options and sites (https.go runs them).

// PortHTTPS is the HTTPS port of the nodes (one-label names, and the
// apex's status page) and of the CA.
const PortHTTPS = 443

// CA is the demo's ACME CA: .253.
func (l Layout) CA() netip.Addr { return l.host(253) }

// caCaddyfile is the CA's configuration: the acme_server handler on the
// CA's address, validating dns-01 only, through the demo's resolver, for
// the alias zone and its wildcard only.
func caCaddyfile(ca, resolver netip.Addr, lifetime time.Duration) string {
	server := labconf.D("acme_server").With(
		labconf.D("lifetime", lifetime.String()),
		labconf.D("resolvers", netip.AddrPortFrom(resolver, 53)),
		labconf.D("challenges", "dns-01"),
		labconf.D("allow_wildcard_names"),
		labconf.D("allow").With(labconf.D("domains", AliasZone, "*."+AliasZone)),
	)
	return labconf.Caddy{
		Comment:   "written by internal/lab/demonet: the demo's ACME CA",
		SkipTrust: true,
		Grace:     "1s",
		Options: []labconf.Directive{
			labconf.D("auto_https", "disable_redirects"),
			labconf.D("pki").With(labconf.D("ca", "local").With(labconf.D("name", `"Coral demo CA"`))),
		},
		Sites: []labconf.Directive{labconf.D("https://"+ca.String()).With(
			labconf.D("bind", ca),
			labconf.D("tls", "internal"),
			server,
		)},
	}.String()
}

// httpsSpec is what a node's Caddyfile needs for HTTPS.
type httpsSpec struct {
	directory, root, storage string
	resolver                 netip.Addr
	renewInterval            time.Duration // renew_interval, if set
	renewalRatio             float64       // renewal_window_ratio, if set
}

// globalOptions are the node's global options for HTTPS: the demo CA as
// the ACME CA (trusted by its root), the shared certificate storage, and
// Caddy's own HTTP→HTTPS redirects off (coral_proxy redirects one-label
// names itself; dotted names stay on http).
func (h httpsSpec) globalOptions() []labconf.Directive {
	return []labconf.Directive{
		labconf.D("auto_https", "disable_redirects"),
		labconf.D("acme_ca", h.directory),
		labconf.D("acme_ca_root", h.root),
		labconf.D("storage", "file_system", h.storage),
		labconf.If(h.renewInterval > 0, labconf.D("renew_interval", h.renewInterval.String())),
		labconf.If(h.renewalRatio > 0, labconf.D("renewal_window_ratio", strconv.FormatFloat(h.renewalRatio, 'f', -1, 64))),
	}
}

// tls is the sites' tls directive: DNS-01 through the coral provider, with
// the demo's resolver for finding the zone and checking propagation.
func (h httpsSpec) tls() labconf.Directive {
	return labconf.D("tls").With(
		labconf.D("dns", "coral"),
		labconf.D("resolvers", netip.AddrPortFrom(h.resolver, 53)),
	)
}

// sites are the node's HTTPS sites: the proxy for one-label names under
// the wildcard, and the node's status page at the apex.
func (h httpsSpec) sites(addr netip.Addr, proxy labconf.Directive) []labconf.Directive {
	return []labconf.Directive{
		labconf.D(fmt.Sprintf("https://*.%s:%d", AliasZone, PortHTTPS)).With(
			labconf.D("bind", addr), h.tls(), labconf.D("log"), proxy,
		).Commented("One-label Coralized names over HTTPS, with the wildcard certificate."),
		labconf.D(fmt.Sprintf("https://%s:%d", AliasZone, PortHTTPS)).With(
			labconf.D("bind", addr), h.tls(), labconf.D("coral_status"),
		).Commented("The zone's apex: this node's status page."),
	}
}
