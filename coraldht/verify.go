package coraldht

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
)

// Proving a claimed address: a request names its sender, and until that
// sender has answered at the address it names (or proven it by echoing
// an address cookie from that address, dispatch.go) it takes no place in
// a routing table. When the table would take it, the node pings the
// address it claims; the ping also measures the RTT a cluster claim is
// checked against. The pings are what any member can make a node send,
// so they are bounded: a few in flight, fewer per claimed prefix, and one
// per address per holdoff.

const (
	maxVerifying          = 32               // verification pings in flight
	maxVerifyingPerPrefix = 2                // of them toward one /24 (/48)
	verifyHoldoff         = time.Minute      // before pinging an address that answered again
	verifyFailedHoldoff   = 10 * time.Minute // … or one that did not
	maxVerifyRecords      = 4096             // addresses remembered for the holdoffs
)

type verifier struct {
	mu        sync.Mutex
	inflight  map[netip.AddrPort]bool
	perPrefix map[netip.Prefix]int
	// next is when each address may be pinged again, least recently
	// pinged evicted first, at most 1/16 from one prefix.
	next *boundedMap[netip.AddrPort, netip.Prefix, time.Time]
}

func newVerifier() *verifier {
	return &verifier{inflight: make(map[netip.AddrPort]bool), perPrefix: make(map[netip.Prefix]int),
		next: newBoundedMap[netip.AddrPort, netip.Prefix, time.Time](maxVerifyRecords, maxVerifyRecords/16)}
}

// start reserves a ping to addr, or reports that the bounds forbid one.
func (v *verifier) start(addr netip.AddrPort, now time.Time) bool {
	p := SitePrefix(addr.Addr())
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.inflight[addr] || len(v.inflight) >= maxVerifying || v.perPrefix[p] >= maxVerifyingPerPrefix {
		return false
	}
	if next, ok := v.next.get(addr); ok && now.Before(next) {
		return false
	}
	v.inflight[addr] = true
	v.perPrefix[p]++
	return true
}

func (v *verifier) done(addr netip.AddrPort, answered bool, now time.Time) {
	p := SitePrefix(addr.Addr())
	v.mu.Lock()
	defer v.mu.Unlock()
	delete(v.inflight, addr)
	if v.perPrefix[p]--; v.perPrefix[p] <= 0 {
		delete(v.perPrefix, p)
	}
	hold := verifyHoldoff
	if !answered {
		hold = verifyFailedHoldoff
	}
	v.next.remove(addr)
	v.next.put(addr, p, now.Add(hold))
}

// forgetAnswered lifts the holdoff of an address whose last verification
// was answered, once the address has stopped answering this node's
// calls: what the answer proved no longer holds, and a node restarted
// there must be verifiable at once. A failed verification's longer
// holdoff stays.
func (v *verifier) forgetAnswered(addr netip.AddrPort, now time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if next, ok := v.next.get(addr); ok && !next.After(now.Add(verifyHoldoff)) {
		v.next.remove(addr)
	}
}

// verify pings c, a sender whose request (size bytes) named it, within
// the bounds. Its reply enters the routing tables as the request would
// have (it may displace an entry by rank). source is where the request
// came from, to whom a failure is charged. The ping must be no larger
// than the request: a member claiming another's address must not make
// this node send that address more bytes than the member sent. (An
// honest request carries the same cluster list as the ping, and a body.)
func (n *Node) verify(c Contact, source netip.AddrPort, size int, now time.Time) {
	if n.closed.Load() {
		return
	}
	// Sized as send will send it: with this node's load, if it publishes
	// one.
	b, err := n.encode(&wire.Message{Type: wire.Ping, Load: n.published.get().wire()}, c, false)
	if err != nil {
		return
	}
	release(b)
	if n.identity != nil {
		size -= wire.ExtLen(&wire.Message{Ext: true, Identity: n.identity.Certificate.Raw}) - wire.ExtLen(&wire.Message{Ext: true})
	}
	if len(b) > size {
		return
	}
	if !n.verifying.start(c.Addr, now) {
		return
	}
	n.counters.verifications.Add(1)
	n.wg.Add(1)
	go func() {
		defer n.wg.Done()
		_, err := n.callAs(n.ctx, c, &wire.Message{Type: wire.Ping}, true)
		n.verifying.done(c.Addr, err == nil, time.Now())
		if err != nil && n.ctx.Err() == nil {
			n.abuse.note(AbuseVerifyFailed, source, c.Addr, 0, time.Now())
		}
	}()
}

// callAs is call; requester marks a call whose peer sent us a request
// first, so that its reply is heard as that request would have been.
func (n *Node) callAs(ctx context.Context, c Contact, req *wire.Message, requester bool) (*wire.Message, error) {
	events := make(chan rpcEvent, 2)
	pc := n.startCallAs(c, req, events, nil, false, requester)
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
