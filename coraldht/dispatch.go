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
	now := time.Now()
	var serial uint64
	if n.identity != nil {
		var r DropReason
		if serial, r = n.identity.check(m, body, now, n.cfg.MaxClockSkew); r != dropNone {
			n.drop(r, from)
			n.abuse.note(AbuseIdentity, from, m.Sender.Addr, serial, now)
			return
		}
	}
	if m.Sender.ID == n.self.ID {
		n.drop(DropSelf, from)
		return
	}
	if m.Recipient != n.self.ID {
		n.drop(DropMisdirected, from)
		return
	}
	if r := n.replay.check(m.Sender.ID, SitePrefix(from.Addr()), m.Timestamp, now.UnixNano()); r != dropNone {
		n.drop(r, from)
		return
	}
	keyUsed.accepted.Add(1)
	if from == m.Sender.Addr {
		// What the sender says of itself from its own address: whether it
		// reads extensions, and the cookie it grants this node.
		n.peers.noteSender(from, m.Sender.Services.Has(wire.CapExtensions), m.Grant, serial, loadOf(m.Load), now)
	}
	if m.Response {
		n.handleResponse(m, from, now)
	} else {
		n.handleRequest(m, from, inbound{size: len(pkt), serial: serial}, now)
	}
}

// proven reports whether a request's source has proven its address: it
// echoed a cookie this node granted that address (cookies.go).
func (n *Node) proven(m *wire.Message, from netip.AddrPort, now time.Time) bool {
	return n.cfg.TrustMembers || (m.Ext && n.cookies.valid(m.Echo, from, now))
}

// heardRequest takes in what a request says of its sender. A sender whose
// address is proven (it echoed a cookie from the address it claims) is
// heard like any contact; one whose address is not enters no table until
// it answers a ping at the address it claims (verify.go), which
// heardRequest asks for (ping) when a table would take it. shared says the
// ping would go where the reply goes: then reply and ping together must
// stay within the request's size (afterReply).
func (n *Node) heardRequest(m *wire.Message, from netip.AddrPort, proven bool, now time.Time) (ping, shared bool) {
	if from != m.Sender.Addr {
		n.abuse.note(AbuseClaimMismatch, from, m.Sender.Addr, 0, now)
	}
	if proven && (from == m.Sender.Addr || n.cfg.TrustMembers) {
		measure := n.learn(m.Sender, m.Clusters, now, true)
		n.peers.noteClusters(m.Sender, m.Clusters, now)
		return measure, false // a proven address: no bound but the bounds of verify
	}
	return n.levels[0].rt.admits(m.Sender, true), from == m.Sender.Addr
}

// afterReply sends the ping heardRequest asked for, once the reply (sent
// bytes of it) has gone. A sender that claims its own source address
// gets a cookie in the reply and proves itself with its next request;
// the ping is for one that does not come back soon (a node joining, whose
// padded first request is answered in far less than its size), and goes
// only if reply and ping together are no larger than the request, so
// that an unproven address never receives more than it sent.
func (n *Node) afterReply(m *wire.Message, from netip.AddrPort, size, sent int, ping, shared bool, now time.Time) {
	if !ping {
		return
	}
	if shared {
		size -= sent
	}
	n.verify(m.Sender, from, size, now)
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

// learn feeds a sender whose address is proven into the routing table of
// every level at which it shares our cluster, and drops it from the
// tables of levels where it no longer does: a member that moved has said
// so, and the move itself is now clustering evidence. A claim to share a
// cluster above level 0 counts once this node has measured the sender
// (claimCounts): learn reports whether a claim waits for a measurement.
// Only the sender of a request may take a full bucket's slot by rank
// (routing.go, heardAs).
func (n *Node) learn(c Contact, clusters []ClusterInfo, now time.Time, request bool) (measure bool) {
	for _, lv := range n.levels {
		if !n.sharesCluster(clusters, lv.index) {
			lv.rt.remove(c.ID)
			continue
		}
		if counts, measured := n.claimCounts(lv, c); !counts {
			measure = measure || !measured
			continue
		}
		stale, refused := lv.rt.heardAs(c, now, request)
		if refused {
			n.abuse.note(AbuseContactRefused, c.Addr, netip.AddrPort{}, 0, now)
		}
		if stale != nil {
			n.checkQuestionable(lv, *stale)
		}
	}
	return measure
}

// claimSlack: a claim to share a cluster counts when the claimant is
// measured within this many times the level's threshold. Members of one
// cluster may be farther apart than the threshold: a cluster keeps a
// node while half its members are within it, and a cluster that has
// grown too wide splits around its center, which its members find by a
// lookup among themselves, so they must be in each other's tables until
// then. But a node four times the threshold away is in no cluster with
// this one by either rule.
const claimSlack = 4

// claimCounts reports whether c's claim to share lv's cluster counts:
// this node has measured c (measured), within claimSlack times the
// threshold unless this node's cluster there is pinned (a policy, not a
// distance).
func (n *Node) claimCounts(lv *level, c Contact) (counts, measured bool) {
	if lv.index == 0 || n.cfg.TrustMembers {
		return true, true
	}
	rtt := n.peers.minRTT(c.Addr)
	if rtt == 0 {
		return false, false
	}
	return lv.pinned || rtt <= claimSlack*lv.threshold, true
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

// inbound is what the checks of a request's datagram found: its size,
// and its sender's certificate serial (identity mode; 0 otherwise).
type inbound struct {
	size   int
	serial uint64
}

func (n *Node) handleRequest(m *wire.Message, from netip.AddrPort, in inbound, now time.Time) {
	size := in.size
	n.counters.reqIn[m.Type].Add(1)
	proven := n.proven(m, from, now)
	ping, shared := n.heardRequest(m, from, proven, now)
	if !proven && (m.Type == wire.Store || m.Type == wire.App) && !n.servesUnproven(m) {
		// A change of state on the word of a source that may be spoofed:
		// not until it echoes a cookie (the truncated reply gives it one).
		sent := n.reply(m, &wire.Message{Type: m.Type, Response: true, ReqID: m.ReqID}, from, size, false)
		n.afterReply(m, from, size, sent, ping, shared, now)
		return
	}
	if m.Type == wire.App {
		// Answered when the application's handler returns (app.go): the
		// sender is proven here, so the ping, if any, has no reply to
		// share the request's size with.
		n.afterReply(m, from, size, 0, ping, false, now)
		n.handleApp(m, from, size, proven, now)
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
	if r.Status == wire.StatusOK {
		n.serve(m, r, from, in.serial, now)
	}
	if r.Status != wire.StatusOK {
		n.counters.refused.Add(1)
	} else if m.Type == wire.Get || m.Type == wire.PutProbe || m.Type == wire.Store {
		n.traceRequest(m, r.Loaded)
	}
	sent := n.reply(m, r, from, size, proven)
	n.afterReply(m, from, size, sent, ping, shared, now)
}

// servesUnproven reports whether the node serves in full a request whose
// source is unproven: under TrustMembers, and from a node released
// before address cookies (it sends no extensions) under LegacyPeers.
func (n *Node) servesUnproven(m *wire.Message) bool {
	return n.cfg.TrustMembers || (n.cfg.LegacyPeers && !m.Sender.Services.Has(wire.CapExtensions))
}

// serve fills in r, the reply to an accepted request m of status OK.
func (n *Node) serve(m, r *wire.Message, from netip.AddrPort, serial uint64, now time.Time) {
	lk := levelKey{level: m.Level, key: m.Key}
	switch m.Type {
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
			return
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
			return
		}
		n.load.request(lk, kindStore, false, now)
		result, after, before := n.storeLocal(lk, m.Value, ttl, now, holderID{ip: from.Addr().Unmap(), serial: serial}, from)
		r.Result = result
		r.Count = uint8(min(after.count, 255))
		if m.Flags&wire.FlagWantValues != 0 {
			r.Values = before
		}
	}
}

// reply sends r, the reply to request m (size bytes) from from. A reply
// larger than its request goes only to a proven source: to others it goes
// truncated, without lists or clusters, with a cookie to retry with, and
// only if that fits in the request's size (PROTOCOL.md, Address cookies).
// A sender that cannot take a truncated reply (it reads no extensions)
// gets none. It returns how many bytes went.
func (n *Node) reply(m, r *wire.Message, from netip.AddrPort, size int, proven bool) int {
	to := Contact{ID: m.Sender.ID, Addr: from, Services: m.Sender.Services}
	signed := m.Identity != nil
	r.Load = n.published.get().wire()
	b, err := n.encode(r, to, signed)
	if err == nil && r.Load.Present && !proven && len(b) > size && !n.servesUnproven(m) {
		// The load is worth less than a full reply: without it the
		// reply may fit the rule below.
		release(b)
		r.Load = wire.Load{}
		b, err = n.encode(r, to, signed)
	}
	if err != nil {
		n.log.Debug("reply", "to", from, "err", err)
		return 0
	}
	if !proven && len(b) > size && !n.servesUnproven(m) {
		release(b)
		b = nil
		if m.Sender.Services.Has(wire.CapExtensions) {
			t := &wire.Message{Type: r.Type, Response: true, ReqID: r.ReqID, Status: r.Status, Truncated: true}
			if tb, err := n.encode(t, to, signed); err == nil && len(tb) <= size {
				r, b = t, tb
				n.counters.truncated.Add(1)
			} else if err == nil {
				release(tb)
			}
		}
		if b == nil {
			n.drop(DropUnproven, from)
			n.abuse.note(AbuseUnproven, from, m.Sender.Addr, 0, time.Now())
			return 0
		}
	}
	sent := len(b)
	if err := n.transmit(r, b, from); err != nil {
		n.log.Debug("reply", "to", from, "err", err)
	}
	return sent
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

// storeLocal stores into this node's own storage, charged to h (a store
// from from; the zero holder and address for this node's own puts),
// honouring PlainDHT.
func (n *Node) storeLocal(lk levelKey, data []byte, ttl time.Duration, now time.Time, h holderID, from netip.AddrPort) (uint8, keyStatus, []wire.Value) {
	put := n.store.put
	if n.cfg.PlainDHT {
		put = n.store.putForced
	}
	result, after, before, quota := put(lk, data, ttl, now, h)
	if quota {
		n.abuse.note(AbuseQuota, from, netip.AddrPort{}, h.serial, now)
	}
	return result, after, before
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

// handleResponse delivers a reply to the call waiting for it. The reply
// proves its sender's address (the call went there, under a request ID
// only that address saw), so it is heard; a truncated one (this node's
// source was unproven there) is not, and the call is sent again with the
// cookie it brought.
func (n *Node) handleResponse(m *wire.Message, from netip.AddrPort, now time.Time) {
	n.mu.Lock()
	pc := n.pending[m.ReqID]
	if pc == nil || pc.typ != m.Type || pc.to.ID != m.Sender.ID {
		n.mu.Unlock()
		n.drop(DropUnsolicited, from)
		return
	}
	if m.Truncated && pc.resend != nil && pc.resent < maxResends {
		pc.resent++
		pc.resend()
		n.mu.Unlock()
		n.counters.resent.Add(1)
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
	if !m.Truncated {
		n.learn(m.Sender, m.Clusters, now, pc.requester)
		n.peers.noteClusters(m.Sender, m.Clusters, now)
	}
	n.post(pc, rpcEvent{reply: m})
}
