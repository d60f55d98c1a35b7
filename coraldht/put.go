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

// PutGet stores value under key like Put and also returns the first values
// other nodes stored under key, found in either direction. It is the test-and-
// set that lets a flash crowd of proxies agree on who fetches from the
// origin: when many nodes PutGet a fresh key at once, the stores serialize
// at the nodes nearest the key and exactly one caller sees no values.
//
// Over several levels it runs one level at a time, the fastest (highest)
// first: the forward phase at that level, then, if it found no values, the
// stores there; the first values found, in either phase, decide the answer,
// and the slower levels are not visited. Each level continues the walk
// where the previous one stopped. So racing callers serialize first in
// their own fastest cluster, and only one of each cluster goes on to the
// next level: a caller is pointed at a copy its own cluster is already
// fetching when there is one. See coraldht/README.md for why this cannot
// make two callers wait on each other.
func (n *Node) PutGet(ctx context.Context, key ID, value []byte, ttl time.Duration, levels ...int) (PutGetResult, error) {
	r, err := n.putGet(ctx, key, value, ttl, levels, true)
	n.countPutFailure(err)
	return r, err
}

// countPutFailure counts a put or put+get that failed, other than for
// invalid arguments.
func (n *Node) countPutFailure(err error) {
	if err != nil && !errors.Is(err, ErrInvalid) {
		n.counters.putFailures.Add(1)
	}
}

type levelStack struct {
	level int
	stack []*candidate // nearest the key first
}

func (n *Node) putGet(ctx context.Context, key ID, value []byte, ttl time.Duration, levels []int, wantValues bool) (PutGetResult, error) {
	res := PutGetResult{Level: -1}
	if err := n.checkPut(value, ttl); err != nil {
		return res, err
	}
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
	if wantValues {
		n.counters.putGets.Add(1)
	} else {
		n.counters.puts.Add(1)
	}
	ctx, cancel := n.opContext(ctx)
	defer cancel()

	p := &putRun{n: n, ctx: ctx, key: key, value: value, ttl: ttl, wantValues: wantValues, res: res}
	var decided bool
	if wantValues && !n.cfg.PlainDHT {
		decided, err = p.levelByLevel(lvls)
	} else {
		if err := p.forward(lvls); err != nil {
			return p.res, err
		}
		if n.testHookAfterForward != nil {
			n.testHookAfterForward(p.stacks)
		}
		decided, err = p.reverse()
	}
	if err != nil {
		return p.res, err
	}
	if decided {
		p.storeRemaining()
	}
	return p.result()
}

// putRun is one put (or put+get) across its phases: the forward phases
// collect, per level, the nodes a store may go to (stacks); the stores go
// down each stack until one succeeds; the remaining replicas are then
// stored concurrently.
type putRun struct {
	n          *Node
	ctx        context.Context
	key        ID
	value      []byte
	ttl        time.Duration
	wantValues bool
	res        PutGetResult

	stacks      []levelStack
	quota, next []int // per stack: replicas still wanted, next entry to try
	// Counts behind the final error, if no store succeeded.
	failures, candidates, fullSkipped, refusedFull, otherFailures int
}

// forward runs the forward phases of a put, highest level first, down to
// the level where a node is full and loaded.
func (p *putRun) forward(lvls []int) error {
	start, seeds := p.n.self.ID, []Contact(nil)
	for i, l := range lvls {
		r, err := p.forwardLevel(l, start, seeds)
		if err != nil {
			return err
		}
		if r.saturated {
			p.res.Saturated = true
			break
		}
		if i+1 < len(lvls) {
			start, seeds = p.n.continuation(r, lvls[i+1])
		}
	}
	return nil
}

// forwardLevel runs the forward phase at one level and adds its stack.
func (p *putRun) forwardLevel(l int, start ID, seeds []Contact) (*lookupResult, error) {
	n, key, ttl := p.n, p.key, p.ttl
	r := n.lookup(p.ctx, lookupParams{level: l, key: key, kind: lookupPut, ttl: ttl, wantValues: p.wantValues, start: start, seeds: seeds, closing: n.cfg.Replicas})
	p.res.Hops += r.hops
	p.res.RPCs += r.rpcs
	p.failures += r.failures
	if r.err != nil {
		return nil, n.opError(p.ctx, r.err)
	}
	if p.wantValues && p.res.Values == nil && len(r.values) > 0 {
		p.res.Values, p.res.Level, p.res.From = toValues(r.values), l, publicContact(r.valuesFrom)
	}
	// The stack: contacted nodes that were not both full and loaded,
	// less those already full — the forward phase told us they cannot
	// accept, so a store would only be refused. (A node that fills up
	// after its probe still refuses, and the walk moves down.)
	ls := levelStack{level: l}
	for _, c := range r.answered {
		if n.cfg.PlainDHT || !c.status.full(n.cfg.FullValues, ttl) {
			ls.stack = append(ls.stack, c)
		} else {
			p.fullSkipped++
		}
	}
	slices.SortFunc(ls.stack, func(a, b *candidate) int { return CompareDistance(key, a.ID, b.ID) })
	if n.cfg.PlainDHT && len(ls.stack) > 1 {
		ls.stack = ls.stack[:1]
	}
	p.candidates += len(ls.stack)
	p.stacks = append(p.stacks, ls)
	p.quota = append(p.quota, n.cfg.Replicas)
	p.next = append(p.next, 0)
	return r, nil
}

// reverse runs the stores of a Put, lowest level first, until the first
// successful one.
func (p *putRun) reverse() (decided bool, err error) {
	for i := len(p.stacks) - 1; i >= 0; i-- {
		if decided, err := p.storeLevel(i); decided || err != nil {
			return decided, err
		}
	}
	return false, nil
}

// levelByLevel runs a put+get one level at a time, highest first, until
// one level shows values (see PutGet). It reports whether anything was
// decided: values found or a store made.
func (p *putRun) levelByLevel(lvls []int) (decided bool, err error) {
	start, seeds := p.n.self.ID, []Contact(nil)
	for i, l := range lvls {
		r, err := p.forwardLevel(l, start, seeds)
		if err != nil {
			return false, err
		}
		if p.n.testHookAfterForward != nil {
			p.n.testHookAfterForward(p.stacks)
		}
		if r.saturated {
			p.res.Saturated = true
		}
		// Decided here if the forward phase found values. This node's
		// value is still stored at this level, where its cluster's later
		// callers find it, but then at no slower level.
		found := p.res.Values != nil
		stored, err := p.storeLevel(len(p.stacks) - 1)
		if err != nil {
			return false, err
		}
		decided = decided || stored || found
		if p.res.Values != nil || r.saturated {
			return decided, nil
		}
		if i+1 < len(lvls) {
			start, seeds = p.n.continuation(r, lvls[i+1])
		}
	}
	return decided, nil
}

// storeLevel goes down stack i until one store succeeds.
func (p *putRun) storeLevel(i int) (stored bool, err error) {
	ls := p.stacks[i]
	for p.next[i] < len(ls.stack) {
		c := ls.stack[p.next[i]]
		p.next[i]++
		out := p.n.storeAt(p.ctx, ls.level, p.key, p.value, p.ttl, c, p.wantValues && p.res.Values == nil)
		if out.err != nil && p.ctx.Err() != nil {
			return false, p.n.opError(p.ctx, out.err)
		}
		if p.wantValues && p.res.Values == nil && len(out.before) > 0 {
			p.res.Values, p.res.Level, p.res.From = toValues(out.before), ls.level, publicContact(c.Contact)
		}
		switch {
		case out.stored():
			p.res.Stored = append(p.res.Stored, Placement{Level: ls.level, Node: publicContact(c.Contact)})
			p.quota[i]--
			return true, nil
		case out.err == nil && out.result == wire.StoreFull:
			p.refusedFull++
		default:
			p.otherFailures++
		}
	}
	return false, nil
}

// storeRemaining stores the replicas still wanted, which no longer affect
// the answer, concurrently: one goroutine per level walking down its
// stack.
func (p *putRun) storeRemaining() {
	var mu sync.Mutex
	var wg sync.WaitGroup
	for i, ls := range p.stacks {
		if p.quota[i] <= 0 || p.next[i] >= len(ls.stack) {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p.quota[i] > 0 && p.next[i] < len(ls.stack) && p.ctx.Err() == nil {
				c := ls.stack[p.next[i]]
				p.next[i]++
				if p.n.storeAt(p.ctx, ls.level, p.key, p.value, p.ttl, c, false).stored() {
					mu.Lock()
					p.res.Stored = append(p.res.Stored, Placement{Level: ls.level, Node: publicContact(c.Contact)})
					mu.Unlock()
					p.quota[i]--
				}
			}
		}()
	}
	wg.Wait()
}

// result is what PutGet returns once the stores are done.
func (p *putRun) result() (PutGetResult, error) {
	res := p.res
	if p.ctx.Err() != nil {
		return res, p.n.opError(p.ctx, p.ctx.Err())
	}
	slices.SortStableFunc(res.Stored, func(a, b Placement) int { return b.Level - a.Level })
	if len(res.Stored) == 0 && p.candidates == 0 && p.fullSkipped > 0 {
		res.Saturated = true
	}
	if len(res.Stored) == 0 && p.candidates > 0 {
		switch {
		case p.otherFailures == 0 && p.refusedFull+p.fullSkipped > 0:
			res.Saturated = true
		case res.Hops == 0 && p.failures > 0:
			return res, ErrNoResponse
		default:
			return res, ErrNotStored
		}
	}
	return res, nil
}

type storeOutcome struct {
	result uint8
	before []wire.Value
	err    error
}

func (o storeOutcome) stored() bool {
	return o.err == nil && (o.result == wire.StoreStored || o.result == wire.StoreRefreshed)
}

// storeAt stores the value on one stack entry: locally for this node, by RPC
// otherwise.
func (n *Node) storeAt(ctx context.Context, lvl int, key ID, value []byte, ttl time.Duration, c *candidate, wantValues bool) storeOutcome {
	if c.isSelf {
		lk := levelKey{level: uint8(lvl), key: key}
		now := time.Now()
		n.load.request(lk, kindStore, true, now)
		result, _, before := n.storeLocal(lk, value, ttl, now, holderID{}, netip.AddrPort{})
		return storeOutcome{result: result, before: before}
	}
	req := &wire.Message{Type: wire.Store, Level: uint8(lvl), Key: key, TTL: ttlMillis(ttl), Value: value}
	if wantValues {
		req.Flags = wire.FlagWantValues
	}
	m, err := n.call(ctx, c.Contact, req)
	if err != nil {
		return storeOutcome{err: err}
	}
	if m.Status != wire.StatusOK {
		return storeOutcome{err: fmt.Errorf("coraldht: store at %v refused with status %d", c.Contact, m.Status)}
	}
	return storeOutcome{result: m.Result, before: m.Values}
}
