package coraldht

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
)

// Value is a value read from the DSHT.
type Value struct {
	Data []byte
	TTL  time.Duration // lifetime left at the node that returned it
}

func toValues(ws []wire.Value) []Value {
	if len(ws) == 0 {
		return nil
	}
	out := make([]Value, len(ws))
	for i, w := range ws {
		out[i] = Value{Data: w.Data, TTL: time.Duration(w.TTL) * time.Millisecond}
	}
	return out
}

// GetResult is the outcome of Get.
type GetResult struct {
	Values []Value
	Level  int     // level whose DSHT held the values; -1 when none did
	From   Contact // node that returned them (possibly this one)
	Hops   int     // remote nodes that answered, over all levels
	RPCs   int     // requests sent
}

// Placement is one node a put stored its value on.
type Placement struct {
	Level int
	Node  Contact
}

// PutResult is the outcome of Put.
type PutResult struct {
	// Stored lists the nodes holding the value, per level. It is empty when
	// the first node contacted was already full and loaded for the key: the
	// key is well represented there and the value was not needed.
	Stored []Placement
	// Saturated reports that the key is already well represented: the
	// forward phase stopped at a node that was full and loaded (which also
	// ends the descent to lower levels), or every node asked to store
	// refused because it was full of longer-lived values. Stored may then be
	// empty without an error.
	Saturated bool
	Hops      int
	RPCs      int
}

// PutGetResult is the outcome of PutGet: the put's result plus the first
// values found. Values is empty only if this call was the first to put a
// value under the key, as far as the network could tell.
type PutGetResult struct {
	PutResult
	Values []Value
	Level  int     // level where the values were found; -1 when none
	From   Contact // node that returned them
}

// opContext ties an operation to the node's lifetime.
func (n *Node) opContext(ctx context.Context) (context.Context, context.CancelFunc) {
	ctx, cancel := context.WithCancelCause(ctx)
	stop := context.AfterFunc(n.ctx, func() { cancel(ErrClosed) })
	return ctx, func() { stop(); cancel(nil) }
}

func (n *Node) opError(ctx context.Context, err error) error {
	if cause := context.Cause(ctx); errors.Is(cause, ErrClosed) {
		return ErrClosed
	}
	return err
}

// resolveLevels checks the requested levels and orders them highest (fastest
// cluster) first; none means every level.
func (n *Node) resolveLevels(levels []int) ([]int, error) {
	if len(levels) == 0 {
		out := make([]int, len(n.levels))
		for i := range out {
			out[i] = len(n.levels) - 1 - i
		}
		return out, nil
	}
	out := slices.Clone(levels)
	for _, l := range out {
		if l < 0 || l >= len(n.levels) {
			return nil, fmt.Errorf("%w: level %d; this node has levels 0..%d", ErrInvalid, l, len(n.levels)-1)
		}
	}
	slices.Sort(out)
	slices.Reverse(out)
	return slices.Compact(out), nil
}

// continuation gives where the next (lower) level's lookup starts: at the
// answered node nearest the key, with the answered nodes that also share our
// cluster at that level as extra candidates.
func (n *Node) continuation(r *lookupResult, next int) (ID, []Contact) {
	start := n.self.ID
	if r.nearest != nil {
		start = r.nearest.ID
	}
	var seeds []Contact
	for _, c := range r.answered {
		if !c.isSelf && n.sharesCluster(c.clusters, next) {
			seeds = append(seeds, c.Contact)
		}
	}
	return start, seeds
}

// Get returns values stored under key. It searches the given levels, or all
// of them, highest first, continuing each lower level from where the
// previous one stopped, and returns at the first node holding values. With
// no values anywhere it returns ErrNotFound; if no remote node answered at
// all, ErrNoResponse.
func (n *Node) Get(ctx context.Context, key ID, levels ...int) (GetResult, error) {
	return n.get(ctx, key, levels, false)
}

// GetAll is Get, but at the first level where it finds values it returns
// the union of the values of every node its walk reached, the Replicas
// nearest the key included, instead of the first node's. A get answers
// with the first values it finds, which is right for a proxy (any copy
// will do) but not where every value counts: two values put one after the
// other can sit on different nodes when a store timed out, and a get
// would name one of them. The ACME challenge records of a name and its
// wildcard, published at once, are such values (package acmetxt).
func (n *Node) GetAll(ctx context.Context, key ID, levels ...int) (GetResult, error) {
	return n.get(ctx, key, levels, true)
}

func (n *Node) get(ctx context.Context, key ID, levels []int, gather bool) (GetResult, error) {
	res := GetResult{Level: -1}
	lvls, err := n.resolveLevels(levels)
	if err != nil {
		return res, err
	}
	if n.closed.Load() {
		return res, ErrClosed
	}
	if n.selfRevoked() {
		return res, ErrRevoked
	}
	n.counters.gets.Add(1)
	ctx, cancel := n.opContext(ctx)
	defer cancel()
	start, seeds := n.self.ID, []Contact(nil)
	failures, timedOut := 0, false
	for i, l := range lvls {
		r := n.lookup(ctx, lookupParams{level: l, key: key, kind: lookupGet, start: start, seeds: seeds, closing: n.cfg.Replicas, gather: gather})
		res.Hops += r.hops
		res.RPCs += r.rpcs
		failures += r.failures
		timedOut = timedOut || r.timedOut
		if r.err != nil {
			n.counters.getFailures.Add(1)
			return res, n.opError(ctx, r.err)
		}
		if len(r.values) > 0 {
			res.Values, res.Level, res.From = toValues(r.values), l, publicContact(r.valuesFrom)
			n.counters.getHits.Add(1)
			return res, nil
		}
		if i+1 < len(lvls) {
			start, seeds = n.continuation(r, lvls[i+1])
		}
	}
	switch {
	case res.Hops == 0 && failures > 0:
		n.counters.getFailures.Add(1)
		return res, ErrNoResponse
	case timedOut:
		n.counters.getFailures.Add(1)
		return res, fmt.Errorf("%w: lookup exceeded LookupTimeout (%v) without finding values", ErrTimeout, n.cfg.LookupTimeout)
	}
	return res, ErrNotFound
}

func (n *Node) checkPut(value []byte, ttl time.Duration) error {
	switch {
	case len(value) == 0:
		return fmt.Errorf("%w: empty value", ErrInvalid)
	case len(value) > n.cfg.MaxValueSize:
		return fmt.Errorf("%w: value of %d bytes exceeds MaxValueSize %d", ErrInvalid, len(value), n.cfg.MaxValueSize)
	case ttl < time.Millisecond || ttl > n.cfg.MaxTTL:
		return fmt.Errorf("%w: TTL %v outside 1ms..%v", ErrInvalid, ttl, n.cfg.MaxTTL)
	}
	return nil
}

// Put stores value under key for ttl with Coral's two-phase sloppy
// insertion on the given levels (default all), highest first. See PutGet.
func (n *Node) Put(ctx context.Context, key ID, value []byte, ttl time.Duration, levels ...int) (PutResult, error) {
	r, err := n.putGet(ctx, key, value, ttl, levels, false)
	n.countPutFailure(err)
	return r.PutResult, err
}

// Bootstrap joins the network through the nodes at addrs: it pings them,
// looks up its own ID to meet its neighbours, then refreshes every bucket
// farther away than its nearest neighbour. It fails with ErrNoResponse if
// none of addrs answers, even when other nodes have found this one
// meanwhile: those may be joining too, through this node, and the two
// would take each other for the network and stay an island beside it.
// Without addrs (other than its own) the node is the first of its
// network and succeeds once another node has found it.
func (n *Node) Bootstrap(ctx context.Context, addrs ...netip.AddrPort) error {
	if n.closed.Load() {
		return ErrClosed
	}
	ctx, cancel := n.opContext(ctx)
	defer cancel()
	n.mu.Lock()
	n.bootstraps = append(n.bootstraps[:0], addrs...)
	n.mu.Unlock()
	var wg sync.WaitGroup
	var mu sync.Mutex
	answered, asked := 0, 0
	var lastErr error
	for _, a := range addrs {
		a = netip.AddrPortFrom(a.Addr().Unmap(), a.Port())
		if a == n.self.Addr {
			continue
		}
		asked++
		wg.Add(1)
		go func() {
			defer wg.Done()
			_, err := n.Ping(ctx, a)
			mu.Lock()
			if err == nil {
				answered++
			} else {
				lastErr = err
			}
			mu.Unlock()
		}()
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return n.opError(ctx, err)
	}
	if answered == 0 && (asked > 0 || n.levels[0].rt.len() == 0) {
		if lastErr != nil {
			return fmt.Errorf("%w: bootstrap: %v", ErrNoResponse, lastErr)
		}
		return fmt.Errorf("%w: bootstrap: no other node to contact", ErrNoResponse)
	}
	r := n.findNode(ctx, 0, n.self.ID)
	if r.err != nil {
		return n.opError(ctx, r.err)
	}
	// Refresh the buckets beyond the nearest neighbour so the table holds
	// contacts at every distance, as a Kademlia join does.
	nearest := IDBits
	if cs := n.levels[0].rt.closest(n.self.ID, 1, ID{}); len(cs) > 0 {
		nearest = CommonPrefixLen(n.self.ID, cs[0].ID)
	}
	for i := 0; i < nearest && i < IDBits; i++ {
		n.mu.Lock()
		target := randomIDWithPrefix(n.self.ID, i, n.rng)
		n.mu.Unlock()
		if r := n.findNode(ctx, 0, target); r.err != nil {
			return n.opError(ctx, r.err)
		}
	}
	n.updateSizes()
	// Clustering starts now: hints first, then a first round.
	n.joinOnce.Do(func() { close(n.joined) })
	return nil
}
