package main

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
)

// resolver models a client's recursive resolver, the part of it that
// matters here: it caches answers and NS sets for their TTLs, asks the
// servers of the most specific zone it has an NS set for (which is how the
// level zones lock it onto nearby servers), prefers the server with the
// lowest smoothed RTT, trying each unmeasured one first as BIND and
// Unbound do, and follows referrals. It starts knowing the coral zone's
// delegation (the parent's NS set) and nothing else.
type resolver struct {
	addr  netip.Addr
	w     *world
	dnsOf map[netip.Addr]*simulated // the Coral name servers by address
	rng   *rand.Rand

	mu      sync.Mutex
	ns      map[string]nsEntry // zone → servers
	answers map[string]answerEntry
	srtt    map[netip.Addr]time.Duration
	parent  string // the coral zone, whose NS set is the parent's delegation
}

type nsEntry struct {
	servers []netip.Addr
	expires time.Time
	// hop is the strongest hint among the servers of a set handed out on
	// a client's hints (0 the client's /24, 1 its gateway, 2 its region
	// router), -1 when none had one.
	hop int
}

type answerEntry struct {
	addrs   []netip.Addr
	expires time.Time
	info    answerInfo
}

// answerInfo says how an answer was reached, for the report's breakdown.
type answerInfo struct {
	server  netip.Addr // the name server that answered
	zone    string     // the zone whose NS set the resolver asked it from
	lockHop int        // that NS set's hop (nsEntry.hop); -2 the parent's set
	source  string     // the answer's proximity source
	hop     int        // the first address's hint hop, -1 none
}

var errResolve = errors.New("resolution failed")

func newResolver(addr netip.Addr, w *world, dnsOf map[netip.Addr]*simulated, zone string, parentNS []netip.Addr, seed uint64) *resolver {
	r := &resolver{addr: addr, w: w, dnsOf: dnsOf, rng: rand.New(rand.NewPCG(seed, 53)),
		ns: map[string]nsEntry{}, answers: map[string]answerEntry{}, srtt: map[netip.Addr]time.Duration{}, parent: zone}
	r.ns[zone] = nsEntry{servers: parentNS, expires: time.Now().Add(1000 * time.Hour), hop: -1}
	return r
}

// resolve returns name's addresses, from the cache or by asking.
func (r *resolver) resolve(ctx context.Context, name string) ([]netip.Addr, answerInfo, error) {
	skip := map[string]bool{} // zones whose servers gave no answer
	for range 8 {
		r.mu.Lock()
		if a, ok := r.answers[name]; ok && time.Now().Before(a.expires) {
			r.mu.Unlock()
			return a.addrs, a.info, nil
		}
		zone, servers := r.deepestZone(name, skip)
		lockHop := r.ns[zone].hop
		if r.parent == zone {
			lockHop = -2
		}
		r.mu.Unlock()
		if zone == "" {
			return nil, answerInfo{}, errResolve
		}
		server := r.pickServer(servers)
		resp, dec := r.ask(ctx, server, name)
		if resp == nil {
			skip[zone] = true
			continue
		}
		now := time.Now()
		r.mu.Lock()
		progressed := false
		var addrs []netip.Addr
		var ttl uint32
		for _, rr := range resp.Answer {
			if a, ok := rr.(*dns.A); ok {
				ad, _ := netip.AddrFromSlice(a.A)
				addrs = append(addrs, ad.Unmap())
				ttl = a.Hdr.Ttl
			}
		}
		glue := map[string]netip.Addr{}
		for _, rr := range resp.Extra {
			if a, ok := rr.(*dns.A); ok {
				ad, _ := netip.AddrFromSlice(a.A)
				glue[a.Hdr.Name] = ad.Unmap()
			}
		}
		sets := map[string][]netip.Addr{}
		setTTL := map[string]uint32{}
		for _, rr := range append(slicesConcat(resp.Answer, resp.Ns), nil...) {
			if n, ok := rr.(*dns.NS); ok {
				if a, ok := glue[n.Ns]; ok {
					sets[n.Hdr.Name] = append(sets[n.Hdr.Name], a)
					setTTL[n.Hdr.Name] = n.Hdr.Ttl
				}
			}
		}
		for z, s := range sets {
			old, had := r.ns[z]
			if !had || now.After(old.expires) || dns.CountLabel(z) > dns.CountLabel(zone) || z == zone {
				hop := -1
				for _, a := range s {
					if h, ok := dec.Hop[a]; ok && dec.Source == "hints" && (hop < 0 || h < hop) {
						hop = h
					}
				}
				r.ns[z] = nsEntry{servers: s, expires: now.Add(time.Duration(setTTL[z]) * time.Second), hop: hop}
				if !had || dns.CountLabel(z) > dns.CountLabel(zone) {
					progressed = true
				}
			}
		}
		if len(addrs) > 0 {
			info := answerInfo{server: server, zone: zone, lockHop: lockHop, source: dec.Source, hop: -1}
			if h, ok := dec.Hop[addrs[0]]; ok {
				info.hop = h
			}
			r.answers[name] = answerEntry{addrs: addrs, expires: now.Add(time.Duration(ttl) * time.Second), info: info}
			r.mu.Unlock()
			return addrs, info, nil
		}
		r.mu.Unlock()
		if !progressed {
			skip[zone] = true
		}
	}
	return nil, answerInfo{}, errResolve
}

func slicesConcat(a, b []dns.RR) []dns.RR {
	out := make([]dns.RR, 0, len(a)+len(b))
	return append(append(out, a...), b...)
}

// deepestZone is the most specific zone above name with a live NS set.
func (r *resolver) deepestZone(name string, skip map[string]bool) (string, []netip.Addr) {
	now := time.Now()
	best, n := "", -1
	for z, e := range r.ns {
		if skip[z] || now.After(e.expires) || !dns.IsSubDomain(z, name) {
			continue
		}
		if c := dns.CountLabel(z); c > n {
			best, n = z, c
		}
	}
	if best == "" {
		return "", nil
	}
	return best, r.ns[best].servers
}

// pickServer takes an unmeasured server first, else the lowest SRTT.
func (r *resolver) pickServer(servers []netip.Addr) netip.Addr {
	r.mu.Lock()
	defer r.mu.Unlock()
	var unmeasured []netip.Addr
	best, bestRTT := netip.Addr{}, time.Duration(1<<62)
	for _, s := range servers {
		d, ok := r.srtt[s]
		if !ok {
			unmeasured = append(unmeasured, s)
			continue
		}
		if d < bestRTT {
			best, bestRTT = s, d
		}
	}
	if len(unmeasured) > 0 {
		return unmeasured[r.rng.IntN(len(unmeasured))]
	}
	return best
}

// ask sends one query to server: a round trip plus the server's own time.
func (r *resolver) ask(ctx context.Context, server netip.Addr, name string) (*dns.Msg, decision) {
	s := r.dnsOf[server]
	if s == nil {
		return nil, decision{}
	}
	start := time.Now()
	half := r.w.rtt(r.addr, server) / 2
	time.Sleep(half)
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(strings.ToLower(name)), dns.TypeA)
	q.SetEdns0(1232, false)
	resp, dec := s.ServeObserved(ctx, netip.AddrPortFrom(r.addr, 53), q)
	time.Sleep(half)
	d := time.Since(start)
	r.mu.Lock()
	if old, ok := r.srtt[server]; ok {
		d = (7*old + 3*d) / 10
	}
	r.srtt[server] = d
	r.mu.Unlock()
	if resp == nil || resp.Rcode != dns.RcodeSuccess {
		return nil, dec
	}
	return resp, dec
}
