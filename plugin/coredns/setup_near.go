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
			case proximityOn, proximitySubnet, proximityOff:
				cfg.prox.mode = args[0]
			default:
				err = c.Errf("proximity %q: want on, subnet or off", args[0])
			}
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

// The values of the proximity property.
const (
	proximityOn     = "on"     // traces and locality hints, then the client's /24
	proximitySubnet = "subnet" // the client's /24 only: no probes toward clients
	proximityOff    = "off"    // no preference: the paper's nodes() without a target
)

// startProximity builds the proximity mapper for node, or nil when the
// configuration does not trace. trace is the experiment's tracer (nil:
// this host's, through icmpprobe); echo, when there is an ICMP prober,
// learns a new target's distance first so that the trace probes only the
// hops that matter. Without permission to trace, the mapper is there but
// every choice falls back (coredns_coral_proximity_total says so).
func startProximity(ctx context.Context, pc proximityConfig, node interface {
	HintedNodes(context.Context, netip.Prefix) ([]netip.AddrPort, error)
}, gate *probeGate, trace hopTracer, echo func(context.Context, netip.Addr) (icmpprobe.EchoReply, error), echoWait time.Duration) *proximity {
	if pc.mode != proximityOn {
		return nil
	}
	if trace == nil {
		trace = hostTracer(pc.hops, pc.timeout/2, echo, echoWait)
		if err := icmpprobe.CanTrace(false); err != nil {
			log.Infof("proximity: cannot trace toward clients (%v); answers use the choice without a target", err)
			trace = nil
		}
	}
	p := newProximity(ctx, trace, nodeHints(node), pc, gate)
	p.mapped = func(outcome string, d time.Duration, sent int) {
		proximityMappings.WithLabelValues(outcome).Observe(d.Seconds())
		if sent > 0 {
			traceProbes.Observe(float64(sent))
		}
	}
	return p
}

// hostTracer traces through icmpprobe: a target whose distance is not
// known yet gets one echo request first (waiting at most echoWait), whose
// reply's TTL gives the distance, so that the trace sends hops+5 echo
// requests around it rather than 32; a target that does not answer echo
// gets the burst of 32.
func hostTracer(hops int, timeout time.Duration, echo func(context.Context, netip.Addr) (icmpprobe.EchoReply, error), echoWait time.Duration) hopTracer {
	return func(ctx context.Context, target netip.Addr, distance int) (traced, error) {
		sent := 0
		if distance <= 0 && echo != nil && !target.IsLoopback() {
			ectx, cancel := context.WithTimeout(ctx, echoWait)
			r, err := echo(ectx, target)
			cancel()
			sent = 1
			if err == nil {
				distance = r.Distance
			}
		}
		h, err := icmpprobe.TraceToward(ctx, target, hops, distance, timeout)
		return traced{routers: h.Routers, distance: h.Distance, sent: sent + h.Sent}, err
	}
}

// experimentTracer adapts Options.Trace.
func experimentTracer(trace func(context.Context, netip.Addr, int) ([]netip.Addr, error), hops int) hopTracer {
	if trace == nil {
		return nil
	}
	return func(ctx context.Context, target netip.Addr, _ int) (traced, error) {
		rs, err := trace(ctx, target, hops)
		return traced{routers: rs}, err
	}
}
