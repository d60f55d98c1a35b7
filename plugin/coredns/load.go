package coral

import (
	"strconv"
	"strings"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coredns/caddy"
)

// Load-aware answers. Each proxy publishes its load with its liveness
// (coraldht.Load, on every datagram its node sends; module/caddy says what
// the parts are), and the sweep that keeps proxies live (live.go) hears it
// with every ping. An answer weighs it with proximity:
//
//  1. the proxies of the resolver's level cluster whose load is below
//     load_threshold, nearest first as always (hints, the resolver's
//     prefix, rotation);
//  2. if every proxy there is loaded, the same from the next level down:
//     the site's cluster, then its region, then everyone;
//  3. if every proxy everywhere is loaded, the answer of before, from the
//     resolver's own level: loaded proxies are better than none.
//
// A proxy that stops publishing (a release before loads) counts as having
// room. Since the load is at most check_interval + live_within/3 old (10 s
// by default) when an answer is built, a proxy that saturates gets no new
// clients within that time, well within the 30 s answer TTL.

// defaultLoadThreshold: a proxy at 80 % of what it may carry gets no new
// clients. The load this server sees is up to 10 s old, and the clients it
// has already been given keep it for a whole answer TTL (30–60 s); the
// last fifth of its bandwidth budget, its request capacity or its disk is
// what they use meanwhile.
const defaultLoadThreshold = 80

// loaded reports whether ni's published load is at least threshold.
func loaded(ni *coraldht.NodeInfo, threshold int) bool {
	return ni.Load.Known && ni.Load.Percent() >= threshold
}

// pickUnloaded is step 1 and 2 above: proxies with room from level lvl,
// else from the nearest level below that has some. ok is false when no
// level has any (or load is ignored).
func (c *Coral) pickUnloaded(pl place, lvl int, o pickOptions, buf []*coraldht.NodeInfo) (int, []*coraldht.NodeInfo, bool) {
	if c.set.loadThreshold == 0 {
		return 0, nil, false
	}
	o.maxLoad = c.set.loadThreshold
	for l := lvl; l >= 0; l-- {
		o.level = l
		if nodes := c.tracker.pick(o, buf); len(nodes) > 0 {
			if l < lvl {
				loadAnswers.WithLabelValues(pl.labels(loadMoved)...).Inc()
			}
			return l, nodes, true
		}
	}
	return 0, nil, false
}

// The outcomes of loadAnswers.
const (
	loadMoved     = "moved"      // from a level below the resolver's: its level's proxies were loaded
	loadAllLoaded = "all_loaded" // every live proxy was loaded: answered with loaded ones
)

// parseLoadThreshold reads "load_threshold PERCENT|off": 1–255 (a load
// can read up to 255 %), or off to ignore load.
func parseLoadThreshold(c *caddy.Controller, args []string) (int, error) {
	if len(args) != 1 {
		return 0, c.Errf("load_threshold takes one argument: a percent (1-255) or off")
	}
	if args[0] == "off" {
		return 0, nil
	}
	n, err := strconv.Atoi(strings.TrimSuffix(args[0], "%"))
	if err != nil || n < 1 || n > 255 {
		return 0, c.Errf("load_threshold %q: want a percent 1-255, or off", args[0])
	}
	return n, nil
}
