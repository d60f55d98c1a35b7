package coral

import (
	"context"
	"net/netip"
	"time"

	"github.com/coredns/caddy"

	"github.com/coralcdn/coral/coraldht/icmpprobe"
)

// parseNearProperty reads the proximity and ecs properties, reporting
// whether prop is one.
func (cfg *config) parseNearProperty(c *caddy.Controller, prop string, args []string) (bool, error) {
	var err error
	one := func() bool {
		if err = needArgs(c, prop, args, 1); err != nil {
			return false
		}
		return true
	}
	switch prop {
	case "proximity":
		if one() {
			switch args[0] {
			case "on":
				cfg.prox.off = false
			case "off":
				cfg.prox.off = true
			default:
				err = c.Errf("proximity %q: want on or off", args[0])
			}
		}
	case "proximity_wait":
		if one() {
			cfg.prox.wait, err = parseDuration(c, prop, args[0])
		}
	case "proximity_timeout":
		if one() {
			cfg.prox.timeout, err = parseDuration(c, prop, args[0])
		}
	case "proximity_cache":
		if one() {
			cfg.prox.cache, err = parseDuration(c, prop, args[0])
		}
	case "proximity_hops":
		if one() {
			cfg.prox.hops, err = parseCount(c, prop, args[0], 16)
		}
	case "proximity_limit":
		if one() {
			cfg.prox.limit, err = parseCount(c, prop, args[0], maxProbeLimit)
		}
	case "ecs":
		if len(args) == 0 {
			return true, c.Errf("ecs takes the prefixes of the resolvers whose client subnets to trust")
		}
		for _, a := range args {
			p, perr := netip.ParsePrefix(a)
			if perr != nil {
				if ad, aerr := netip.ParseAddr(a); aerr == nil && ad.Zone() == "" {
					p, perr = ad.Prefix(ad.BitLen())
				}
			}
			if perr != nil {
				return true, c.Errf("ecs %q: not a prefix or address", a)
			}
			if p.Addr().Is4In6() {
				// Resolvers' addresses are compared unmapped.
				p = netip.PrefixFrom(p.Addr().Unmap(), max(p.Bits()-96, 0))
			}
			cfg.ecs = append(cfg.ecs, p.Masked())
		}
	default:
		return false, nil
	}
	return true, err
}

// startProximity builds the proximity mapper for node, or nil when the
// configuration turns it off. Without permission to trace, it is there but
// every choice falls back (coredns_coral_proximity_total says so).
func startProximity(ctx context.Context, pc proximityConfig, node interface {
	HintedNodes(context.Context, netip.Prefix) ([]netip.AddrPort, error)
}) *proximity {
	if pc.off {
		return nil
	}
	p := newProximity(ctx, nodeTracer(pc.hops, pc.timeout/2), nodeHints(node), pc)
	if err := icmpprobe.CanTrace(false); err != nil {
		log.Infof("proximity: cannot trace toward clients (%v); answers use the choice without a target", err)
		p.trace = nil
	}
	p.mapped = func(outcome string, d time.Duration) {
		proximityMappings.WithLabelValues(outcome).Observe(d.Seconds())
	}
	return p
}
