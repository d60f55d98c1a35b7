package coraldht

import (
	"bytes"
	"context"
	"slices"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
)

// A lookup walks one level's DSHT toward a key. Each step corrects one more
// b-bit digit of an intermediate target t, which starts at this node's ID
// (or where the previous level stopped), and the next hop is the known node
// closest to t — never simply the known node closest to the key. Once t
// equals the key, the lookup ends when the nearest few live nodes to the key
// have answered. Gets stop at the first node holding values; put probes stop
// at the first node that is both full and loaded.
//
// At most Alpha RPCs are in flight. A hop that does not answer within its
// adaptive timeout is marked slow: the lookup carries on with the next best
// node while still accepting the slow node's late reply, so dead or sluggish
// nodes cost one timeout each rather than stalling the walk.

type lookupKind uint8

const (
	lookupFind lookupKind = iota // fill routing tables (bootstrap, refresh)
	lookupGet                    // stop at the first values
	lookupPut                    // forward phase of a put
)

// maxLookupRPCs bounds the RPCs one lookup level may send.
const maxLookupRPCs = 64

type lookupParams struct {
	level      int
	key        ID
	kind       lookupKind
	ttl        time.Duration // put: lifetime of the new value, for "full"
	wantValues bool          // put+get: probes return values too
	start      ID            // initial intermediate target
	seeds      []Contact     // candidates besides the routing table
	closing    int           // nearest answered nodes needed to finish
	gather     bool          // get: the union of every answered node's values, not the first
}

type candState uint8

const (
	candNew candState = iota
	candInflight
	candSlow // timed out softly; may still answer
	candAnswered
	candFailed
	candSuspect // unreachable recently; tried only when nothing else is left
)

// suspectWindow is how long an unanswered peer stays suspect.
const suspectWindow = 10 * time.Minute

type candidate struct {
	Contact
	cpl      int // common prefix length with the key
	state    candState
	isSelf   bool
	loaded   bool      // put: node reported loaded
	status   keyStatus // put: node's values for the key
	clusters []ClusterInfo
	call     *pendingCall
}

type lookupResult struct {
	values     []wire.Value // first values found
	valuesFrom Contact
	answered   []*candidate // nodes that answered, this node first
	saturated  bool         // put: stopped at a full and loaded node
	nearest    *candidate   // answered node nearest the key
	hops       int          // remote nodes that answered
	rpcs       int
	failures   int   // remote nodes that did not answer or refused
	timedOut   bool  // ended by LookupTimeout
	err        error // the caller's context ended
}

type lookupState struct {
	n      *Node
	p      lookupParams
	sorted []*candidate // by distance to the key, nearest first
	byID   map[ID]*candidate
	events chan rpcEvent
	active int // in flight and not slow
	slow   int // in flight and slow
	t      ID
	fixed  int // leading bits of the key the walk has fixed in t so far
	done   bool
	began  time.Time
	res    *lookupResult
	salt   uint64 // put: this walk's own order among equally good hops
}

func (ls *lookupState) add(c Contact) *candidate {
	if x := ls.byID[c.ID]; x != nil {
		return x
	}
	cand := &candidate{Contact: c, cpl: CommonPrefixLen(c.ID, ls.p.key)}
	if ls.n.peers.unreachable(c.Addr, ls.began, suspectWindow) {
		cand.state = candSuspect
	}
	if ls.n.identity.revokedAddr(c.Addr) {
		// Revoked: its datagrams are dropped, so it can only time out.
		cand.state = candFailed
	}
	at, _ := slices.BinarySearchFunc(ls.sorted, cand, func(a, b *candidate) int {
		return CompareDistance(ls.p.key, a.ID, b.ID)
	})
	ls.sorted = slices.Insert(ls.sorted, at, cand)
	ls.byID[c.ID] = cand
	return cand
}

func usable(c *candidate) bool {
	return c.state != candSlow && c.state != candFailed && c.state != candSuspect
}

func (ls *lookupState) canSend() bool {
	return ls.active < ls.n.cfg.Alpha && ls.active+ls.slow < 2*ls.n.cfg.Alpha && ls.res.rpcs < maxLookupRPCs
}

func (ls *lookupState) send(c *candidate) {
	target := ls.p.key
	if next, ok := nextTarget(ls.p.key, ls.t, ls.n.cfg.B); ok && !ls.n.cfg.PlainDHT {
		// Ask for nodes near the next intermediate target: the paper's
		// "peers half-way closer".
		target = next
	}
	req := &wire.Message{Level: uint8(ls.p.level), Key: ls.p.key, Target: target}
	switch ls.p.kind {
	case lookupFind:
		// Filling routing tables: the nodes wanted are those nearest the
		// target itself.
		req.Type = wire.FindNode
		req.Target = ls.p.key
	case lookupGet:
		req.Type = wire.Get
	case lookupPut:
		req.Type = wire.PutProbe
		req.TTL = ttlMillis(ls.p.ttl)
		if ls.p.wantValues {
			req.Flags = wire.FlagWantValues
		}
	}
	quick := c.state == candSuspect
	c.state = candInflight
	ls.active++
	ls.res.rpcs++
	c.call = ls.n.startCall(c.Contact, req, ls.events, c, quick)
}

// advance moves the walk forward as far as known answers allow, sending
// RPCs where it needs new ones.
func (ls *lookupState) advance() {
	for !ls.done {
		c := ls.closestTo(ls.t)
		if c == nil {
			// Only suspects left: give the nearest one another chance.
			if s := ls.nearestSuspect(); s != nil && ls.active+ls.slow == 0 {
				s.state = candNew
				continue
			}
			ls.done = true
			return
		}
		switch c.state {
		case candAnswered:
			if ls.t == ls.p.key {
				ls.close()
				return
			}
			if ls.n.cfg.PlainDHT {
				ls.t = ls.p.key
			} else {
				ls.fixed = fixedAfter(CommonPrefixLen(ls.p.key, ls.t), ls.n.cfg.B)
				ls.t, _ = nextTarget(ls.p.key, ls.t, ls.n.cfg.B)
			}
		case candNew:
			if ls.canSend() {
				ls.send(c)
			}
			return
		default: // in flight: wait for it
			return
		}
	}
}

func (ls *lookupState) nearestSuspect() *candidate {
	for _, c := range ls.sorted {
		if c.state == candSuspect {
			return c
		}
	}
	return nil
}

// close makes sure the `closing` nearest live nodes to the key have
// answered. A slow node among them is not skipped: the walk asks the next
// node too (a hedge) but still waits for the slow one's reply or hard
// timeout, because it may hold the values or be the node where concurrent
// put+gets serialize.
func (ls *lookupState) close() {
	answered, active, slow := 0, 0, 0
	for _, c := range ls.sorted {
		if answered >= ls.p.closing {
			break
		}
		switch c.state {
		case candAnswered:
			answered++
		case candInflight:
			active++
		case candSlow:
			slow++
		case candNew, candSuspect:
			// A suspect among the nearest nodes gets one quick chance: the
			// values may be there, and a partition may have healed.
			if answered+active < ls.p.closing {
				if !ls.canSend() {
					return
				}
				ls.send(c)
				active++
			}
		}
	}
	if active == 0 && slow == 0 {
		ls.done = true
	}
}

func (ls *lookupState) handle(ev rpcEvent) {
	c := ev.call.tag.(*candidate)
	if ev.soft {
		if c.state == candInflight {
			c.state = candSlow
			ls.active--
			ls.slow++
		}
		return
	}
	if c.state == candSlow {
		ls.slow--
	} else {
		ls.active--
	}
	c.call = nil
	if ev.err != nil {
		c.state = candFailed
		ls.res.failures++
		return
	}
	m := ev.reply
	if m.Status != wire.StatusOK {
		c.state = candFailed
		ls.res.failures++
		if m.Status == wire.StatusNotMember {
			ls.n.levels[ls.p.level].rt.remove(c.ID)
		}
		return
	}
	c.state = candAnswered
	c.clusters = m.Clusters
	ls.res.hops++
	ls.answer(c)
	for _, nc := range m.Nodes {
		if nc.ID != ls.n.self.ID {
			ls.add(nc)
		}
	}
	switch ls.p.kind {
	case lookupGet:
		if ls.p.gather {
			ls.gatherValues(m.Values, c.Contact)
		} else if len(m.Values) > 0 {
			ls.res.values, ls.res.valuesFrom = m.Values, c.Contact
			ls.done = true
		}
	case lookupPut:
		c.loaded = m.Loaded
		c.status = keyStatus{count: int(m.Count), minRemaining: time.Duration(m.MinRemaining) * time.Millisecond}
		if ls.p.wantValues && len(m.Values) > 0 && ls.res.values == nil {
			ls.res.values, ls.res.valuesFrom = m.Values, c.Contact
		}
		if !ls.n.cfg.PlainDHT && c.loaded && c.status.full(ls.n.cfg.FullValues, ls.p.ttl) {
			ls.res.saturated = true
			ls.done = true
		}
	}
}

func (ls *lookupState) answer(c *candidate) {
	ls.res.answered = append(ls.res.answered, c)
	if ls.res.nearest == nil || CompareDistance(ls.p.key, c.ID, ls.res.nearest.ID) < 0 {
		ls.res.nearest = c
	}
}

// lookup runs one level of a get, put probe or node search.
func (n *Node) lookup(parent context.Context, p lookupParams) *lookupResult {
	began := time.Now()
	ctx, cancel := context.WithTimeout(parent, n.cfg.LookupTimeout)
	defer cancel()
	lv := n.levels[p.level]
	lv.rt.touch(p.key, began)
	if p.closing < 1 {
		p.closing = 1
	}
	ls := &lookupState{
		n:      n,
		p:      p,
		byID:   make(map[ID]*candidate),
		events: make(chan rpcEvent, 2*maxLookupRPCs+4),
		t:      p.start,
		began:  began,
		res:    &lookupResult{},
	}
	if n.cfg.PlainDHT {
		ls.t = p.key
	}
	ls.fixed = CommonPrefixLen(ls.t, p.key)
	if p.kind == lookupPut {
		n.mu.Lock()
		ls.salt = n.rng.Uint64()
		n.mu.Unlock()
	}
	ls.startAtSelf(began)
	if !ls.done {
		for _, e := range lv.rt.all() {
			ls.add(e.Contact)
		}
		for _, c := range p.seeds {
			if c.ID != n.self.ID {
				ls.add(c)
			}
		}
	}

	for !ls.done {
		ls.advance()
		if ls.done || ls.active+ls.slow == 0 {
			break
		}
		select {
		case ev := <-ls.events:
			ls.handle(ev)
		case <-ctx.Done():
			ls.res.err = ctx.Err()
			ls.done = true
		}
	}
	for _, c := range ls.sorted {
		if c.call != nil {
			n.cancelCall(c.call)
			c.call = nil
		}
	}
	if ls.res.err != nil && parent.Err() == nil {
		// Our own LookupTimeout expired, not the caller's context: the
		// lookup ends with what it found.
		ls.res.err = nil
		ls.res.timedOut = true
	}
	n.counters.observeLookup(ls.res.hops, time.Since(began))
	return ls.res
}

// startAtSelf makes this node the first one the operation contacts: it
// answers from its own store and load, and may end a get (values here) or
// a put (full and loaded here) before any RPC.
func (ls *lookupState) startAtSelf(now time.Time) {
	n, p := ls.n, ls.p
	self := ls.add(n.self)
	self.isSelf, self.state = true, candAnswered
	ls.answer(self)
	lk := levelKey{level: uint8(p.level), key: p.key}
	switch p.kind {
	case lookupGet:
		n.load.request(lk, kindGet, true, now)
		if vs := n.store.get(lk, now); p.gather {
			ls.gatherValues(vs, n.self)
		} else if len(vs) > 0 {
			ls.res.values, ls.res.valuesFrom = vs, n.self
			ls.done = true
		}
	case lookupPut:
		self.loaded = n.load.request(lk, kindPutProbe, true, now)
		self.status = n.store.status(lk, now)
		if p.wantValues {
			if vs := n.store.get(lk, now); len(vs) > 0 {
				ls.res.values, ls.res.valuesFrom = vs, n.self
			}
		}
		if !n.cfg.PlainDHT && self.loaded && self.status.full(n.cfg.FullValues, p.ttl) {
			ls.res.saturated = true
			ls.done = true
		}
	}
}

// findNode looks up target at one level to fill the routing table.
func (n *Node) findNode(ctx context.Context, lvl int, target ID) *lookupResult {
	return n.lookup(ctx, lookupParams{level: lvl, key: target, kind: lookupFind, start: n.self.ID, closing: n.cfg.BucketSize})
}

// gatherValues adds vs, from c, to a gathering get's values: each value
// once, with the longest time left any node gave it.
func (ls *lookupState) gatherValues(vs []wire.Value, c Contact) {
	for _, v := range vs {
		i := slices.IndexFunc(ls.res.values, func(w wire.Value) bool { return bytes.Equal(w.Data, v.Data) })
		switch {
		case i < 0:
			if ls.res.values == nil {
				ls.res.valuesFrom = c
			}
			ls.res.values = append(ls.res.values, v)
		case v.TTL > ls.res.values[i].TTL:
			ls.res.values[i].TTL = v.TTL
		}
	}
}
