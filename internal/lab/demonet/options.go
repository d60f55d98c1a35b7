//go:build linux

package demonet

import (
	"errors"
	"fmt"
	"net/netip"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/resolvers"
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
	Resolvers []resolvers.Kind
	// CoreDNS and Caddy are the binaries (default: bin/coredns and
	// bin/caddy of the repository around the working directory).
	CoreDNS, Caddy string
	// CertLifetime is the lifetime of the certificates the demo's ACME CA
	// issues (default 12h; at least 5m, the CA's minimum).
	CertLifetime time.Duration
	// RenewInterval and RenewalRatio are the nodes' renew_interval (how
	// often Caddy checks its certificates; default Caddy's 10m) and
	// renewal_window_ratio (the part of a certificate's lifetime left
	// when it is renewed; default Caddy's 1/3), for tests of renewal.
	RenewInterval time.Duration
	RenewalRatio  float64
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

// Binaries returns the default bin/coredns and bin/caddy, and an error
// naming what is missing.
func Binaries() (coredns, caddy string, err error) {
	coredns, err1 := labconf.Binary("coredns")
	caddy, err2 := labconf.Binary("caddy")
	var missing []string
	for _, err := range []error{err1, err2} {
		if err != nil && !slices.Contains(missing, err.Error()) {
			missing = append(missing, err.Error())
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
		kinds = []resolvers.Kind{resolvers.Unbound}
	}
	if os.Geteuid() == 0 {
		for _, k := range kinds {
			if err := resolvers.Available(k); err != nil {
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
		o.Resolvers = []resolvers.Kind{resolvers.Unbound}
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
	if o.CertLifetime == 0 {
		o.CertLifetime = 12 * time.Hour
	}
	if o.CertLifetime < 5*time.Minute {
		return fmt.Errorf("demonet: certificate lifetime %v: the CA issues for at least 5m", o.CertLifetime)
	}
	if o.RenewalRatio < 0 || o.RenewalRatio >= 1 {
		return fmt.Errorf("demonet: renewal ratio %v: want 0 (Caddy's default) to below 1", o.RenewalRatio)
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
