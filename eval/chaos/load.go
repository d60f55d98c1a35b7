//go:build linux

package main

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"net/netip"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/internal/lab/netns/coralnet"
)

// result is one client request.
type result struct {
	At        float64 // seconds since the start, when the response ended
	Client    int     // client host
	Object    int
	Proxy     string // the proxy's address ("" if DNS failed)
	OK        bool
	Failure   string // why it failed, if it did
	Violation string // which invariant it broke, if any
	Detail    string
}

// recorder keeps every result.
type recorder struct {
	start time.Time
	mu    sync.Mutex
	all   []result
}

func (r *recorder) add(res result) {
	r.mu.Lock()
	r.all = append(r.all, res)
	r.mu.Unlock()
}

func (r *recorder) now() float64 { return time.Since(r.start).Seconds() }

// between returns the results with from <= At < to.
func (r *recorder) between(from, to float64) []result {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []result
	for _, res := range r.all {
		if res.At >= from && res.At < to {
			out = append(out, res)
		}
	}
	return out
}

// dnsCache is a client host's stub cache: the answer is kept for its TTL.
type dnsCache struct {
	c       *coralnet.Client
	mu      sync.Mutex
	addrs   []netip.Addr
	expires time.Time
}

func (d *dnsCache) lookup(ctx context.Context) ([]netip.Addr, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if time.Now().Before(d.expires) {
		return d.addrs, nil
	}
	ctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	addrs, ttl, err := d.c.Lookup(ctx, coralnet.CoralHost())
	if err != nil {
		return nil, err
	}
	d.addrs, d.expires = addrs, time.Now().Add(ttl)
	return addrs, nil
}

// load is the crowd: workers on every client host, each fetching random
// objects through whichever proxy DNS gives it, until ctx ends.
type load struct {
	net     *coralnet.Net
	objects []*object
	bySHA   map[[32]byte]string
	rec     *recorder
	workers int           // per client host
	think   time.Duration // mean pause between a worker's requests
	// The crowd's attention moves: objects[:active] are wanted, half the
	// requests for the newest wave (the last perWave of them).
	perWave int
	active  atomic.Int64
}

// nextWave makes the next perWave objects wanted, if any are left.
func (l *load) nextWave() {
	l.active.Store(min(int64(len(l.objects)), l.active.Load()+int64(l.perWave)))
}

// pick chooses an object: the newest wave or any wanted one.
func (l *load) pick(rng *rand.Rand) int {
	active := int(l.active.Load())
	if rng.IntN(2) == 0 {
		from := max(0, active-l.perWave)
		return from + rng.IntN(active-from)
	}
	return rng.IntN(active)
}

func (l *load) run(ctx context.Context) {
	l.bySHA = map[[32]byte]string{}
	for _, o := range l.objects {
		l.bySHA[o.SHA256] = o.Path
	}
	var wg sync.WaitGroup
	for ci, c := range l.net.Clients {
		cache := &dnsCache{c: c}
		hc := &http.Client{Timeout: 20 * time.Second, Transport: &http.Transport{
			DialContext: c.Host.DialContext, MaxIdleConnsPerHost: l.workers, IdleConnTimeout: 30 * time.Second,
			DisableCompression: true}}
		for w := range l.workers {
			rng := rand.New(rand.NewPCG(uint64(ci), uint64(w)))
			wg.Go(func() {
				for ctx.Err() == nil {
					l.one(ctx, ci, hc, cache, rng)
					if l.think > 0 {
						select {
						case <-ctx.Done():
						case <-time.After(time.Duration(rng.Int64N(int64(2 * l.think)))):
						}
					}
				}
			})
		}
	}
	wg.Wait()
}

func (l *load) one(ctx context.Context, client int, hc *http.Client, cache *dnsCache, rng *rand.Rand) {
	oi := l.pick(rng)
	obj := l.objects[oi]
	res := result{Client: client, Object: oi}
	defer func() {
		if ctx.Err() == nil || res.Violation != "" {
			res.At = l.rec.now()
			l.rec.add(res)
		}
	}()
	addrs, err := cache.lookup(ctx)
	if err != nil {
		res.Failure = "dns: " + err.Error()
		return
	}
	proxy := addrs[rng.IntN(len(addrs))]
	res.Proxy = proxy.String()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+proxy.String()+obj.Path, nil)
	if err != nil {
		res.Failure = err.Error()
		return
	}
	req.Host = coralnet.CoralHost()
	resp, err := hc.Do(req)
	if err != nil {
		res.Failure = "request: " + err.Error()
		return
	}
	body, readErr := io.ReadAll(resp.Body)
	resp.Body.Close()
	ok, failure, violation := check(obj, resp, body, readErr, l.bySHA)
	res.OK, res.Failure, res.Violation = ok, failure, violation
	if violation != "" {
		res.Detail = describe(obj, body) + ", Cache-Status: " + resp.Header.Get("Cache-Status")
	}
}
