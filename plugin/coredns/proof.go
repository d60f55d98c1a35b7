package coral

import (
	"net/netip"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

// Probes only toward addresses that have shown they are there. A UDP
// query's source address is whatever the sender wrote: were every query
// from a new /24 to make this server probe (the RTT probe, a SYN and an
// echo request; the proximity trace, a burst of echo requests) its source,
// one forged datagram would aim those probes at anyone, and a flood of
// forged /24s would fill the probe and mapping budgets so that real
// clients got none. So a query may start a probe only when its source has
// proven itself:
//
//   - strongly: the query came over TCP (a completed handshake), or carries
//     a valid server cookie (RFC 7873/9018: one this server gave that
//     address);
//   - weakly: the address is familiar, answered before in familiarAfter
//     different seconds, or proven strongly before within familiarFor.
//
// A weak proof is forgeable with patience, so weak queries use at most
// half of probe_limit and of proximity_limit: the other half is kept for
// strongly proven queries, which no forged flood can take. ECS moves the
// probes to the client subnet the resolver names, an address that has
// proven nothing: probes toward it need a strong proof of the resolver.
// Every start, proven or not, also spends from two rate limits: one per
// source prefix (the querying resolver's /24, IPv6 /48) and one per
// destination prefix (the probed /24 or /48).
//
// A query that needs a probe it may not start gets an empty truncated
// response (TC) over UDP: a real resolver asks again over TCP, which
// proves its address, and gets the answer made for it; a forged source
// gets a response no larger than the query and no probe.

// proof is what a query showed of its source address.
type proof uint8

const (
	proofNone     proof = iota
	proofFamiliar       // answered before (familiarity)
	proofStrong         // TCP, or a valid server cookie
)

func (p proof) String() string {
	return [...]string{"none", "familiar", "strong"}[p]
}

// asker is a query's source as the probe gate sees it.
type asker struct {
	addr  netip.Addr // the querying resolver
	proof proof
}

// gateVerdict is what the probe gate says to a start.
type gateVerdict uint8

const (
	gateAllowed  gateVerdict = iota
	gateUnproven             // the source has not shown it is there (probes need a proof)
	gateBusy                 // the budget's share for this proof is in flight
	gateLimited              // the source's or the destination's rate is spent
)

// source is the verdict as a classification or proximity source label.
func (v gateVerdict) source() string {
	switch v {
	case gateUnproven:
		return "unproven"
	case gateLimited:
		return "limited"
	}
	return "skipped"
}

// Familiarity and the rate limits; see the comment at the top.
const (
	familiarAfter = 3               // answers, in different seconds
	familiarFor   = time.Hour       // a strong proof counts as familiarity this long
	familiarTable = 1 << 16         // addresses remembered
	gateTable     = 1 << 16         // rate accounts (source and destination prefixes)
	gateWindow    = time.Second     // a rate account sinks no lower than this much credit
	sourceBurst   = 2 * time.Second // a source prefix may start this many seconds' worth at once
)

// Defaults of probe_rate: starts per minute per source prefix and per
// destination prefix. A source prefix is a resolver (with ECS, the many
// clients it names), a destination prefix one /24 or /48, which the caches
// probe once per probe_cache and proximity_cache anyway (failures once a
// minute): the destination rate bounds what anyone, forging or not, can aim
// at one network.
const (
	defaultSourceRate      = 600
	defaultDestinationRate = 6
	destinationBurst       = 4 // a new prefix takes two starts (RTT probe, mapping); retries
	maxProbeRate           = 1_000_000
)

// probeGate decides which queries may start probes, and remembers who has
// been answered. It is shared by the RTT probes (classify.go) and the
// mappings (proximity.go); one per configuration.
type probeGate struct {
	familiar *bucketTable[familiarity]
	rates    *bucketTable[tokens]
	source   float64 // starts per second per source prefix
	dest     float64 // starts per second per destination prefix
	now      func() time.Time
	start    time.Time
}

// familiarity is one address's record of answers.
type familiarity struct {
	seconds  uint8 // different seconds it was answered in, up to familiarAfter
	lastSec  int64 // the last of them, seconds since start
	provenAt int64 // last strong proof, nanoseconds since start; 0: none
}

// tokens is a rate account: credit grows by the rate every second up to
// the burst, and each start spends one.
type tokens struct {
	credit float64
	last   int64
}

// Categories of the rate accounts.
const (
	rateSource uint8 = iota
	rateDestination
)

func newProbeGate(sourcePerMinute, destPerMinute int, now func() time.Time) *probeGate {
	return &probeGate{familiar: newBucketTable[familiarity](familiarTable), rates: newBucketTable[tokens](gateTable),
		source: float64(sourcePerMinute) / 60, dest: float64(destPerMinute) / 60, now: now, start: now()}
}

// clock is the gate's time: nanoseconds since it was made, at least 1.
func (g *probeGate) clock() int64 { return int64(g.now().Sub(g.start)) + 1 }

// answered records that a query from a, of proof p, was answered.
func (g *probeGate) answered(a netip.Addr, p proof) {
	now := g.clock()
	sec := now / int64(time.Second)
	g.familiar.update(makeBucketID(a.Unmap(), 0), now, func(f *familiarity, fresh bool) bool {
		if p == proofStrong {
			f.provenAt = now
		}
		if fresh || sec != f.lastSec {
			f.seconds = min(f.seconds+1, familiarAfter)
			f.lastSec = sec
		}
		return true
	})
}

// proofOf is what a query from a showed: strong (TCP or a valid server
// cookie, strongly), familiar, or none.
func (g *probeGate) proofOf(a netip.Addr, strongly bool) proof {
	if strongly {
		return proofStrong
	}
	// A look that adds nothing: a flood of new sources must not push the
	// familiar ones out of the table by being looked up.
	now := g.clock()
	familiar := false
	g.familiar.peek(makeBucketID(a.Unmap(), 0), func(f *familiarity) {
		familiar = f.seconds >= familiarAfter || f.provenAt > 0 && now-f.provenAt < int64(familiarFor)
	})
	if familiar {
		return proofFamiliar
	}
	return proofNone
}

// admit says whether who may start a probe toward target while inflight
// of limit are running, spending from the rate accounts when it may.
func (g *probeGate) admit(who asker, target netip.Addr, inflight, limit int) gateVerdict {
	switch {
	case who.proof == proofNone:
		return gateUnproven
	case who.proof != proofStrong && coraldht.SitePrefix(target) != coraldht.SitePrefix(who.addr):
		// ECS: the client subnet has proven nothing; the resolver must
		// prove itself on this very query.
		return gateUnproven
	case inflight >= limit, who.proof != proofStrong && inflight >= limit-limit/2:
		return gateBusy
	}
	now := g.clock()
	if !g.spend(who.addr, rateSource, g.source, max(2, g.source*sourceBurst.Seconds()), now) ||
		!g.spend(target, rateDestination, g.dest, destinationBurst, now) {
		return gateLimited
	}
	return gateAllowed
}

// spend takes one start from the account of a's prefix in category cat.
func (g *probeGate) spend(a netip.Addr, cat uint8, rate, burst float64, now int64) bool {
	return g.rates.update(makeBucketID(coraldht.SitePrefix(a.Unmap()).Addr(), cat), now, func(t *tokens, fresh bool) bool {
		if fresh {
			*t = tokens{credit: burst, last: now}
		}
		if elapsed := now - t.last; elapsed > 0 {
			t.credit = min(burst, t.credit+rate*float64(elapsed)/float64(time.Second))
			t.last = now
		}
		if t.credit < 1 {
			return false
		}
		t.credit--
		return true
	})
}
