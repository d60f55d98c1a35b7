package icmpprobe

import (
	"context"
	crand "crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
	"golang.org/x/net/ipv6"
)

// defaultTimeout bounds a probe whose context has no deadline, so that a
// lost echo can't keep the caller waiting forever.
const defaultTimeout = 5 * time.Second

// Prober measures RTT with ICMP echo. It prefers unprivileged ICMP
// datagram sockets (Linux net.ipv4.ping_group_range) and falls back to raw
// sockets (CAP_NET_RAW).
//
// It holds one socket per address family, opened up front, each with a
// single reader goroutine that hands replies to the probes waiting for
// them. A reply goes to a probe only when its sequence number, echo
// identifier (raw sockets), source address and payload (a per-socket random
// token and a per-probe counter) all match, so concurrent probes, to the
// same host or different ones, never take each other's replies, and a reply
// that comes in after its probe gave up is dropped. A Prober is safe
// for concurrent use.
type Prober struct {
	v4, v6 *socket // nil: no socket for that family

	closeOnce sync.Once
	closeErr  error
}

// NewProber opens the ICMP sockets, for each family an unprivileged
// datagram socket if allowed and a raw socket otherwise. A family for which
// neither can be opened is left out (probes to it fail with an error
// wrapping ErrUnavailable); when neither family has a socket the error
// wraps ErrUnavailable and the reasons.
func NewProber() (*Prober, error) {
	return newKinds(kindDatagram, kindRaw)
}

// newKinds is NewProber trying only the given kinds of
// socket, in order.
func newKinds(kinds ...sockKind) (*Prober, error) {
	p := &Prober{}
	var errs []error
	var err4, err6 error
	p.v4, err4 = openSocket(false, kinds)
	if err4 != nil {
		errs = append(errs, fmt.Errorf("IPv4: %w", err4))
	}
	p.v6, err6 = openSocket(true, kinds)
	if err6 != nil {
		errs = append(errs, fmt.Errorf("IPv6: %w", err6))
	}
	if p.v4 == nil && p.v6 == nil {
		return nil, fmt.Errorf("%w: %w", ErrUnavailable, errors.Join(errs...))
	}
	return p, nil
}

// String describes the sockets in use, e.g. "icmp(ipv4=datagram ipv6=raw)",
// for logging at startup.
func (p *Prober) String() string {
	kind := func(c *socket) string {
		if c == nil {
			return "none"
		}
		return c.kind.String()
	}
	return fmt.Sprintf("icmp(ipv4=%s ipv6=%s)", kind(p.v4), kind(p.v6))
}

// Probe sends one ICMP echo request to addr and returns the time until the
// matching reply arrived.
//
// It gives up when ctx is done, with an error wrapping ctx.Err()
// (context.DeadlineExceeded on timeout); a ctx without a deadline gets one
// defaultTimeout away. It fails at once, with an error wrapping
// ErrUnavailable, when there is no socket for addr's family, and with
// one wrapping net.ErrClosed after Close. IPv4-mapped IPv6 addresses are
// probed as IPv4; a zone is used for the destination (link-local IPv6).
func (p *Prober) Probe(ctx context.Context, addr netip.Addr) (time.Duration, error) {
	addr = addr.Unmap()
	if !addr.IsValid() {
		return 0, errors.New("icmp probe: invalid address")
	}
	c := p.v4
	if addr.Is6() {
		c = p.v6
	}
	if c == nil {
		family := "IPv4"
		if addr.Is6() {
			family = "IPv6"
		}
		return 0, fmt.Errorf("icmp probe %v: %w: no %s socket", addr, ErrUnavailable, family)
	}
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, defaultTimeout)
		defer cancel()
	}
	return c.probe(ctx, addr)
}

// Close closes the sockets and waits for their readers to stop; probes in
// flight fail with an error wrapping net.ErrClosed. Closing twice is
// harmless.
func (p *Prober) Close() error {
	p.closeOnce.Do(func() {
		var errs []error
		for _, c := range []*socket{p.v4, p.v6} {
			if c != nil {
				errs = append(errs, c.close())
			}
		}
		p.closeErr = errors.Join(errs...)
	})
	return p.closeErr
}

// socket is the socket of one family and the probes waiting on it.
type socket struct {
	conn    *icmp.PacketConn
	kind    sockKind
	ipv6    bool
	reqType icmp.Type
	repType icmp.Type
	proto   int     // protocol number for icmp.ParseMessage
	id      uint16  // echo identifier (raw sockets; the kernel sets it otherwise)
	token   [8]byte // first half of every payload we send

	mu      sync.Mutex
	seq     uint16             // last sequence number handed out
	gen     uint64             // probes started (second half of the payload)
	waiters map[uint16]*waiter // by sequence number
	closed  bool

	done chan struct{} // closed when the reader has stopped
}

// waiter is a probe waiting for its reply.
type waiter struct {
	from  netip.Addr     // the reply's expected source, without zone
	gen   uint64         // the probe's counter, echoed in the payload
	reply chan time.Time // receives the reply's arrival time; buffered
}

const payloadLen = 16 // token (8 bytes) and probe counter (8 bytes)

// openSocket opens the first kind of socket in kinds that can be opened
// for the family, and starts its reader.
func openSocket(v6 bool, kinds []sockKind) (*socket, error) {
	pc, kind, err := listen(v6, kinds...)
	if err != nil {
		return nil, err
	}
	c := &socket{
		conn:    pc,
		kind:    kind,
		ipv6:    v6,
		id:      uint16(rand.Uint32()),
		waiters: make(map[uint16]*waiter),
		done:    make(chan struct{}),
	}
	if v6 {
		c.reqType, c.repType, c.proto = ipv6.ICMPTypeEchoRequest, ipv6.ICMPTypeEchoReply, protoICMP6
	} else {
		c.reqType, c.repType, c.proto = ipv4.ICMPTypeEcho, ipv4.ICMPTypeEchoReply, protoICMP4
	}
	if _, err := crand.Read(c.token[:]); err != nil {
		pc.Close()
		return nil, err
	}
	c.seq = uint16(rand.Uint32())
	if kind == kindRaw {
		c.filterEchoReplies()
	}
	go c.read()
	return c, nil
}

// filterEchoReplies asks the kernel to pass only echo replies to a raw
// socket, which otherwise gets a copy of every ICMP message (including our
// own echo requests to local addresses). Only an optimisation: the reader
// checks the type anyway.
func (c *socket) filterEchoReplies() {
	if c.ipv6 {
		if p := c.conn.IPv6PacketConn(); p != nil {
			var f ipv6.ICMPFilter
			f.SetAll(true)
			f.Accept(ipv6.ICMPTypeEchoReply)
			_ = p.SetICMPFilter(&f)
		}
		return
	}
	if p := c.conn.IPv4PacketConn(); p != nil {
		var f ipv4.ICMPFilter
		f.SetAll(true)
		f.Accept(ipv4.ICMPTypeEchoReply)
		_ = p.SetICMPFilter(&f)
	}
}

func (c *socket) probe(ctx context.Context, addr netip.Addr) (time.Duration, error) {
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("icmp probe %v: %w", addr, err)
	}
	w := &waiter{from: addr.WithZone(""), reply: make(chan time.Time, 1)}
	seq, err := c.register(w)
	if err != nil {
		return 0, fmt.Errorf("icmp probe %v: %w", addr, err)
	}
	defer c.unregister(seq, w)

	payload := make([]byte, payloadLen)
	copy(payload, c.token[:])
	binary.BigEndian.PutUint64(payload[8:], w.gen)
	msg := icmp.Message{
		Type: c.reqType,
		Body: &icmp.Echo{ID: int(c.id), Seq: int(seq), Data: payload},
	}
	// The checksum is computed here for ICMPv4 and by the kernel for
	// ICMPv6 (it needs the pseudo-header).
	b, err := msg.Marshal(nil)
	if err != nil {
		return 0, fmt.Errorf("icmp probe %v: %w", addr, err)
	}
	var dst net.Addr
	if c.kind == kindDatagram {
		dst = &net.UDPAddr{IP: addr.AsSlice(), Zone: addr.Zone()}
	} else {
		dst = &net.IPAddr{IP: addr.AsSlice(), Zone: addr.Zone()}
	}

	start := time.Now()
	if _, err := c.conn.WriteTo(b, dst); err != nil {
		return 0, fmt.Errorf("icmp probe %v: %w", addr, err)
	}
	select {
	case at := <-w.reply:
		return at.Sub(start), nil
	case <-ctx.Done():
		return 0, fmt.Errorf("icmp probe %v: no reply: %w", addr, ctx.Err())
	case <-c.done:
		// The reader may have delivered just before it stopped.
		select {
		case at := <-w.reply:
			return at.Sub(start), nil
		default:
		}
		return 0, fmt.Errorf("icmp probe %v: %w", addr, net.ErrClosed)
	}
}

// register gives w a sequence number no other waiting probe has, and its
// probe counter.
func (c *socket) register(w *waiter) (uint16, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	for range 1 << 16 {
		c.seq++
		if _, busy := c.waiters[c.seq]; !busy {
			c.gen++
			w.gen = c.gen
			c.waiters[c.seq] = w
			return c.seq, nil
		}
	}
	return 0, errors.New("too many probes in flight")
}

func (c *socket) unregister(seq uint16, w *waiter) {
	c.mu.Lock()
	if c.waiters[seq] == w {
		delete(c.waiters, seq)
	}
	c.mu.Unlock()
}

// read is the socket's reader: it hands every reply to its probe, until the
// socket is closed.
func (c *socket) read() {
	defer close(c.done)
	buf := make([]byte, 1<<16)
	for {
		n, from, err := c.conn.ReadFrom(buf)
		at := time.Now()
		if err != nil {
			c.mu.Lock()
			closed := c.closed
			c.mu.Unlock()
			if closed || errors.Is(err, net.ErrClosed) {
				return
			}
			// Something transient (an ICMP error queued on the socket,
			// say): don't spin on it.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		c.deliver(buf[:n], from, at)
	}
}

// deliver hands the message b, received from from at at, to the probe it
// answers, if any.
func (c *socket) deliver(b []byte, from net.Addr, at time.Time) {
	m, err := icmp.ParseMessage(c.proto, b)
	if err != nil || m.Type != c.repType || m.Code != 0 {
		return
	}
	echo, ok := m.Body.(*icmp.Echo)
	if !ok || len(echo.Data) != payloadLen || [8]byte(echo.Data[:8]) != c.token {
		return
	}
	// A datagram socket only gets replies to its own identifier, which the
	// kernel chose; a raw socket gets all of them.
	if c.kind == kindRaw && echo.ID != int(c.id) {
		return
	}
	src := peerAddr(from)
	gen := binary.BigEndian.Uint64(echo.Data[8:])

	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.waiters[uint16(echo.Seq)]
	if w == nil || w.gen != gen || w.from != src {
		return
	}
	delete(c.waiters, uint16(echo.Seq))
	w.reply <- at // buffered, and only ever sent to once
}

// close closes the socket and waits for the reader to stop.
func (c *socket) close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	err := c.conn.Close()
	<-c.done
	return err
}
