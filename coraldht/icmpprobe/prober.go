package icmpprobe

import (
	"context"
	crand "crypto/rand"
	"crypto/subtle"
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
// identifier (raw sockets), source address and payload all match, so
// concurrent probes, to the same host or different ones, never take each
// other's replies, and a reply that comes in after its probe gave up is
// dropped. Nothing in a probe can be guessed from another: the sequence
// number is drawn at random among those not in use, and the payload is a
// random nonce of 16 octets drawn for that probe alone. Someone who sees
// the probes sent to their own address learns nothing that would let them
// answer, off the path, a probe sent to another (and so make a host that
// is silent, or far, look near). A Prober is safe for concurrent use.
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
// matching reply arrived: Echo's RTT.
func (p *Prober) Probe(ctx context.Context, addr netip.Addr) (time.Duration, error) {
	e, err := p.Echo(ctx, addr)
	return e.RTT, err
}

// EchoReply is what the reply to one echo request tells.
type EchoReply struct {
	// RTT is the time from sending the request to the reply's arrival.
	RTT time.Duration
	// Distance is the hop limit a packet needs to reach the host, as the
	// reply's TTL (IPv6: hop limit) tells it: the reply left the host
	// with one of the usual initial values (64, 128 or 255), the smallest
	// one not below what arrived, and every router on the way took one.
	// Paths are not always symmetric, so it is an estimate of the forward
	// path; 0 when the socket did not report the TTL.
	Distance int
}

// Echo sends one ICMP echo request to addr and returns what its matching
// reply tells: the round-trip time and the host's distance in hops.
//
// It gives up when ctx is done, with an error wrapping ctx.Err()
// (context.DeadlineExceeded on timeout); a ctx without a deadline gets one
// defaultTimeout away. It fails at once, with an error wrapping
// ErrUnavailable, when there is no socket for addr's family, and with
// one wrapping net.ErrClosed after Close. IPv4-mapped IPv6 addresses are
// probed as IPv4; a zone is used for the destination (link-local IPv6).
func (p *Prober) Echo(ctx context.Context, addr netip.Addr) (EchoReply, error) {
	addr = addr.Unmap()
	if !addr.IsValid() {
		return EchoReply{}, errors.New("icmp probe: invalid address")
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
		return EchoReply{}, fmt.Errorf("icmp probe %v: %w: no %s socket", addr, ErrUnavailable, family)
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
	proto   int    // protocol number for icmp.ParseMessage
	id      uint16 // echo identifier (raw sockets; the kernel sets it otherwise)
	ttl     bool   // the reader gets each reply's TTL (hop limit)

	mu      sync.Mutex
	waiters map[uint16]*waiter // by sequence number
	closed  bool

	done chan struct{} // closed when the reader has stopped
}

// waiter is a probe waiting for its reply.
type waiter struct {
	from  netip.Addr        // the reply's expected source, without zone
	nonce [payloadLen]byte  // the probe's payload, which the reply echoes
	reply chan arrivedReply // receives the reply; buffered
}

// arrivedReply is when a reply arrived and its TTL (0: unknown).
type arrivedReply struct {
	at  time.Time
	ttl int
}

// payloadLen is the length of a probe's payload: a nonce drawn for that
// probe alone, 128 random bits.
const payloadLen = 16

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
	c.ttl = c.askTTL()
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

// askTTL asks the kernel for each reply's TTL (IPv6: hop limit), and
// reports whether it will give it.
func (c *socket) askTTL() bool {
	if c.ipv6 {
		p := c.conn.IPv6PacketConn()
		return p != nil && p.SetControlMessage(ipv6.FlagHopLimit, true) == nil
	}
	p := c.conn.IPv4PacketConn()
	return p != nil && p.SetControlMessage(ipv4.FlagTTL, true) == nil
}

func (c *socket) probe(ctx context.Context, addr netip.Addr) (EchoReply, error) {
	if err := ctx.Err(); err != nil {
		return EchoReply{}, fmt.Errorf("icmp probe %v: %w", addr, err)
	}
	w := &waiter{from: addr.WithZone(""), reply: make(chan arrivedReply, 1)}
	if _, err := crand.Read(w.nonce[:]); err != nil {
		return EchoReply{}, fmt.Errorf("icmp probe %v: %w", addr, err)
	}
	seq, err := c.register(w)
	if err != nil {
		return EchoReply{}, fmt.Errorf("icmp probe %v: %w", addr, err)
	}
	defer c.unregister(seq, w)

	msg := icmp.Message{
		Type: c.reqType,
		Body: &icmp.Echo{ID: int(c.id), Seq: int(seq), Data: w.nonce[:]},
	}
	// The checksum is computed here for ICMPv4 and by the kernel for
	// ICMPv6 (it needs the pseudo-header).
	b, err := msg.Marshal(nil)
	if err != nil {
		return EchoReply{}, fmt.Errorf("icmp probe %v: %w", addr, err)
	}
	var dst net.Addr
	if c.kind == kindDatagram {
		dst = &net.UDPAddr{IP: addr.AsSlice(), Zone: addr.Zone()}
	} else {
		dst = &net.IPAddr{IP: addr.AsSlice(), Zone: addr.Zone()}
	}

	start := time.Now()
	if _, err := c.conn.WriteTo(b, dst); err != nil {
		return EchoReply{}, fmt.Errorf("icmp probe %v: %w", addr, err)
	}
	answered := func(r arrivedReply) EchoReply {
		return EchoReply{RTT: r.at.Sub(start), Distance: Distance(r.ttl)}
	}
	select {
	case r := <-w.reply:
		return answered(r), nil
	case <-ctx.Done():
		return EchoReply{}, fmt.Errorf("icmp probe %v: no reply: %w", addr, ctx.Err())
	case <-c.done:
		// The reader may have delivered just before it stopped.
		select {
		case r := <-w.reply:
			return answered(r), nil
		default:
		}
		return EchoReply{}, fmt.Errorf("icmp probe %v: %w", addr, net.ErrClosed)
	}
}

// Distance is the hop limit a packet needs to reach a host whose packet
// arrived with TTL (IPv6: hop limit) ttl, assuming it left with the
// smallest usual initial value not below ttl (64, 128 or 255): 1 for a
// host on the link. 0 when ttl is not a TTL (0 or less, or above 255).
func Distance(ttl int) int {
	if ttl <= 0 || ttl > 255 {
		return 0
	}
	initial := 255
	for _, i := range []int{64, 128} {
		if ttl <= i {
			initial = i
			break
		}
	}
	return initial - ttl + 1
}

// register gives w a random sequence number no other waiting probe has.
func (c *socket) register(w *waiter) (uint16, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return 0, net.ErrClosed
	}
	if len(c.waiters) >= 1<<15 {
		// Half the numbers busy: a random draw would take long to find a
		// free one, and so many probes in flight mean something is wrong.
		return 0, errors.New("too many probes in flight")
	}
	for {
		seq := uint16(rand.Uint32())
		if _, busy := c.waiters[seq]; !busy {
			c.waiters[seq] = w
			return seq, nil
		}
	}
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
		n, ttl, from, err := c.readFrom(buf)
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
		c.deliver(buf[:n], from, arrivedReply{at: at, ttl: ttl})
	}
}

// readFrom reads one message and, when the socket asked for it, its TTL
// (0: unknown).
func (c *socket) readFrom(b []byte) (n, ttl int, from net.Addr, err error) {
	if !c.ttl {
		n, from, err = c.conn.ReadFrom(b)
		return n, 0, from, err
	}
	if c.ipv6 {
		var cm *ipv6.ControlMessage
		n, cm, from, err = c.conn.IPv6PacketConn().ReadFrom(b)
		if cm != nil {
			ttl = cm.HopLimit
		}
		return n, ttl, from, err
	}
	var cm *ipv4.ControlMessage
	n, cm, from, err = c.conn.IPv4PacketConn().ReadFrom(b)
	if cm != nil {
		ttl = cm.TTL
	}
	return n, ttl, from, err
}

// deliver hands the message b, received from from, to the probe it
// answers, if any: one with its sequence number, waiting for a reply from
// from, whose nonce the reply's payload is.
func (c *socket) deliver(b []byte, from net.Addr, r arrivedReply) {
	seq, payload, ok := parseEcho(b, c.ipv6, c.kind == kindRaw, c.id)
	if !ok || len(payload) != payloadLen {
		return
	}
	src := peerAddr(from)

	c.mu.Lock()
	defer c.mu.Unlock()
	w := c.waiters[seq]
	if w == nil || w.from != src || subtle.ConstantTimeCompare(w.nonce[:], payload) != 1 {
		return
	}
	delete(c.waiters, seq)
	w.reply <- r // buffered, and only ever sent to once
}

// parseEcho reads b as an echo reply (ICMPv6 when v6) and returns its
// sequence number and payload. With checkID (raw sockets, which see every
// echo reply the host gets) the identifier must be id; a datagram socket
// only gets replies to its own identifier, which the kernel chose.
// Anything else, hostile or truncated input included, is not ok.
func parseEcho(b []byte, v6, checkID bool, id uint16) (seq uint16, payload []byte, ok bool) {
	reply := byte(icmp4EchoReply)
	if v6 {
		reply = icmp6EchoReply
	}
	if len(b) < 8 || b[0] != reply || b[1] != 0 {
		return 0, nil, false
	}
	if checkID && binary.BigEndian.Uint16(b[4:6]) != id {
		return 0, nil, false
	}
	return binary.BigEndian.Uint16(b[6:8]), b[8:], true
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
