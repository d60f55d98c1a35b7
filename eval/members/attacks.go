package main

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coraldht/memnet"
	"github.com/coralcdn/coral/eval/internal/sim"
)

// An attack is a class of malicious member: what its nodes' transports
// do (wrap) and what it does while the attack runs (start, which returns
// the function that stops it).
type attack struct {
	wrap  func(r *run) func(i int, tr *memnet.Transport) coraldht.Transport
	start func(r *run, wg *sync.WaitGroup) (stop func())
}

var attacks = map[string]attack{
	"eclipse":    {wrap: blackHoles, start: eclipse},
	"storeflood": {wrap: plain, start: storeFlood},
	"reflection": {wrap: plain, start: reflection},
	"claims":     {wrap: plain, start: claimFlood},
}

func plain(*run) func(int, *memnet.Transport) coraldht.Transport { return nil }

// blackHoles makes the attackers' nodes answer pings and drop every other
// request: they stay in tables and swallow lookups.
func blackHoles(r *run) func(int, *memnet.Transport) coraldht.Transport {
	return func(i int, tr *memnet.Transport) coraldht.Transport {
		if r.isAtk[i] {
			return blackHole{tr}
		}
		return tr
	}
}

type blackHole struct{ *memnet.Transport }

// ReadFrom passes on replies and pings only. The message type and the
// response flag are bytes 3 and 4 of every datagram (PROTOCOL.md).
func (b blackHole) ReadFrom(p []byte) (int, netip.AddrPort, error) {
	for {
		n, from, err := b.Transport.ReadFrom(p)
		if err != nil || n < 5 || p[4]&1 == 1 || p[3] == typePing {
			return n, from, err
		}
	}
}

// every runs f every period until the deadline or stop, in a goroutine.
// The attack starts with it: setting up takes virtual time too.
func every(r *run, wg *sync.WaitGroup, period time.Duration, f func()) func() {
	deadline := r.begin()
	done := make(chan struct{})
	wg.Go(func() {
		t := time.NewTicker(period)
		defer t.Stop()
		for time.Now().Before(deadline) {
			select {
			case <-done:
				return
			case <-t.C:
				f()
			}
		}
	})
	var once sync.Once
	return func() { once.Do(func() { close(done) }) }
}

// attackerTransport is a raw endpoint on the attacker's IP, for forged
// datagrams.
func (r *run) attackerTransport(i, port int) (*memnet.Transport, netip.AddrPort, error) {
	addr := netip.AddrPortFrom(r.s.Nodes[i].Addr().Addr(), uint16(port))
	tr, err := r.s.Net.Listen(addr)
	return tr, addr, err
}

// eclipse: sybils that black-hole, and forged claims ranked to displace.
func eclipse(r *run, wg *sync.WaitGroup) func() {
	ctx := context.Background()
	type claimer struct {
		tr    *memnet.Transport
		ports []claimPort
	}
	var claimers []claimer
	for _, i := range r.attacker {
		ip := r.s.Nodes[i].Addr().Addr()
		for port := 4001; port <= 4008; port++ {
			tr, err := r.s.Net.Listen(netip.AddrPortFrom(ip, uint16(port)))
			if err != nil {
				continue
			}
			cfg := coraldht.DefaultConfig()
			cfg.Key = r.s.Key
			nodeConfig(&cfg, r.before)
			nd, err := coraldht.NewNode(cfg, blackHole{tr})
			if err != nil {
				continue
			}
			r.extra = append(r.extra, nd)
			_ = nd.Bootstrap(ctx, r.randomHonest().Addr())
		}
		tr, _, err := r.attackerTransport(i, 4100)
		if err != nil {
			continue
		}
		claimers = append(claimers, claimer{tr: tr, ports: claimPorts(ip, 10000, 8192)})
	}
	f := newForger(sim.NetworkSecret)
	return every(r, wg, 10*time.Second, func() {
		// Every honest node, each round, by one attacker or another.
		for j, h := range r.honest {
			if len(claimers) == 0 {
				return
			}
			c := claimers[j%len(claimers)]
			victim := r.s.Nodes[h]
			for _, claimed := range groundFor(victim.ID(), c.ports, 8) {
				pkt := f.forge(request{typ: typePing, sender: claimed, services: capExtensions, to: victim.Addr(), ext: true})
				_ = c.tr.WriteTo(pkt, victim.Addr())
			}
		}
	})
}

// claimPort is an address on the attacker's IP and its ID.
type claimPort struct {
	addr netip.AddrPort
	id   coraldht.ID
}

func claimPorts(ip netip.Addr, first, n int) []claimPort {
	out := make([]claimPort, n)
	for i := range out {
		a := netip.AddrPortFrom(ip, uint16(first+i))
		out[i] = claimPort{a, nodeID(a)}
	}
	return out
}

// groundFor picks, in each of the victim's 10 widest buckets, the perBucket
// claims that rank best under the rank of before: SplitMix64's finalizer
// of the XOR of the two IDs' low 64 bits (coraldht's README, "full
// buckets keep the contacts that rank best"). The rank of after mixes in
// a secret of the victim's, which this cannot know.
func groundFor(victim coraldht.ID, ports []claimPort, perBucket int) []netip.AddrPort {
	low := binary.BigEndian.Uint64(victim[12:])
	type ranked struct {
		addr   netip.AddrPort
		bucket int
		rank   uint64
	}
	var rs []ranked
	for _, p := range ports {
		b := coraldht.CommonPrefixLen(victim, p.id)
		if b < 10 {
			rs = append(rs, ranked{p.addr, b, mix64(low ^ binary.BigEndian.Uint64(p.id[12:]))})
		}
	}
	slices.SortFunc(rs, func(a, b ranked) int {
		if a.bucket != b.bucket {
			return a.bucket - b.bucket
		}
		if a.rank < b.rank {
			return -1
		}
		return 1
	})
	var out []netip.AddrPort
	taken := map[int]int{}
	for _, x := range rs {
		if taken[x.bucket] < perBucket {
			taken[x.bucket]++
			out = append(out, x.addr)
		}
	}
	return out
}

func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	return x ^ x>>31
}

// storeFlood: each attacker puts one-byte values of the longest lifetime
// under new keys, 8 at a time, up to maxFloodPuts.
const maxFloodPuts = 3000

func storeFlood(r *run, wg *sync.WaitGroup) func() {
	var stopped atomic.Bool
	ctx := context.Background()
	deadline := r.begin()
	for _, i := range r.attacker {
		nd := r.s.Nodes[i]
		var next atomic.Int64
		for range 8 {
			wg.Go(func() {
				for !stopped.Load() && time.Now().Before(deadline) {
					k := next.Add(1)
					if k > maxFloodPuts {
						return
					}
					_, _ = nd.Put(ctx, coraldht.KeyFor(fmt.Sprint("flood/", i, "/", k)), []byte{'x'}, 24*time.Hour)
				}
			})
		}
	}
	return func() { stopped.Store(true) }
}

// reflection: spoofed requests whose replies go to victims.
func reflection(r *run, wg *sync.WaitGroup) func() {
	var victims []netip.AddrPort
	var received atomic.Int64
	for v := range 10 {
		addr := netip.AddrPortFrom(netip.AddrFrom4([4]byte{10, 250, 0, byte(v + 1)}), 9)
		tr, err := r.s.Net.Listen(addr)
		if err != nil {
			continue
		}
		victims = append(victims, addr)
		// Not in wg: it reads until the run closes the victim.
		go func() {
			buf := make([]byte, 2048)
			for {
				n, _, err := tr.ReadFrom(buf)
				if err != nil {
					return
				}
				received.Add(int64(n))
			}
		}()
		r.extra = append(r.extra, closer{tr})
	}
	// A key with values: put by four honest nodes.
	hot := coraldht.KeyFor("members/reflection/hot")
	for range 4 {
		nd := r.randomHonest()
		_, _ = nd.Put(context.Background(), hot, []byte(nd.Addr().String()), time.Hour)
	}
	f := newForger(sim.NetworkSecret)
	var sent atomic.Int64
	var trs []*memnet.Transport
	for _, i := range r.attacker {
		if tr, _, err := r.attackerTransport(i, 4100); err == nil {
			trs = append(trs, tr)
		}
	}
	rng := rand.New(rand.NewPCG(*flagSeed, 99))
	stop := every(r, wg, 100*time.Millisecond, func() {
		for _, tr := range trs {
			for k := range 5 {
				victim := victims[rng.IntN(len(victims))]
				req := request{sender: victim, services: capExtensions, to: r.randomHonest().Addr(), ext: rng.IntN(2) == 0,
					key: hot, target: coraldht.KeyFor(fmt.Sprint(rng.Uint64())), ttl: 60000, value: []byte{'x'}}
				switch k % 4 {
				case 0:
					req.typ, req.target = typeGet, hot
				case 1:
					req.typ, req.flags = typePutProbe, wantValues
				case 2:
					req.typ, req.flags = typeStore, wantValues
				case 3:
					req.typ = typeFindNode
				}
				pkt := f.forge(req)
				sent.Add(int64(len(pkt)))
				_ = tr.WriteToFrom(pkt, req.to, victim)
			}
		}
	})
	return func() {
		stop()
		time.Sleep(5 * time.Second) // the last replies land
		r.res.Sent, r.res.Reflected = sent.Load(), received.Load()
		if r.res.Sent > 0 {
			r.res.Amplification = float64(r.res.Reflected) / float64(r.res.Sent)
		}
	}
}

type closer struct{ tr *memnet.Transport }

func (c closer) Close() error { return c.tr.Close() }

// claimFlood: pings, each claiming a new address on the attacker's IP.
func claimFlood(r *run, wg *sync.WaitGroup) func() {
	f := newForger(sim.NetworkSecret)
	var trs []*memnet.Transport
	var ips []netip.Addr
	for _, i := range r.attacker {
		if tr, _, err := r.attackerTransport(i, 4100); err == nil {
			trs = append(trs, tr)
			ips = append(ips, r.s.Nodes[i].Addr().Addr())
		}
	}
	port := 10000
	return every(r, wg, 100*time.Millisecond, func() {
		for j, tr := range trs {
			for range 20 {
				port = 10000 + (port-10000+1)%55000
				to := r.randomHonest().Addr()
				_ = tr.WriteTo(f.forge(request{typ: typePing, sender: netip.AddrPortFrom(ips[j], uint16(port)), services: capExtensions, to: to, ext: true}), to)
			}
		}
	})
}
