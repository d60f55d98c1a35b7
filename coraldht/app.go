package coraldht

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
)

// Application messages: a request-reply RPC between the applications of two
// nodes (the Caddy module asks another proxy to purge an object with one),
// carried in the app message type with the same authentication, replay
// protection and addressing as every other datagram. To the node the
// payload is opaque bytes; applications tell their messages apart by kind,
// a number each application registers (see PROTOCOL.md for the kinds in
// use).
//
// Delivery is at least once: CallApp retransmits the request (with the same
// request ID) until a reply comes or its context ends. The responder runs
// the handler once per request ID while it remembers the request (for
// appReplyMemory after the reply), sends the same reply to every
// retransmission and ignores retransmissions while the handler runs.
// Handlers should still be idempotent: a retransmission that arrives after
// the responder forgot the request runs the handler again.

// AppHandler serves one kind of application message: from is the sender,
// authenticated by the network key; payload is the request's payload. The
// returned bytes (at most MaxAppPayload) are the reply's payload; an error
// reaches the caller as an *AppError carrying its text. ctx ends when the
// node closes; a handler bounds its own work otherwise, since the caller
// waits only as long as its own context allows.
type AppHandler func(ctx context.Context, from Contact, payload []byte) ([]byte, error)

// Errors of CallApp besides ErrTimeout, ErrClosed, ErrInvalid and context
// errors.
var (
	// ErrAppUnknown: the peer runs no handler for the kind (an application
	// the peer does not run, or one that has not registered yet).
	ErrAppUnknown = errors.New("coraldht: the peer has no handler for this app message kind")
	// ErrAppBusy: the peer is already running its most app requests at
	// once (maxAppRunning) and refused this one; try again later.
	ErrAppBusy = errors.New("coraldht: the peer is busy with other app requests")
)

// AppError is a handler's failure, as reported by the peer that ran it.
type AppError struct {
	Peer netip.AddrPort
	Text string // the handler's error text, cut to MaxAppPayload bytes
}

func (e *AppError) Error() string {
	return fmt.Sprintf("coraldht: app handler at %v failed: %s", e.Peer, e.Text)
}

const (
	// maxAppRunning bounds the app handlers running at once; a request
	// beyond it is answered busy at once.
	maxAppRunning = 16
	// maxAppCalls bounds the requests remembered (running and answered).
	maxAppCalls = 1024
	// appReplyMemory is how long a reply is kept for retransmissions of
	// its request.
	appReplyMemory = time.Minute
	// defaultAppTimeout bounds a CallApp whose context has no deadline.
	defaultAppTimeout = 10 * time.Second
)

// appTable is a node's application handlers and the app requests it has
// served recently.
type appTable struct {
	mu       sync.Mutex
	handlers map[uint8]AppHandler
	calls    map[appCallKey]*appCall
	running  int
}

type appCallKey struct {
	sender ID
	req    uint64
}

// appCall is a request being served (reply nil) or answered.
type appCall struct {
	reply *wire.Message
	at    time.Time // when answered
}

func newAppTable() *appTable {
	return &appTable{handlers: make(map[uint8]AppHandler), calls: make(map[appCallKey]*appCall)}
}

// pruneLocked forgets answers older than appReplyMemory and, if the table
// is still full, the oldest answers.
func (t *appTable) pruneLocked(now time.Time) {
	var oldest appCallKey
	var oldestAt time.Time
	for k, c := range t.calls {
		if c.reply == nil {
			continue
		}
		if now.Sub(c.at) > appReplyMemory {
			delete(t.calls, k)
			continue
		}
		if oldestAt.IsZero() || c.at.Before(oldestAt) {
			oldest, oldestAt = k, c.at
		}
	}
	if len(t.calls) >= maxAppCalls && !oldestAt.IsZero() {
		delete(t.calls, oldest)
	}
}

// HandleApp registers h for application messages of kind (1..255),
// replacing any handler registered before; a nil h removes it. Requests of
// a kind without a handler are answered so (ErrAppUnknown at the caller).
func (n *Node) HandleApp(kind uint8, h AppHandler) {
	if kind == 0 {
		panic("coraldht: app message kind 0 is reserved")
	}
	n.apps.mu.Lock()
	defer n.apps.mu.Unlock()
	if h == nil {
		delete(n.apps.handlers, kind)
		return
	}
	n.apps.handlers[kind] = h
}

// handleApp serves an authentic app request. It runs on the receive loop,
// so the handler runs in a goroutine of its own and the reply goes out
// when it returns.
func (n *Node) handleApp(m *wire.Message, from netip.AddrPort, size int, proven bool, now time.Time) {
	reply := func(r *wire.Message) { _ = n.reply(m, r, from, size, proven) }
	key := appCallKey{m.Sender.ID, m.ReqID}
	t := n.apps
	t.mu.Lock()
	if c, ok := t.calls[key]; ok {
		// A retransmission: the same reply again, or none yet while the
		// handler runs.
		var r wire.Message
		if c.reply != nil {
			r = *c.reply
		}
		t.mu.Unlock()
		if r.Type != 0 {
			reply(&r)
		}
		return
	}
	h := t.handlers[m.Kind]
	r := &wire.Message{Type: wire.App, Response: true, ReqID: m.ReqID}
	switch {
	case h == nil:
		r.AppResult = wire.AppUnknown
	case t.running >= maxAppRunning || n.closed.Load():
		r.AppResult = wire.AppBusy
	}
	if r.AppResult != wire.AppOK {
		t.mu.Unlock()
		n.counters.refused.Add(1)
		reply(r)
		return
	}
	if len(t.calls) >= maxAppCalls {
		t.pruneLocked(now)
	}
	c := &appCall{}
	t.calls[key] = c
	t.running++
	t.mu.Unlock()

	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		out, err := n.runApp(h, publicContact(m.Sender), m.Payload)
		switch {
		case err != nil:
			r.AppResult, r.Payload = wire.AppFailed, truncateText(err.Error(), MaxAppPayload)
		case len(out) > MaxAppPayload:
			r.AppResult, r.Payload = wire.AppFailed, []byte(fmt.Sprintf("reply of %d bytes exceeds MaxAppPayload (%d)", len(out), MaxAppPayload))
		default:
			r.Payload = out
		}
		t.mu.Lock()
		c.reply, c.at = r, time.Now()
		t.running--
		t.mu.Unlock()
		// send fills in the header of the message it is given: a copy,
		// since retransmissions send the stored reply too.
		rc := *r
		reply(&rc)
	}()
}

// runApp runs an app handler, turning a panic into an error: an
// application's bug must not take the node down with it.
func (n *Node) runApp(h AppHandler, from Contact, payload []byte) (out []byte, err error) {
	defer func() {
		if p := recover(); p != nil {
			n.log.Error("app handler panicked", "from", from.String(), "panic", fmt.Sprint(p))
			out, err = nil, fmt.Errorf("handler panicked: %v", p)
		}
	}()
	return h(n.ctx, from, payload)
}

func truncateText(s string, max int) []byte {
	if len(s) > max {
		s = s[:max]
	}
	return []byte(s)
}

// CallApp sends an application message of kind (1..255) with payload (at
// most MaxAppPayload bytes) to the node at addr and returns the payload of
// its handler's reply. The request is retransmitted, with growing
// intervals starting at the peer's RPC timeout, until a reply arrives or
// ctx ends; without a deadline in ctx, 10 s. Errors: ErrAppUnknown and
// ErrAppBusy from the peer, *AppError when its handler failed, ErrTimeout
// (wrapped) when no reply came by the deadline (a dead peer, or one too
// old to know app messages: it drops them), ErrInvalid, ErrClosed, or the
// context's error when it was cancelled.
func (n *Node) CallApp(ctx context.Context, addr netip.AddrPort, kind uint8, payload []byte) ([]byte, error) {
	addr = netip.AddrPortFrom(addr.Addr().Unmap(), addr.Port())
	if err := n.checkAppCall(addr, kind, payload); err != nil {
		return nil, err
	}
	ctx, cancel := n.opContext(ctx)
	defer cancel()
	if _, ok := ctx.Deadline(); !ok {
		var cancelT context.CancelFunc
		ctx, cancelT = context.WithTimeout(ctx, defaultAppTimeout)
		defer cancelT()
	}
	c := Contact{ID: NodeIDFor(addr), Addr: addr}
	events := make(chan rpcEvent, 1)
	pc := &pendingCall{to: c, typ: wire.App, events: events, sent: time.Now()}
	n.mu.Lock()
	for {
		pc.id = n.rng.Uint64()
		if _, dup := n.pending[pc.id]; !dup && pc.id != 0 {
			break
		}
	}
	sends := 0
	send := func() error {
		sends++
		req := &wire.Message{Type: wire.App, ReqID: pc.id, Kind: kind, Payload: payload}
		return n.send(req, c)
	}
	// After a truncated reply (this node's address was not yet proven
	// there), at once with the cookie it brought.
	pc.resend = func() {
		n.wg.Add(1)
		go func() {
			defer n.wg.Done()
			_ = send()
		}()
	}
	n.pending[pc.id] = pc
	n.mu.Unlock()
	defer n.takePending(pc)

	_, interval := n.peers.timeouts(addr, false)
	if err := send(); err != nil {
		return nil, fmt.Errorf("coraldht: send to %v: %w", addr, err)
	}
	timer := time.NewTimer(interval)
	defer timer.Stop()
	for {
		select {
		case ev := <-events:
			if ev.err != nil {
				return nil, ev.err
			}
			return appReply(ev.reply, kind, addr)
		case <-timer.C:
			// Lost on the way, or the handler is still running (then the
			// peer ignores the copy): send again, less and less often.
			_ = send()
			interval = min(2*interval, 2*n.cfg.MaxRPCTimeout)
			timer.Reset(interval)
		case <-ctx.Done():
			if errors.Is(context.Cause(ctx), ErrClosed) {
				return nil, ErrClosed
			}
			if errors.Is(ctx.Err(), context.DeadlineExceeded) {
				// Counted, but not held against the peer in the routing
				// tables: a handler may simply take longer than the
				// caller waits, and the peer answers other RPCs meanwhile.
				n.counters.timeouts.Add(1)
				return nil, fmt.Errorf("%w: no reply to app message from %v in %v (%d sends)", ErrTimeout, addr,
					time.Since(pc.sent).Round(time.Millisecond), sends)
			}
			return nil, ctx.Err()
		}
	}
}

// checkAppCall refuses what CallApp must not send.
func (n *Node) checkAppCall(addr netip.AddrPort, kind uint8, payload []byte) error {
	switch {
	case n.closed.Load():
		return ErrClosed
	case kind == 0:
		return fmt.Errorf("%w: app message kind 0 is reserved", ErrInvalid)
	case len(payload) > MaxAppPayload:
		return fmt.Errorf("%w: app payload of %d bytes exceeds %d", ErrInvalid, len(payload), MaxAppPayload)
	case addr == n.self.Addr:
		return fmt.Errorf("%w: app message to this node itself", ErrInvalid)
	}
	if err := wire.CheckAddr(addr); err != nil {
		return fmt.Errorf("%w: app message to %v: %v", ErrInvalid, addr, err)
	}
	return nil
}

// appReply is CallApp's result for the reply m to a message of kind sent
// to addr.
func appReply(m *wire.Message, kind uint8, addr netip.AddrPort) ([]byte, error) {
	switch m.AppResult {
	case wire.AppOK:
		return m.Payload, nil
	case wire.AppUnknown:
		return nil, fmt.Errorf("%w (kind %d at %v)", ErrAppUnknown, kind, addr)
	case wire.AppBusy:
		return nil, fmt.Errorf("%w (%v)", ErrAppBusy, addr)
	default:
		return nil, &AppError{Peer: addr, Text: string(m.Payload)}
	}
}
