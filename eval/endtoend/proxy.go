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
// request take two round trips, the body size/bandwidth, and a fetch that
// is under way is joined (cut-through: the copy is ready when the first
// one is). Several requests for one object at one proxy share one fetch.
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
	origins  map[string]netip.Addr // origin host → its address
	size     int                   // object bytes
	bw       float64               // bytes per second of every transfer
	putTTL   time.Duration
	getLevel []int // nil: all levels
}

func (r *run) transfer() time.Duration {
	return time.Duration(float64(r.size) / r.bw * float64(time.Second))
}

// serve gets object url (from origin host) to p and returns where from.
func (r *run) serve(ctx context.Context, p *proxy, host, url string) string {
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
				time.Sleep(2 * r.w.rtt(p.addr, q.addr))
				<-qf.done // cut-through: its bytes come as it gets them
				if qf.ok {
					src = fromPeer
					break
				}
			}
		}
	}
	if src == fromOrigin {
		time.Sleep(2*r.w.rtt(p.addr, r.origins[host]) + 2*originRTT + r.transfer())
	}
	f.ok = true
	close(f.done)
	return src
}
