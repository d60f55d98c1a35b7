package coraldht

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
)

// The RPC table: the calls this node has in flight, keyed by request ID in
// Node.pending, each with a soft timeout (hedge) and a hard one (give up).
// Lookups drive many calls at once through startCall and its events; single
// calls go through call.

// send fills in the header (and, for a peer that reads them, the
// extensions) of m and transmits it to the node to.
func (n *Node) send(m *wire.Message, to Contact) error {
	m.Load = n.published.get().wire()
	b, err := n.encode(m, to, true)
	if err != nil {
		return err
	}
	return n.transmit(m, b, to.Addr)
}

// encode fills in m's header and extensions for the node to and returns
// the sealed datagram. A truncated reply keeps its empty cluster list.
// In identity mode the datagram carries the node's identity, if identity
// (a reply to a request that carried none goes without: its sender does
// not check identities, and the reply must fit in the request's size).
func (n *Node) encode(m *wire.Message, to Contact, identity bool) ([]byte, error) {
	m.Sender = n.self
	m.Recipient = to.ID
	if !m.Truncated {
		m.Clusters = n.clusterInfos()
	}
	m.Timestamp = n.stamp()
	ext, grant := n.peers.sendState(to.Addr)
	if ext || to.Services.Has(wire.CapExtensions) || n.identity != nil {
		// Extensions only to a peer known to read them: nodes released
		// before them drop a datagram with bytes after its body.
		now := time.Now()
		m.Ext = true
		m.Grant = n.cookies.grant(to.Addr, now)
		if !m.Response {
			m.Echo = grant
			if grant == 0 && largeReply(m) && n.pads.allow(to.Addr, now) {
				m.Pad = 1 // sized below, once the rest is known
			}
		}
	}
	if !m.Ext || m.Truncated {
		m.Load = wire.Load{} // only to a peer that reads extensions; not in a truncated reply
	}
	sign := n.identity != nil && identity
	if sign {
		m.Identity = n.identity.Certificate.Raw
	}
	buf := datagrams.Get().(*[]byte)
	b, err := wire.Encode((*buf)[:0], m)
	if err == nil && m.Pad > 0 {
		m.Pad = max(1, MaxDatagram-tagLen-len(b)+1)
		b, err = wire.Encode(b[:0], m)
	}
	if err == nil && sign {
		err = n.identity.sign(b)
	}
	if err != nil {
		datagrams.Put(buf)
		return nil, err
	}
	return n.keys.seal(b), nil
}

// datagrams are the buffers encode fills: release hands one back once
// the transport has taken the datagram.
var datagrams = sync.Pool{New: func() any {
	b := make([]byte, 0, MaxDatagram)
	return &b
}}

func release(b []byte) {
	if cap(b) == MaxDatagram {
		b = b[:0]
		datagrams.Put(&b)
	}
}

// largeReply reports whether a request's reply may be larger than the
// request: the first such request to a peer without a cookie is padded
// (firstContactPads) so that the peer may answer in full at once.
func largeReply(m *wire.Message) bool {
	switch m.Type {
	case wire.FindNode, wire.Members, wire.Get, wire.PutProbe, wire.App:
		return true
	case wire.Store:
		return m.Flags&wire.FlagWantValues != 0
	}
	return false
}

// transmit sends the datagram b, which encodes m, to addr, and releases
// b.
func (n *Node) transmit(m *wire.Message, b []byte, addr netip.AddrPort) error {
	if m.Response {
		n.counters.repOut[m.Type].Add(1)
	} else {
		n.counters.reqOut[m.Type].Add(1)
	}
	err := n.tr.WriteTo(b, addr)
	release(b)
	return err
}

// pendingCall is an outstanding request.
type pendingCall struct {
	id     uint64
	to     Contact
	typ    wire.Type
	sent   time.Time
	events chan<- rpcEvent
	tag    any
	// requester: the peer sent this node a request first (a verification
	// ping), so its reply is heard as that request (routing.go, heardAs).
	requester bool
	// resend sends the request again after a truncated reply (its source
	// was unproven; the reply brought a cookie); resent counts the times.
	resend func()
	resent int

	soft, hard *time.Timer
}

// maxResends bounds the times one call is sent again after truncated
// replies: once is what a first contact needs, twice covers a secret that
// changed in between.
const maxResends = 2

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
	reply *wire.Message
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
func (n *Node) startCall(c Contact, req *wire.Message, events chan<- rpcEvent, tag any, quick bool) *pendingCall {
	return n.startCallAs(c, req, events, tag, quick, false)
}

// startCallAs is startCall; requester as in pendingCall.
func (n *Node) startCallAs(c Contact, req *wire.Message, events chan<- rpcEvent, tag any, quick, requester bool) *pendingCall {
	soft, hard := n.peers.timeouts(c.Addr, quick)
	pc := &pendingCall{to: c, typ: req.Type, events: events, tag: tag, sent: time.Now(), requester: requester}
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
	arm := func() {
		if soft < hard {
			pc.soft = time.AfterFunc(soft, func() { n.post(pc, rpcEvent{soft: true}) })
		}
		pc.hard = time.AfterFunc(hard, func() { n.expireCall(pc) })
	}
	arm()
	req.ReqID = pc.id
	req.Response = false
	transmit := func() {
		// A copy: send fills in the header and extensions anew each time.
		m := *req
		if err := n.send(&m, c); err != nil {
			if n.takePending(pc) {
				pc.stopTimers()
				n.post(pc, rpcEvent{err: fmt.Errorf("coraldht: send to %v: %w", c.Addr, err)})
			}
		}
	}
	pc.resend = func() {
		// Under n.mu (handleResponse): the timers start over with the
		// request, which now echoes the cookie the reply brought.
		pc.stopTimers()
		pc.sent = time.Now()
		arm()
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			transmit()
		}()
	}
	n.mu.Unlock()
	transmit()
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
	if !pc.requester {
		// Not for a verification ping: a claimed address that does not
		// answer takes no peer record (the verifier's holdoff remembers
		// it), or claims could fill the table.
		n.peers.failed(pc.to.Addr, time.Now())
		n.verifying.forgetAnswered(pc.to.Addr, time.Now())
	}
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

// call is a blocking RPC: it returns the reply or the first error.
func (n *Node) call(ctx context.Context, c Contact, req *wire.Message) (*wire.Message, error) {
	return n.callAs(ctx, c, req, false)
}

// Ping checks that the node at addr is alive and shares this network's key.
// On success the node enters the routing tables and its RTT is returned.
func (n *Node) Ping(ctx context.Context, addr netip.AddrPort) (time.Duration, error) {
	if n.closed.Load() {
		return 0, ErrClosed
	}
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	if err := wire.CheckAddr(addr); err != nil {
		return 0, fmt.Errorf("%w: ping %v: %v", ErrInvalid, addr, err)
	}
	start := time.Now()
	if _, err := n.call(ctx, Contact{ID: NodeIDFor(addr), Addr: addr}, &wire.Message{Type: wire.Ping}); err != nil {
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
	if err := wire.CheckAddr(addr); err != nil {
		return NodeInfo{}, fmt.Errorf("%w: ping %v: %v", ErrInvalid, addr, err)
	}
	start := time.Now()
	reply, err := n.call(ctx, Contact{ID: NodeIDFor(addr), Addr: addr}, &wire.Message{Type: wire.Ping})
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
