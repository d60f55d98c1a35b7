package main

import (
	"context"
	"net/netip"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

// proxy models a Coral HTTP proxy's path for one object, with the real
// DSHT underneath: its local cache; on a miss one put+get of the URL's key
// (the real coraldht operation on the in-memory network), which both
// announces this proxy as a source and returns proxies already holding or
// fetching the object; then a fetch from the first of them that is not
// itself, or from the origin. Transfers are modelled: a connection and a
// request take two round trips, the body TCP slow start and size/bandwidth
// (transfer), and a fetch that is under way is joined (cut-through: the
// copy is ready when the first one is). Several requests for one object at
// one proxy share one fetch.
type proxy struct {
	node *coraldht.Node
	addr netip.Addr

	mu    sync.Mutex
	ready map[string]*fetch // object → its copy here
}

type fetch struct {
	done chan struct{} // closed when the copy is complete
	ok   bool
}

// the outcome of a request at a proxy
const (
	fromCache  = "local cache"
	fromPeer   = "peer"
	fromOrigin = "origin"
	fromFailed = "failed"
)

type run struct {
	w        *world
	proxies  map[netip.Addr]*proxy
	origin   netip.Addr
	size     int     // object bytes
	proxyBW  float64 // bytes per second from a proxy
	originBW float64 // bytes per second from the origin (the paper's DSL line)
	putTTL   time.Duration
}

// initialWindow is TCP's initial congestion window (RFC 6928: ten
// segments): a body larger than that takes extra round trips.
const initialWindow = 10 * 1460

// transfer is the time to receive the body over a fresh connection with
// round-trip time rtt and bandwidth bw, after the first byte.
func (r *run) transfer(rtt time.Duration, bw float64) time.Duration {
	rounds, window := 0, initialWindow
	for sent := window; sent < r.size; sent += window {
		window *= 2
		rounds++
	}
	return time.Duration(rounds)*rtt + time.Duration(float64(r.size)/bw*float64(time.Second))
}

// serve gets object url to p and returns where from.
func (r *run) serve(ctx context.Context, p *proxy, url string) string {
	p.mu.Lock()
	f, ok := p.ready[url]
	if ok {
		p.mu.Unlock()
		<-f.done
		if f.ok {
			return fromCache
		}
		return fromFailed
	}
	f = &fetch{done: make(chan struct{})}
	p.ready[url] = f
	p.mu.Unlock()

	self, _ := p.node.Addr().MarshalBinary()
	res, _ := p.node.PutGet(ctx, coraldht.KeyFor(url), self, r.putTTL)
	src := fromOrigin
	for _, v := range res.Values {
		var a netip.AddrPort
		if a.UnmarshalBinary(v.Data) != nil || a.Addr() == p.addr {
			continue
		}
		if q := r.proxies[a.Addr()]; q != nil {
			q.mu.Lock()
			qf := q.ready[url]
			q.mu.Unlock()
			if qf != nil {
				rtt := r.w.rtt(p.addr, q.addr)
				time.Sleep(2 * rtt)
				<-qf.done // cut-through: its bytes come as it gets them
				if qf.ok {
					time.Sleep(r.transfer(rtt, r.proxyBW))
					src = fromPeer
					break
				}
			}
		}
	}
	if src == fromOrigin {
		rtt := r.w.rtt(p.addr, r.origin) + originRTT
		time.Sleep(2*rtt + r.transfer(rtt, r.originBW))
	}
	f.ok = true
	close(f.done)
	return src
}
