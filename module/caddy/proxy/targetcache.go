package proxy

import (
	"hash/maphash"
	"math/bits"
	"net/netip"
	"strings"
	"sync/atomic"
)

// A hit repeats the same parse for every request of a hot URL: the
// Coralized host name taken apart and checked label by label, the URL
// normalized and hashed (SHA-1) into its key, the origin's address parsed.
// That was about a third of what coral_proxy spent on a 1 KiB hit. The
// result depends on the host, the zone, the path and the query alone, so a
// small cache of recent results keyed by exactly those strings gives a
// hot URL its target and key without any of that work.
//
// It is bounded by construction: a fixed number of slots, one entry each,
// and no entry for inputs longer than targetCacheMaxInput, so whatever
// requests arrive it holds at most targetCacheSlots entries of a bounded
// size (about 4 MiB at worst, a few hundred KiB for ordinary URLs). A new
// entry replaces whatever its slot held; a request whose entry was
// replaced parses again, which is what every request did before. Only
// successful parses are kept: a refusal is not a hit's path. Entries are
// immutable and published with an atomic pointer, so readers take no lock.
const (
	targetCacheSlots    = 2048 // a power of two
	targetCacheMaxInput = 1024 // bytes of host, path and query together
)

// parsedTarget is what admission derives from a request's host, path and
// query, computed once per cached entry.
type parsedTarget struct {
	host, zone, path, query string // the inputs, compared on lookup

	target target
	key    string // target.Key()
	// originAddr is the origin's address when the request names it by
	// address (checked against the origin guard on every request: the
	// guard's view of this host's own addresses can change).
	originAddr   netip.Addr
	namesAddress bool
	// acmeChallenge says the origin path is the ACME challenge path.
	acmeChallenge bool
}

type targetCache struct {
	seed  maphash.Seed
	slots [targetCacheSlots]atomic.Pointer[parsedTarget]
}

func newTargetCache() *targetCache {
	return &targetCache{seed: maphash.MakeSeed()}
}

// parse returns the parsed target for a request to host (the Host field)
// under zone with the escaped path and raw query, from the cache when it
// has them. A nil cache parses every time. Errors are parseTarget's.
func (c *targetCache) parse(host, zone, path, query string) (*parsedTarget, error) {
	if c == nil {
		return newParsedTarget(host, zone, path, query)
	}
	slot := &c.slots[c.index(host, path, query)]
	if pt := slot.Load(); pt != nil && pt.host == host && pt.path == path && pt.query == query && pt.zone == zone {
		return pt, nil
	}
	if len(host)+len(path)+len(query) > targetCacheMaxInput {
		return newParsedTarget(host, zone, path, query)
	}
	// Copies: the request's strings may be pieces of larger buffers that
	// an entry must not keep alive.
	pt, err := newParsedTarget(strings.Clone(host), zone, strings.Clone(path), strings.Clone(query))
	if err != nil {
		return nil, err
	}
	slot.Store(pt)
	return pt, nil
}

func (c *targetCache) index(host, path, query string) int {
	h := maphash.String(c.seed, host) ^
		bits.RotateLeft64(maphash.String(c.seed, path), 21) ^
		bits.RotateLeft64(maphash.String(c.seed, query), 42)
	return int(h & (targetCacheSlots - 1))
}

func newParsedTarget(host, zone, path, query string) (*parsedTarget, error) {
	t, err := parseTarget(host, zone, path, query)
	if err != nil {
		return nil, err
	}
	pt := &parsedTarget{host: host, zone: zone, path: path, query: query, target: t, key: t.Key()}
	pt.originAddr, pt.namesAddress = ipLiteral(t.Host)
	pt.acmeChallenge = mayNameACMEChallenge(t.Path) && isACMEChallenge(t.OriginURL().Path)
	return pt, nil
}
