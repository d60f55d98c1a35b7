package coraldht

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
)

// MessageCounts counts datagrams by message type.
type MessageCounts struct {
	Ping, FindNode, Get, PutProbe, Store, Members uint64
	App                                           uint64 // application messages (CallApp, HandleApp)
}

func (mc *MessageCounts) set(t wire.Type, v uint64) {
	switch t {
	case wire.Ping:
		mc.Ping = v
	case wire.FindNode:
		mc.FindNode = v
	case wire.Get:
		mc.Get = v
	case wire.PutProbe:
		mc.PutProbe = v
	case wire.Store:
		mc.Store = v
	case wire.Members:
		mc.Members = v
	case wire.App:
		mc.App = v
	}
}

// Total is the sum over all types.
func (mc MessageCounts) Total() uint64 {
	return mc.Ping + mc.FindNode + mc.Get + mc.PutProbe + mc.Store + mc.Members + mc.App
}

// Histogram is a cumulative-free bucketed distribution: Counts[i] counts
// observations ≤ Bounds[i] and above the previous bound; the last count is
// for observations above every bound.
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Sum    float64
	Count  uint64
}

func newHistogram(bounds []float64) *histogram {
	return &histogram{h: Histogram{Bounds: bounds, Counts: make([]uint64, len(bounds)+1)}}
}

type histogram struct {
	mu sync.Mutex
	h  Histogram
}

func (h *histogram) observe(v float64) {
	h.mu.Lock()
	i := 0
	for i < len(h.h.Bounds) && v > h.h.Bounds[i] {
		i++
	}
	h.h.Counts[i]++
	h.h.Sum += v
	h.h.Count++
	h.mu.Unlock()
}

func (h *histogram) snapshot() Histogram {
	h.mu.Lock()
	defer h.mu.Unlock()
	out := h.h
	out.Counts = append([]uint64(nil), h.h.Counts...)
	return out
}

// Stats is a snapshot of a node's counters. It holds plain numbers so the
// CoreDNS and Caddy integrations can export them in their own metrics
// systems; coraldht itself depends on none.
type Stats struct {
	RequestsIn  MessageCounts // authentic requests received
	RequestsOut MessageCounts // requests sent
	RepliesIn   MessageCounts // replies matched to an outstanding request
	RepliesOut  MessageCounts // replies sent
	Refused     uint64        // requests answered with a non-OK status (not a member, bad level, invalid)
	Drops       DropCounts    // Drops.BadAuth: no installed key verifies
	Keys        []KeyInfo     // installed keys, primary first, with datagrams accepted under each
	Timeouts    uint64        // RPCs that went unanswered

	Gets, GetHits, Puts, PutGets uint64 // operations started by this node's applications
	GetFailures                  uint64 // gets that failed (no node answered, timeout, error); not finding values is no failure
	PutFailures                  uint64 // puts and put+gets that failed (no node answered, timeout, error)

	Lookups       uint64
	LookupHops    Histogram // remote nodes that answered, per lookup level
	LookupSeconds Histogram // duration of each lookup level

	StoredKeys, StoredValues int
	Store                    StoreCounters

	// Clustering: rounds run, candidate clusters validated, cluster changes
	// over all levels (joins and splits), and of those the splits.
	ClusterRounds, ClusterValidations, ClusterChanges, ClusterSplits uint64
	HintLookups                                                      uint64 // hint prefixes published and read

	RoutingTableSizes []int // contacts per level
	Peers             int   // addresses with RTT measurements
	TopKeys           []KeyLoad

	// What keeps one member from controlling the node (issue 35).
	Abuse         AbuseCounts // events that mark a source as suspect, by kind; per prefix in Node.Suspects
	Truncated     uint64      // replies truncated toward sources that had not proven their address
	Resent        uint64      // requests sent again after a truncated reply (a first contact)
	Verifications uint64      // pings to prove a claimed address or measure a cluster claim
	ReplaySenders int         // senders the replay filter keeps a window for
}

// StoreCounters counts what happened to store attempts and stored values.
type StoreCounters struct {
	Stored           uint64 // new values accepted
	Refreshed        uint64 // an existing value stored again
	RefusedFull      uint64 // refused: full for the key
	RefusedExhausted uint64 // refused: memory bound and nothing to evict
	EvictedForNewer  uint64 // a key's soonest-expiring value made room for a longer-lived one
	EvictedForSpace  uint64 // evicted by a bound of the whole store, from the prefix holding the most
	EvictedForShare  uint64 // a source's own value made room for its newer one, its share being full
	Expired          uint64
}

// nodeCounters are the live counters behind Stats.
type nodeCounters struct {
	reqIn, reqOut, repIn, repOut [wire.TypeEnd]atomic.Uint64
	refused                      atomic.Uint64
	truncated, resent            atomic.Uint64 // replies truncated toward unproven sources; calls sent again after one
	verifications                atomic.Uint64 // pings to prove a claimed address or measure a claim
	drops                        [dropReasonEnd]atomic.Uint64
	timeouts                     atomic.Uint64
	gets, getHits, puts, putGets atomic.Uint64
	getFailures, putFailures     atomic.Uint64
	lookups                      atomic.Uint64
	hops, seconds                *histogram

	clusterRounds, clusterValidations, clusterChanges, clusterSplits, hintLookups atomic.Uint64
}

func newNodeCounters() *nodeCounters {
	hopBounds := make([]float64, 21)
	for i := range hopBounds {
		hopBounds[i] = float64(i)
	}
	return &nodeCounters{
		hops:    newHistogram(hopBounds),
		seconds: newHistogram([]float64{0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10}),
	}
}

func (c *nodeCounters) observeLookup(hops int, d time.Duration) {
	c.lookups.Add(1)
	c.hops.observe(float64(hops))
	c.seconds.observe(d.Seconds())
}

func loadCounts(a *[wire.TypeEnd]atomic.Uint64) MessageCounts {
	var mc MessageCounts
	for t := wire.Type(1); t < wire.TypeEnd; t++ {
		mc.set(t, a[t].Load())
	}
	return mc
}

// Stats returns a snapshot of the node's counters, including the ten keys
// with the most requests in the last minute.
func (n *Node) Stats() Stats {
	c := n.counters
	s := Stats{
		RequestsIn:    loadCounts(&c.reqIn),
		RequestsOut:   loadCounts(&c.reqOut),
		RepliesIn:     loadCounts(&c.repIn),
		RepliesOut:    loadCounts(&c.repOut),
		Refused:       c.refused.Load(),
		Timeouts:      c.timeouts.Load(),
		Gets:          c.gets.Load(),
		GetHits:       c.getHits.Load(),
		GetFailures:   c.getFailures.Load(),
		PutFailures:   c.putFailures.Load(),
		Puts:          c.puts.Load(),
		PutGets:       c.putGets.Load(),
		Lookups:       c.lookups.Load(),
		LookupHops:    c.hops.snapshot(),
		LookupSeconds: c.seconds.snapshot(),

		ClusterRounds:      c.clusterRounds.Load(),
		ClusterValidations: c.clusterValidations.Load(),
		ClusterChanges:     c.clusterChanges.Load(),
		ClusterSplits:      c.clusterSplits.Load(),
		HintLookups:        c.hintLookups.Load(),
	}
	s.Drops = c.dropCounts()
	s.Keys = n.keys.Keys()
	keys, values, sc := n.store.sizes()
	s.StoredKeys, s.StoredValues = keys, values
	s.Store = sc
	for _, lv := range n.levels {
		s.RoutingTableSizes = append(s.RoutingTableSizes, lv.rt.len())
	}
	s.Peers = n.peers.len()
	s.TopKeys = n.load.top(10, time.Now())
	s.Abuse = n.abuse.counts()
	s.Truncated, s.Resent, s.Verifications = c.truncated.Load(), c.resent.Load(), c.verifications.Load()
	s.ReplaySenders = n.replay.len()
	return s
}
