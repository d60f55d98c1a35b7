package coraldht

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	mrand "math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"
)

// Node is one Coral node: a member of one cluster per level, with a routing
// table and storage for each. Create it with NewNode; it serves RPCs until
// Close. All methods are safe for concurrent use.
type Node struct {
	cfg  Config
	tr   Transport
	key  *Key
	self Contact
	log  *slog.Logger

	levels []*level
	store  *store
	load   *loadTracker
	peers  *peerTable
	replay *replayFilter
	apps   *appTable // application message handlers (app.go)

	mu      sync.Mutex
	rng     *mrand.Rand
	pending map[uint64]*pendingCall

	lastStamp atomic.Int64
	counters  *nodeCounters

	// testHookAfterForward, when set by a test, runs between the forward
	// and reverse phases of a put.
	testHookAfterForward func([]levelStack)

	tracer atomic.Pointer[requestTracer] // TraceRequests (trace.go)

	joined     chan struct{} // closed when Bootstrap first succeeds
	joinOnce   sync.Once
	bootstraps []netip.AddrPort // guarded by mu; traceroute aims at them

	ctx    context.Context // cancelled by Close
	cancel context.CancelFunc
	wg     sync.WaitGroup
	closed atomic.Bool
}

// level is the node's membership at one level of the hierarchy.
type level struct {
	index     int
	threshold time.Duration // 0 at level 0: unbounded

	pinned bool // fixed by Config.Pins: never re-clustered

	mu         sync.Mutex
	cluster    ClusterInfo // LogSize refreshed by updateSizes
	changes    int         // cluster changes so far
	lastChange time.Time
	left       map[ID]leftCluster // clusters left recently
	lastSplit  time.Time          // when the node last split away

	rt *routingTable
}

func (lv *level) info() ClusterInfo {
	lv.mu.Lock()
	defer lv.mu.Unlock()
	return lv.cluster
}

// NewNode starts a node on tr. The node owns tr and closes it in Close.
func NewNode(cfg Config, tr Transport) (*Node, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	local := tr.LocalAddr()
	local = netip.AddrPortFrom(local.Addr().Unmap(), local.Port())
	adv := cfg.Advertise
	if !adv.IsValid() {
		adv = local
	}
	adv = netip.AddrPortFrom(adv.Addr().Unmap(), adv.Port())
	if err := checkContactAddr(adv); err != nil {
		return nil, fmt.Errorf("coraldht: advertised address: %v (set Config.Advertise)", err)
	}
	key := cfg.Key
	if key == nil {
		if !local.Addr().IsLoopback() || !adv.Addr().IsLoopback() {
			return nil, fmt.Errorf("%w: refusing to listen on %v without one, since anyone could then join, read and corrupt this network; %s", ErrNoKey, local, KeyHelp)
		}
		key = insecureLoopbackKey
	}
	seed := cfg.Seed
	if seed == 0 {
		var b [8]byte
		_, _ = rand.Read(b[:])
		seed = binary.LittleEndian.Uint64(b[:])
	}
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	now := time.Now()
	n := &Node{
		cfg:      cfg,
		tr:       tr,
		key:      key,
		self:     Contact{ID: NodeIDFor(adv), Addr: adv, Services: cfg.Services},
		store:    newStore(cfg.FullValues, cfg.MaxValues, cfg.MaxKeys),
		load:     newLoadTracker(cfg.Leak, cfg.MaxTrackedKeys),
		peers:    newPeerTable(8192, cfg.MinRPCTimeout, cfg.MaxRPCTimeout, cfg.InitialRPCTimeout),
		replay:   newReplayFilter(int64(cfg.MaxClockSkew), int64(cfg.ReorderWindow), now.UnixNano()),
		apps:     newAppTable(),
		rng:      mrand.New(mrand.NewPCG(seed, seed>>1^0x5851f42d4c957f2d)),
		pending:  make(map[uint64]*pendingCall),
		counters: newNodeCounters(),
	}
	n.log = log.With("node", n.self.String())
	for i := 0; i <= len(cfg.Levels); i++ {
		lv := &level{index: i, rt: newRoutingTable(n.self.ID, cfg.BucketSize, cfg.MaxFailures, cfg.QuestionableAfter, now)}
		lv.cluster = ClusterInfo{Level: i, Created: now.Truncate(time.Second)}
		if i > 0 {
			lv.threshold = cfg.Levels[i-1]
			if name, ok := cfg.Pins[i]; ok {
				lv.pinned = true
				lv.cluster.ID, lv.cluster.Created = ClusterIDFor(name), pinnedCreated
			} else {
				// Until clustering places it, a node is a singleton at
				// every level above 0, under a random cluster ID.
				lv.cluster.ID = n.randomID()
			}
		}
		n.levels = append(n.levels, lv)
	}
	n.joined = make(chan struct{})
	n.ctx, n.cancel = context.WithCancel(context.Background())
	n.wg.Add(3)
	go n.receiveLoop()
	go n.maintenanceLoop()
	go n.clusterLoop()
	return n, nil
}

// ID returns the node's ID.
func (n *Node) ID() ID { return n.self.ID }

// Addr returns the address the node advertises.
func (n *Node) Addr() netip.AddrPort { return n.self.Addr }

// Contact returns the node's own contact.
func (n *Node) Contact() Contact { return n.self }

// Close stops the node: operations in progress return ErrClosed, the
// transport is closed and every goroutine has exited when Close returns.
func (n *Node) Close() error {
	if !n.closed.CompareAndSwap(false, true) {
		return nil
	}
	n.cancel()
	err := n.tr.Close()
	n.mu.Lock()
	for id, pc := range n.pending {
		pc.stopTimers()
		delete(n.pending, id)
	}
	n.mu.Unlock()
	n.wg.Wait()
	return err
}

func (n *Node) randomID() ID {
	n.mu.Lock()
	defer n.mu.Unlock()
	var id ID
	for i := 0; i < IDLen; i += 8 {
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], n.rng.Uint64())
		copy(id[i:], b[:])
	}
	return id
}

// stamp returns a timestamp for an outgoing datagram: the current time in
// nanoseconds, bumped if needed so no two datagrams from this node share one
// (the replay filter relies on it).
func (n *Node) stamp() int64 {
	now := time.Now().UnixNano()
	for {
		last := n.lastStamp.Load()
		ts := max(now, last+1)
		if n.lastStamp.CompareAndSwap(last, ts) {
			return ts
		}
	}
}

func (n *Node) clusterInfos() []ClusterInfo {
	out := make([]ClusterInfo, len(n.levels))
	for i, lv := range n.levels {
		out[i] = lv.info()
	}
	return out
}

// updateSizes refreshes the size estimate each level advertises. It runs
// from maintenance rather than per datagram, since it scans the tables.
func (n *Node) updateSizes() {
	for _, lv := range n.levels {
		est := logSizeEstimate(lv.rt, n.self.ID, n.cfg.BucketSize)
		lv.mu.Lock()
		lv.cluster.LogSize = est
		lv.mu.Unlock()
	}
}

// send fills in the header of m and transmits it to addr, addressed to the
// node with ID toID.
func (n *Node) send(m *message, to netip.AddrPort, toID ID) error {
	m.Sender = n.self
	m.Recipient = toID
	m.Clusters = n.clusterInfos()
	m.Timestamp = n.stamp()
	buf := make([]byte, 0, MaxDatagram)
	b, err := encodeMessage(buf, m)
	if err != nil {
		return err
	}
	b = n.key.seal(b)
	if m.Response {
		n.counters.repOut[m.Type].Add(1)
	} else {
		n.counters.reqOut[m.Type].Add(1)
	}
	return n.tr.WriteTo(b, to)
}

func (n *Node) receiveLoop() {
	defer n.wg.Done()
	buf := make([]byte, MaxDatagram+1)
	for {
		sz, from, err := n.tr.ReadFrom(buf)
		if err != nil {
			if n.closed.Load() || errors.Is(err, ErrTransportClosed) {
				return
			}
			n.log.Debug("read", "err", err)
			continue
		}
		n.handleDatagram(buf[:sz], from)
	}
}

func (n *Node) drop(r dropReason, from netip.AddrPort) {
	n.counters.drops[r].Add(1)
	n.log.Debug("drop", "reason", r.String(), "from", from)
}

// handleDatagram authenticates, parses and dispatches one datagram. A
// datagram that fails any check is counted and dropped with no reply, so a
// forged or replayed packet can never make this node send anything.
func (n *Node) handleDatagram(pkt []byte, from netip.AddrPort) {
	if len(pkt) > MaxDatagram {
		n.drop(dropOversize, from)
		return
	}
	body, ok := n.key.open(pkt)
	if !ok {
		n.drop(dropBadAuth, from)
		return
	}
	m, err := decodeMessage(body)
	if err != nil {
		n.drop(dropMalformed, from)
		return
	}
	if m.Sender.ID == n.self.ID {
		n.drop(dropSelf, from)
		return
	}
	if m.Recipient != n.self.ID {
		n.drop(dropMisdirected, from)
		return
	}
	now := time.Now()
	if r := n.replay.check(m.Sender.ID, m.Timestamp, now.UnixNano()); r != dropNone {
		n.drop(r, from)
		return
	}
	n.learn(m.Sender, m.Clusters, now)
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
// is now clustering evidence.
func (n *Node) learn(c Contact, clusters []ClusterInfo, now time.Time) {
	for _, lv := range n.levels {
		if !n.sharesCluster(clusters, lv.index) {
			lv.rt.remove(c.ID)
			continue
		}
		if stale := lv.rt.heard(c, now); stale != nil {
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
		if _, err := n.call(n.ctx, c, &message{Type: msgPing}); errors.Is(err, ErrTimeout) {
			// A quiet contact that fails its check gives its slot to the
			// newcomer waiting in the replacement cache.
			lv.rt.evict(c.ID)
		}
	}()
}

func (n *Node) handleRequest(m *message, from netip.AddrPort, now time.Time) {
	n.counters.reqIn[m.Type].Add(1)
	if m.Type == msgApp {
		// Answered when the application's handler returns (app.go).
		n.handleApp(m, from, now)
		return
	}
	r := &message{Type: m.Type, Response: true, ReqID: m.ReqID}
	switch m.Type {
	case msgPing:
	case msgMembers:
		// Any node may sample a cluster it considers joining.
		if int(m.Level) >= len(n.levels) {
			r.Status = statusBadLevel
		}
	default:
		r.Status = n.checkLevel(m)
	}
	if r.Status != statusOK {
		n.counters.refused.Add(1)
		_ = n.send(r, from, m.Sender.ID)
		return
	}
	lk := levelKey{level: m.Level, key: m.Key}
	switch m.Type {
	case msgPing:
	case msgFindNode, msgMembers:
		r.Nodes = n.levels[m.Level].rt.closestAnswering(m.Target, n.cfg.BucketSize, m.Sender.ID)
	case msgGet:
		n.load.request(lk, kindGet, false, now)
		r.Values = n.store.get(lk, now)
		if len(r.Values) == 0 {
			r.Nodes = n.replyContacts(int(m.Level), m.Target, m.Key, m.Sender.ID)
		}
	case msgPutProbe:
		ttl := time.Duration(m.TTL) * time.Millisecond
		if ttl <= 0 || ttl > n.cfg.MaxTTL {
			r.Status = statusInvalid
			break
		}
		r.Loaded = n.load.request(lk, kindPutProbe, false, now)
		st := n.store.status(lk, now)
		r.Count = uint8(min(st.count, 255))
		r.MinRemaining = ttlMillis(st.minRemaining)
		if m.Flags&reqFlagWantValues != 0 {
			r.Values = n.store.get(lk, now)
		}
		r.Nodes = n.replyContacts(int(m.Level), m.Target, m.Key, m.Sender.ID)
	case msgStore:
		ttl := time.Duration(m.TTL) * time.Millisecond
		if ttl <= 0 || ttl > n.cfg.MaxTTL || len(m.Value) > n.cfg.MaxValueSize {
			r.Status = statusInvalid
			break
		}
		n.load.request(lk, kindStore, false, now)
		result, after, before := n.storeLocal(lk, m.Value, ttl, now)
		r.Result = result
		r.Count = uint8(min(after.count, 255))
		if m.Flags&reqFlagWantValues != 0 {
			r.Values = before
		}
	}
	if r.Status != statusOK {
		n.counters.refused.Add(1)
	} else if m.Type == msgGet || m.Type == msgPutProbe || m.Type == msgStore {
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
func (n *Node) storeLocal(lk levelKey, data []byte, ttl time.Duration, now time.Time) (uint8, keyStatus, []wireValue) {
	if n.cfg.PlainDHT {
		return n.store.putForced(lk, data, ttl, now)
	}
	return n.store.put(lk, data, ttl, now)
}

func (n *Node) checkLevel(m *message) uint8 {
	if int(m.Level) >= len(n.levels) {
		return statusBadLevel
	}
	if !n.sharesCluster(m.Clusters, int(m.Level)) {
		return statusNotMember
	}
	return statusOK
}

// pendingCall is an outstanding request.
type pendingCall struct {
	id     uint64
	to     Contact
	typ    msgType
	sent   time.Time
	events chan<- rpcEvent
	tag    any

	soft, hard *time.Timer
}

func (pc *pendingCall) stopTimers() {
	if pc.soft != nil {
		pc.soft.Stop()
	}
	if pc.hard != nil {
		pc.hard.Stop()
	}
}

// rpcEvent reports progress of a call: soft (the peer is slower than its
// timeout; the call stays open), a reply, or a final error.
type rpcEvent struct {
	call  *pendingCall
	reply *message
	err   error
	soft  bool
}

func (n *Node) post(pc *pendingCall, ev rpcEvent) {
	ev.call = pc
	select {
	case pc.events <- ev:
	default:
		// Event channels are sized for every event their owner can
		// receive; a full one means the owner has gone.
	}
}

// startCall sends req to c and reports on events: a soft event when the
// peer is slower than expected (lookups then hedge), then exactly one final
// event (reply or error) unless the call is cancelled first. See
// peerTable.timeouts for the two deadlines and for quick calls.
func (n *Node) startCall(c Contact, req *message, events chan<- rpcEvent, tag any, quick bool) *pendingCall {
	soft, hard := n.peers.timeouts(c.Addr, quick)
	pc := &pendingCall{to: c, typ: req.Type, events: events, tag: tag, sent: time.Now()}
	n.mu.Lock()
	if n.closed.Load() {
		n.mu.Unlock()
		n.post(pc, rpcEvent{err: ErrClosed})
		return pc
	}
	for {
		pc.id = n.rng.Uint64()
		if _, dup := n.pending[pc.id]; !dup && pc.id != 0 {
			break
		}
	}
	n.pending[pc.id] = pc
	if soft < hard {
		pc.soft = time.AfterFunc(soft, func() { n.post(pc, rpcEvent{soft: true}) })
	}
	pc.hard = time.AfterFunc(hard, func() { n.expireCall(pc) })
	n.mu.Unlock()

	req.ReqID = pc.id
	req.Response = false
	if err := n.send(req, c.Addr, c.ID); err != nil {
		if n.takePending(pc) {
			pc.stopTimers()
			n.post(pc, rpcEvent{err: fmt.Errorf("coraldht: send to %v: %w", c.Addr, err)})
		}
	}
	return pc
}

// takePending removes pc from the pending table; false if it was gone.
func (n *Node) takePending(pc *pendingCall) bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.pending[pc.id] != pc {
		return false
	}
	delete(n.pending, pc.id)
	return true
}

func (n *Node) expireCall(pc *pendingCall) {
	if !n.takePending(pc) {
		return
	}
	if pc.soft != nil {
		pc.soft.Stop()
	}
	n.counters.timeouts.Add(1)
	n.peers.failed(pc.to.Addr, time.Now())
	for _, lv := range n.levels {
		lv.rt.failed(pc.to.ID)
	}
	n.post(pc, rpcEvent{err: ErrTimeout})
}

// cancelCall abandons pc without an event.
func (n *Node) cancelCall(pc *pendingCall) {
	if n.takePending(pc) {
		pc.stopTimers()
	}
}

func (n *Node) handleResponse(m *message, from netip.AddrPort, now time.Time) {
	n.mu.Lock()
	pc := n.pending[m.ReqID]
	if pc == nil || pc.typ != m.Type || pc.to.ID != m.Sender.ID {
		n.mu.Unlock()
		n.drop(dropUnsolicited, from)
		return
	}
	delete(n.pending, m.ReqID)
	n.mu.Unlock()
	pc.stopTimers()
	n.counters.repIn[m.Type].Add(1)
	if m.Type != msgApp {
		// An app reply's delay includes the handler's work (and
		// retransmissions): no RTT sample.
		n.peers.observe(pc.to.Addr, now.Sub(pc.sent), now)
	}
	n.post(pc, rpcEvent{reply: m})
}

// call is a blocking RPC: it returns the reply or the first error.
func (n *Node) call(ctx context.Context, c Contact, req *message) (*message, error) {
	events := make(chan rpcEvent, 2)
	pc := n.startCall(c, req, events, nil, false)
	for {
		select {
		case ev := <-events:
			if ev.soft {
				continue
			}
			return ev.reply, ev.err
		case <-ctx.Done():
			n.cancelCall(pc)
			return nil, ctx.Err()
		}
	}
}

// Ping checks that the node at addr is alive and shares this network's key.
// On success the node enters the routing tables and its RTT is returned.
func (n *Node) Ping(ctx context.Context, addr netip.AddrPort) (time.Duration, error) {
	if n.closed.Load() {
		return 0, ErrClosed
	}
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	if err := checkContactAddr(addr); err != nil {
		return 0, fmt.Errorf("%w: ping %v: %v", ErrInvalid, addr, err)
	}
	start := time.Now()
	if _, err := n.call(ctx, Contact{ID: NodeIDFor(addr), Addr: addr}, &message{Type: msgPing}); err != nil {
		return 0, err
	}
	return time.Since(start), nil
}

// PingNode pings addr and returns the node there as it announced itself in
// its reply (its ID and services), heard now, with the smallest RTT this
// node has measured to it.
func (n *Node) PingNode(ctx context.Context, addr netip.AddrPort) (NodeInfo, error) {
	if n.closed.Load() {
		return NodeInfo{}, ErrClosed
	}
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	if err := checkContactAddr(addr); err != nil {
		return NodeInfo{}, fmt.Errorf("%w: ping %v: %v", ErrInvalid, addr, err)
	}
	start := time.Now()
	reply, err := n.call(ctx, Contact{ID: NodeIDFor(addr), Addr: addr}, &message{Type: msgPing})
	if err != nil {
		return NodeInfo{}, err
	}
	rtt := time.Since(start)
	ni := n.nodeInfo(Contact{ID: reply.Sender.ID, Addr: addr, Services: reply.Sender.Services}, time.Now())
	if ni.RTT == 0 || rtt < ni.RTT {
		ni.RTT = rtt
	}
	return ni, nil
}

func (n *Node) maintenanceLoop() {
	defer n.wg.Done()
	interval := min(n.cfg.RefreshInterval/4, 30*time.Second)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-n.ctx.Done():
			return
		case <-t.C:
		}
		now := time.Now()
		n.store.expire(now)
		n.load.prune(now.Add(-2 * time.Minute))
		n.replay.prune(now.UnixNano())
		n.peers.prune(now.Add(-time.Hour))
		n.refreshBuckets(now)
		n.updateSizes()
	}
}

// refreshBuckets looks up a random ID in every bucket range no lookup has
// touched for RefreshInterval, so tables keep live contacts everywhere.
func (n *Node) refreshBuckets(now time.Time) {
	for _, lv := range n.levels {
		for _, i := range lv.rt.staleBuckets(now, n.cfg.RefreshInterval) {
			if n.ctx.Err() != nil {
				return
			}
			n.mu.Lock()
			target := randomIDWithPrefix(n.self.ID, i, n.rng)
			n.mu.Unlock()
			lv.rt.touch(target, now)
			ctx, cancel := context.WithTimeout(n.ctx, n.cfg.LookupTimeout)
			n.findNode(ctx, lv.index, target)
			cancel()
		}
	}
}
