package main

import (
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"sync"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/eval/internal/sim"
)

var flagTrace = flag.Int("trace", 0, "break down the load of the busiest nodes of each hot key (this many per key): which stage of which walks sent their put RPCs, and how well known and how isolated those nodes are")

// stage is what a put RPC a node received was, seen from the receiver.
type stage int

const (
	stageFirst   stage = iota // the putter's first remote hop: its target is its own ID with one digit fixed
	stageLater                // a later hop toward an intermediate target
	stageClosing              // the target is the key: the walk's closing phase
	stageStore                // reverse phase
	stageGet                  // not a put RPC, but it counts toward "loaded"
	nStages
)

var stageNames = [nStages]string{"first hop", "later hop", "closing", "store", "(gets)"}

// tracer counts, per hot key and receiving node, the requests of the
// steady minutes by stage and by sender.
type tracer struct {
	s     *sim.Sim
	keys  []coraldht.ID
	index map[coraldht.ID]int

	mu      sync.Mutex
	on      bool
	stages  [][][nStages]uint64 // [key][node][stage]
	senders [][]map[int]uint64  // [key][node][sender]: put RPCs
}

func newTracer(s *sim.Sim, keys []coraldht.ID) *tracer {
	t := &tracer{s: s, keys: keys, index: make(map[coraldht.ID]int)}
	for i, nd := range s.Nodes {
		t.index[nd.ID()] = i
	}
	t.stages = make([][][nStages]uint64, len(keys))
	t.senders = make([][]map[int]uint64, len(keys))
	for k := range keys {
		t.stages[k] = make([][nStages]uint64, len(s.Nodes))
		t.senders[k] = make([]map[int]uint64, len(s.Nodes))
	}
	for i, nd := range s.Nodes {
		nd.TraceRequests(func(r coraldht.RequestTrace) { t.record(i, r) })
	}
	return t
}

func (t *tracer) record(to int, r coraldht.RequestTrace) {
	k := slices.Index(t.keys, r.Key)
	if k < 0 {
		return
	}
	from, ok := t.index[r.From]
	if !ok {
		return
	}
	var st stage
	switch {
	case r.Type == "get":
		st = stageGet
	case r.Type == "store":
		st = stageStore
	case r.Target == r.Key:
		st = stageClosing
	case r.Target == secondTarget(r.Key, r.From):
		// A request asks for contacts near the target after the one its
		// hop was chosen for: the first hop's asks for the second.
		st = stageFirst
	default:
		st = stageLater
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if !t.on {
		return
	}
	t.stages[k][to][st]++
	if st != stageGet {
		m := t.senders[k][to]
		if m == nil {
			m = make(map[int]uint64)
			t.senders[k][to] = m
		}
		m[from]++
	}
}

// secondTarget is the second intermediate target of a b = 1 walk from
// the ID from toward key: from's ID with the key's next digit, twice.
func secondTarget(key, from coraldht.ID) coraldht.ID {
	t := from
	for range 2 {
		p := coraldht.CommonPrefixLen(key, t)
		if p == coraldht.IDBits {
			return key
		}
		t = coraldht.Splice(key, t, p+1, 1)
	}
	return t
}

func (t *tracer) start() {
	t.mu.Lock()
	t.on = true
	t.mu.Unlock()
}

func (t *tracer) stop() {
	t.mu.Lock()
	t.on = false
	t.mu.Unlock()
	for _, nd := range t.s.Nodes {
		nd.TraceRequests(nil)
	}
}

// report prints, for the top busiest nodes of each key, where their put
// RPCs came from, how many routing tables list them (against the mean),
// and how deep in the ID tree they are alone (log2 of the share of the
// ID space nearest them, against log2 n).
func (t *tracer) report(minutes float64, seed uint64) {
	n := len(t.s.Nodes)
	// Routing-table membership, and join order (as sim.Start draws it).
	listed := make([]int, n)
	for _, nd := range t.s.Nodes {
		for _, c := range nd.RoutingTable(0) {
			if i, ok := t.index[c.ID]; ok {
				listed[i]++
			}
		}
	}
	meanListed := 0.0
	for _, v := range listed {
		meanListed += float64(v) / float64(n)
	}
	joinRank := make([]int, n)
	for r, i := range rand.New(rand.NewPCG(seed, 77)).Perm(n) {
		joinRank[i] = r
	}
	ids := make([]coraldht.ID, n)
	for i, nd := range t.s.Nodes {
		ids[i] = nd.ID()
	}
	slices.SortFunc(ids, func(a, b coraldht.ID) int { return a.Cmp(b) })
	alone := func(id coraldht.ID) int { // depth of the smallest subtree holding id alone
		at, _ := slices.BinarySearchFunc(ids, id, func(a, b coraldht.ID) int { return a.Cmp(b) })
		deepest := 0
		for _, j := range []int{at - 1, at + 1} {
			if j >= 0 && j < n {
				deepest = max(deepest, coraldht.CommonPrefixLen(id, ids[j]))
			}
		}
		return deepest + 1
	}
	fmt.Printf("  trace: per key, the %d busiest nodes; put RPCs/min by stage; senders (those sending ≥ β/2 a minute); routing tables listing it (mean %.1f); join rank; alone at depth (log2 n = %.1f)\n",
		*flagTrace, meanListed, math.Log2(float64(n)))
	beta := float64(coraldht.DefaultConfig().Leak)
	for k, key := range t.keys {
		order := make([]int, n)
		for i := range order {
			order[i] = i
		}
		rank := make([]int, n)
		slices.SortFunc(order, func(a, b int) int { return coraldht.CompareDistance(key, t.s.Nodes[a].ID(), t.s.Nodes[b].ID()) })
		for r, i := range order {
			rank[i] = r
		}
		puts := func(i int) uint64 {
			var s uint64
			for st := stageFirst; st < stageGet; st++ {
				s += t.stages[k][i][st]
			}
			return s
		}
		busy := slices.Clone(order)
		slices.SortStableFunc(busy, func(a, b int) int { return int(puts(b)) - int(puts(a)) })
		var all [nStages]uint64
		for i := range n {
			for st := range nStages {
				all[st] += t.stages[k][i][st]
			}
		}
		fmt.Printf("   key %d, all nodes:", k)
		for st := range nStages {
			fmt.Printf(" %s %.0f", stageNames[st], float64(all[st])/minutes)
		}
		fmt.Println()
		for _, i := range busy[:min(*flagTrace, n)] {
			id := t.s.Nodes[i].ID()
			fmt.Printf("    rank %3d (cpl %2d): %4.0f/min =", rank[i], coraldht.CommonPrefixLen(id, key), float64(puts(i))/minutes)
			for st := range nStages {
				fmt.Printf(" %s %.0f", stageNames[st], float64(t.stages[k][i][st])/minutes)
			}
			strong := 0
			var senderCPL []int
			for from, c := range t.senders[k][i] {
				if float64(c)/minutes >= beta/2 {
					strong++
					senderCPL = append(senderCPL, coraldht.CommonPrefixLen(t.s.Nodes[from].ID(), key))
				}
			}
			slices.Sort(senderCPL)
			fmt.Printf("; senders %d (%d, their cpl %v); listed %d; join rank %d; alone at %d\n",
				len(t.senders[k][i]), strong, senderCPL, listed[i], joinRank[i], alone(id))
		}
	}
}
