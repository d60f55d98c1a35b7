package coraldht

import (
	"errors"
	"net"
	"net/netip"
	"slices"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
)

// Inbound datagrams: the checks every datagram passes before it counts
// (size, tag, freshness, addressing), what the node learns from its sender,
// and dispatch: requests to their handlers, replies to the calls waiting for
// them (rpc.go).

func (n *Node) receiveLoop() {
	defer n.wg.Done()
	buf := make([]byte, MaxDatagram+1)
	for {
		sz, from, err := n.tr.ReadFrom(buf)
		if err != nil {
			if n.closed.Load() || errors.Is(err, ErrTransportClosed) || errors.Is(err, net.ErrClosed) {
				return
			}
			n.log.Debug("read", "err", err)
			continue
		}
		n.handleDatagram(buf[:sz], from)
	}
}

func (n *Node) drop(r DropReason, from netip.AddrPort) {
	n.counters.drops[r].Add(1)
	n.log.Debug("drop", "reason", r.String(), "from", from)
}

// handleDatagram authenticates, parses and dispatches one datagram. A
// datagram that fails any check is counted and dropped with no reply, so a
// forged or replayed packet can never make this node send anything.
func (n *Node) handleDatagram(pkt []byte, from netip.AddrPort) {
	if len(pkt) > MaxDatagram {
		n.drop(DropOversize, from)
		return
	}
	body, keyUsed, ok := n.keys.open(pkt)
	if !ok {
		n.drop(DropBadAuth, from)
		return
	}
	m, err := wire.Decode(body)
	if err != nil {
		n.drop(DropMalformed, from)
		return
	}
	if m.Sender.ID == n.self.ID {
		n.drop(DropSelf, from)
		return
	}
	if m.Recipient != n.self.ID {
		n.drop(DropMisdirected, from)
		return
	}
	now := time.Now()
	if r := n.replay.check(m.Sender.ID, m.Timestamp, now.UnixNano()); r != dropNone {
		n.drop(r, from)
		return
	}
	keyUsed.accepted.Add(1)
	n.learn(m.Sender, m.Clusters, now, !m.Response)
	n.peers.noteClusters(m.Sender, m.Clusters, now)
	if m.Response {
		n.handleResponse(m, from, now)
	} else {
		n.handleRequest(m, from, now)
	}
}

// sharesCluster reports whether a peer with the given cluster list is in
// this node's cluster at level lvl.
func (n *Node) sharesCluster(clusters []ClusterInfo, lvl int) bool {
	if lvl == 0 {
		return true
	}
	if lvl >= len(n.levels) {
		return false
	}
	mine := n.levels[lvl].info().ID
	for _, c := range clusters {
		if c.Level == lvl {
			return c.ID == mine
		}
	}
	return false
}

// learn feeds an authentic sender into the routing table of every level at
// which it shares our cluster, and drops it from the tables of levels where
// it no longer does: a member that moved has said so, and the move itself
// is now clustering evidence. Only the sender of a request may take a
// full bucket's slot by rank (routing.go, heardAs).
func (n *Node) learn(c Contact, clusters []ClusterInfo, now time.Time, request bool) {
	for _, lv := range n.levels {
		if !n.sharesCluster(clusters, lv.index) {
			lv.rt.remove(c.ID)
			continue
		}
		if stale := lv.rt.heardAs(c, now, request); stale != nil {
			n.checkQuestionable(lv, *stale)
		}
	}
}

// checkQuestionable pings a contact that has been quiet while a newcomer
// waits for its bucket slot; if it does not answer it is replaced.
func (n *Node) checkQuestionable(lv *level, c Contact) {
	if n.closed.Load() {
		return
	}
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		if _, err := n.call(n.ctx, c, &wire.Message{Type: wire.Ping}); errors.Is(err, ErrTimeout) {
			// A quiet contact that fails its check gives its slot to the
			// newcomer waiting in the replacement cache.
			lv.rt.evict(c.ID)
		}
	}()
}

func (n *Node) handleRequest(m *wire.Message, from netip.AddrPort, now time.Time) {
	n.counters.reqIn[m.Type].Add(1)
	if m.Type == wire.App {
		// Answered when the application's handler returns (app.go).
		n.handleApp(m, from, now)
		return
	}
	r := &wire.Message{Type: m.Type, Response: true, ReqID: m.ReqID}
	switch m.Type {
	case wire.Ping:
	case wire.Members:
		// Any node may sample a cluster it considers joining.
		if int(m.Level) >= len(n.levels) {
			r.Status = wire.StatusBadLevel
		}
	default:
		r.Status = n.checkLevel(m)
	}
	if r.Status != wire.StatusOK {
		n.counters.refused.Add(1)
		_ = n.send(r, from, m.Sender.ID)
		return
	}
	lk := levelKey{level: m.Level, key: m.Key}
	switch m.Type {
	case wire.Ping:
	case wire.FindNode, wire.Members:
		r.Nodes = n.levels[m.Level].rt.closestAnswering(m.Target, n.cfg.BucketSize, m.Sender.ID)
	case wire.Get:
		n.load.request(lk, kindGet, false, now)
		r.Values = n.store.get(lk, now)
		if len(r.Values) == 0 {
			r.Nodes = n.replyContacts(int(m.Level), m.Target, m.Key, m.Sender.ID)
		}
	case wire.PutProbe:
		ttl := time.Duration(m.TTL) * time.Millisecond
		if ttl <= 0 || ttl > n.cfg.MaxTTL {
			r.Status = wire.StatusInvalid
			break
		}
		r.Loaded = n.load.request(lk, kindPutProbe, false, now)
		st := n.store.status(lk, now)
		r.Count = uint8(min(st.count, 255))
		r.MinRemaining = ttlMillis(st.minRemaining)
		if m.Flags&wire.FlagWantValues != 0 {
			r.Values = n.store.get(lk, now)
		}
		r.Nodes = n.replyContacts(int(m.Level), m.Target, m.Key, m.Sender.ID)
	case wire.Store:
		ttl := time.Duration(m.TTL) * time.Millisecond
		if ttl <= 0 || ttl > n.cfg.MaxTTL || len(m.Value) > n.cfg.MaxValueSize {
			r.Status = wire.StatusInvalid
			break
		}
		n.load.request(lk, kindStore, false, now)
		result, after, before := n.storeLocal(lk, m.Value, ttl, now)
		r.Result = result
		r.Count = uint8(min(after.count, 255))
		if m.Flags&wire.FlagWantValues != 0 {
			r.Values = before
		}
	}
	if r.Status != wire.StatusOK {
		n.counters.refused.Add(1)
	} else if m.Type == wire.Get || m.Type == wire.PutProbe || m.Type == wire.Store {
		n.traceRequest(m, r.Loaded)
	}
	if err := n.send(r, from, m.Sender.ID); err != nil {
		n.log.Debug("reply", "to", from, "err", err)
	}
}

// closingHints is how many contacts nearest the key a get or put_probe
// reply adds to those nearest the requested target.
const closingHints = 4

// replyContacts lists the contacts a get or put_probe reply carries: the
// bucket nearest the requested target, which the requester's b-bit walk
// picks its next hop from, plus the few nearest the key itself, without
// which the walk could end believing the wrong nodes are nearest the key.
func (n *Node) replyContacts(level int, target, key, requester ID) []Contact {
	rt := n.levels[level].rt
	out := rt.closestAnswering(target, n.cfg.BucketSize, requester)
	if target == key {
		return out
	}
	for _, c := range rt.closestAnswering(key, closingHints, requester) {
		if !slices.ContainsFunc(out, func(x Contact) bool { return x.ID == c.ID }) {
			out = append(out, c)
		}
	}
	return out
}

// storeLocal stores into this node's own storage, honouring PlainDHT.
func (n *Node) storeLocal(lk levelKey, data []byte, ttl time.Duration, now time.Time) (uint8, keyStatus, []wire.Value) {
	if n.cfg.PlainDHT {
		return n.store.putForced(lk, data, ttl, now)
	}
	return n.store.put(lk, data, ttl, now)
}

func (n *Node) checkLevel(m *wire.Message) uint8 {
	if int(m.Level) >= len(n.levels) {
		return wire.StatusBadLevel
	}
	if !n.sharesCluster(m.Clusters, int(m.Level)) {
		return wire.StatusNotMember
	}
	return wire.StatusOK
}

func (n *Node) handleResponse(m *wire.Message, from netip.AddrPort, now time.Time) {
	n.mu.Lock()
	pc := n.pending[m.ReqID]
	if pc == nil || pc.typ != m.Type || pc.to.ID != m.Sender.ID {
		n.mu.Unlock()
		n.drop(DropUnsolicited, from)
		return
	}
	delete(n.pending, m.ReqID)
	n.mu.Unlock()
	pc.stopTimers()
	n.counters.repIn[m.Type].Add(1)
	if m.Type != wire.App {
		// An app reply's delay includes the handler's work (and
		// retransmissions): no RTT sample.
		n.peers.observe(pc.to.Addr, now.Sub(pc.sent), now)
	}
	n.post(pc, rpcEvent{reply: m})
}
