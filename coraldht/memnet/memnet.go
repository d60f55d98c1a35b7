// Package memnet is an in-memory datagram network for tests and
// simulations of coraldht nodes: per-pair latency, jitter, loss, partitions,
// crashes and restarts. Its endpoints implement coraldht.Transport. It uses
// only channels and timers, so a network created inside a testing/synctest
// bubble runs in virtual time: a thousand nodes can live through hours in
// seconds.
package memnet

import (
	"fmt"
	"math/rand/v2"
	"net"
	"net/netip"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
)

// LatencyFunc returns the one-way delay of a datagram from one address to
// another. Half a measured RTT matrix entry is the usual choice.
type LatencyFunc func(from, to netip.AddrPort) time.Duration

// Config configures a Network. The zero value is a lossless
// network with no delay.
type Config struct {
	// Latency gives each datagram's base one-way delay. Nil means none.
	Latency LatencyFunc
	// Jitter adds a uniformly random extra delay in [0, Jitter) to each
	// datagram, so datagrams can overtake one another.
	Jitter time.Duration
	// Loss is the probability that a datagram is silently dropped.
	Loss float64
	// QueueLen is each endpoint's receive queue; datagrams arriving at a full
	// queue are dropped, as a socket buffer would. Default 512, a little more
	// than a default Linux UDP receive buffer holds.
	QueueLen int
	// Seed seeds loss and jitter. Zero means a fixed seed of 1.
	Seed uint64
}

// Stats counts what happened to datagrams.
type Stats struct {
	Sent      uint64 // WriteTo calls on live endpoints
	Delivered uint64 // queued at a live receiver
	Lost      uint64 // dropped by the loss probability
	Blocked   uint64 // dropped by a partition
	NoRoute   uint64 // no live endpoint at the destination
	QueueFull uint64 // receiver's queue was full
}

// Network is an in-memory datagram network. It models per-pair latency,
// jitter, loss, partitions, and crashing and restarting endpoints.
type Network struct {
	mu         sync.Mutex
	cfg        Config
	rng        *rand.Rand
	endpoints  map[netip.AddrPort]*Transport
	dead       map[netip.AddrPort]bool
	partitions []partition
	stats      Stats
}

// ErrClosed is what a closed or killed endpoint's ReadFrom and WriteTo
// return. It wraps net.ErrClosed, which coraldht's nodes take as the end of
// their transport.
var ErrClosed = fmt.Errorf("memnet: endpoint closed: %w", net.ErrClosed)

type partition struct{ a, b map[netip.AddrPort]bool }

func (p partition) separates(x, y netip.AddrPort) bool {
	return (p.a[x] && p.b[y]) || (p.b[x] && p.a[y])
}

// New returns an empty network.
func New(cfg Config) *Network {
	if cfg.QueueLen <= 0 {
		cfg.QueueLen = 512
	}
	seed := cfg.Seed
	if seed == 0 {
		seed = 1
	}
	return &Network{
		cfg:       cfg,
		rng:       rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)),
		endpoints: make(map[netip.AddrPort]*Transport),
		dead:      make(map[netip.AddrPort]bool),
	}
}

// Listen attaches a new endpoint at addr.
func (n *Network) Listen(addr netip.AddrPort) (*Transport, error) {
	if err := wire.CheckAddr(addr); err != nil {
		return nil, fmt.Errorf("memnet: listen: %v", err)
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if _, busy := n.endpoints[addr]; busy {
		return nil, fmt.Errorf("memnet: listen: %v already in use", addr)
	}
	delete(n.dead, addr)
	t := &Transport{
		net:    n,
		local:  addr,
		inbox:  make(chan memPacket, n.cfg.QueueLen),
		closed: make(chan struct{}),
	}
	n.endpoints[addr] = t
	return t, nil
}

// SetLatency replaces the latency function for datagrams sent from now on.
func (n *Network) SetLatency(f LatencyFunc) {
	n.mu.Lock()
	n.cfg.Latency = f
	n.mu.Unlock()
}

// SetJitter replaces the jitter bound.
func (n *Network) SetJitter(d time.Duration) {
	n.mu.Lock()
	n.cfg.Jitter = d
	n.mu.Unlock()
}

// SetLoss replaces the loss probability.
func (n *Network) SetLoss(p float64) {
	n.mu.Lock()
	n.cfg.Loss = p
	n.mu.Unlock()
}

// Partition stops all traffic between the addresses in a and those in b, in
// both directions, until Heal. Traffic within each side is unaffected.
func (n *Network) Partition(a, b []netip.AddrPort) {
	p := partition{a: make(map[netip.AddrPort]bool), b: make(map[netip.AddrPort]bool)}
	for _, x := range a {
		p.a[x] = true
	}
	for _, x := range b {
		p.b[x] = true
	}
	n.mu.Lock()
	n.partitions = append(n.partitions, p)
	n.mu.Unlock()
}

// Heal removes every partition.
func (n *Network) Heal() {
	n.mu.Lock()
	n.partitions = nil
	n.mu.Unlock()
}

// Kill crashes the endpoint at addr without warning: its ReadFrom fails,
// what it sends is dropped and datagrams to it vanish. Restart brings a
// fresh endpoint back at the same address.
func (n *Network) Kill(addr netip.AddrPort) {
	n.mu.Lock()
	t := n.endpoints[addr]
	delete(n.endpoints, addr)
	n.dead[addr] = true
	n.mu.Unlock()
	if t != nil {
		t.shut()
	}
}

// Restart attaches a fresh endpoint at the address of a killed one.
func (n *Network) Restart(addr netip.AddrPort) (*Transport, error) {
	n.mu.Lock()
	wasDead := n.dead[addr]
	n.mu.Unlock()
	if !wasDead {
		return nil, fmt.Errorf("memnet: restart: %v was not killed", addr)
	}
	return n.Listen(addr)
}

// Stats returns the datagram counters.
func (n *Network) Stats() Stats {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.stats
}

func (n *Network) send(from netip.AddrPort, p []byte, to netip.AddrPort) {
	n.sendAs(from, from, p, to)
}

// sendAs sends p from the endpoint at sender, with source address from.
func (n *Network) sendAs(sender, from netip.AddrPort, p []byte, to netip.AddrPort) {
	n.mu.Lock()
	if n.endpoints[sender] == nil {
		// A killed or closed sender's packets go nowhere.
		n.mu.Unlock()
		return
	}
	n.stats.Sent++
	for _, part := range n.partitions {
		if part.separates(from, to) {
			n.stats.Blocked++
			n.mu.Unlock()
			return
		}
	}
	if n.cfg.Loss > 0 && n.rng.Float64() < n.cfg.Loss {
		n.stats.Lost++
		n.mu.Unlock()
		return
	}
	var delay time.Duration
	if n.cfg.Latency != nil {
		delay = n.cfg.Latency(from, to)
	}
	if n.cfg.Jitter > 0 {
		delay += time.Duration(n.rng.Int64N(int64(n.cfg.Jitter)))
	}
	n.mu.Unlock()

	pkt := memPacket{from: from, data: append([]byte(nil), p...)}
	if delay <= 0 {
		n.deliver(to, pkt)
		return
	}
	time.AfterFunc(delay, func() { n.deliver(to, pkt) })
}

func (n *Network) deliver(to netip.AddrPort, pkt memPacket) {
	n.mu.Lock()
	defer n.mu.Unlock()
	t := n.endpoints[to]
	if t == nil {
		n.stats.NoRoute++
		return
	}
	select {
	case t.inbox <- pkt:
		n.stats.Delivered++
	default:
		n.stats.QueueFull++
	}
}

type memPacket struct {
	from netip.AddrPort
	data []byte
}

// Transport is one endpoint of a Network.
type Transport struct {
	net       *Network
	local     netip.AddrPort
	inbox     chan memPacket
	closed    chan struct{}
	closeOnce sync.Once
}

// LocalAddr implements coraldht.Transport.
func (t *Transport) LocalAddr() netip.AddrPort { return t.local }

// WriteTo implements coraldht.Transport.
func (t *Transport) WriteTo(p []byte, to netip.AddrPort) error {
	select {
	case <-t.closed:
		return ErrClosed
	default:
	}
	t.net.send(t.local, p, to)
	return nil
}

// WriteToFrom sends one datagram to to as if it came from from: a sender
// on a network that does not check source addresses (no BCP 38). It is
// what reflection attacks need, for experiments that measure them; the
// receiver sees from as the source, latencies and partitions are those
// of from.
func (t *Transport) WriteToFrom(p []byte, to, from netip.AddrPort) error {
	select {
	case <-t.closed:
		return ErrClosed
	default:
	}
	t.net.sendAs(t.local, from, p, to)
	return nil
}

// ReadFrom implements coraldht.Transport.
func (t *Transport) ReadFrom(p []byte) (int, netip.AddrPort, error) {
	select {
	case pkt := <-t.inbox:
		return copy(p, pkt.data), pkt.from, nil
	case <-t.closed:
		return 0, netip.AddrPort{}, ErrClosed
	}
}

// Close implements coraldht.Transport: the endpoint leaves the network.
func (t *Transport) Close() error {
	t.net.mu.Lock()
	if t.net.endpoints[t.local] == t {
		delete(t.net.endpoints, t.local)
	}
	t.net.mu.Unlock()
	t.shut()
	return nil
}

// TryReadFrom is ReadFrom without waiting: ok is false when no datagram is
// queued. Tests that drive a node synchronously collect its replies with it.
func (t *Transport) TryReadFrom(p []byte) (n int, from netip.AddrPort, ok bool) {
	select {
	case pkt := <-t.inbox:
		return copy(p, pkt.data), pkt.from, true
	default:
		return 0, netip.AddrPort{}, false
	}
}

func (t *Transport) shut() { t.closeOnce.Do(func() { close(t.closed) }) }
