//go:build linux

package hostilelab

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coralcdn/coral/internal/lab/evilorigin"
)

// Class is one class of attack.
type Class struct {
	Name string
	Doc  string
	// Defects are the known defects of issue 19 this class can show,
	// numbered as in DEFECTS (README.md).
	Defects []int
	// SameOrigin says the evil origin's other objects (the victims, a
	// no-store object) must stay available during the class: true where
	// the attack comes from clients or one path, false where the origin
	// itself is broken (the proxy may then rightly give up on it, and
	// serves no stale copy where s-maxage forbids it).
	SameOrigin bool
	run        func(ctx context.Context, a *attack)
}

// Classes are the attack classes, in the order they run.
var Classes = []Class{
	{"headers", "origin heads that are slow, endless, huge or have 20,000 fields", nil, false, func(ctx context.Context, a *attack) {
		a.fetchRecipes(ctx, 4, 30*time.Second, "slow-headers", "endless-headers", "huge-field", "many-fields")
	}},
	{"framing", "Transfer-Encoding and Content-Length lies: 4 clients on gzip, chunked with an endless head, 4 on short and long lengths, both fields, bad chunks", []int{1}, false, func(ctx context.Context, a *attack) {
		var wg sync.WaitGroup
		wg.Go(func() { a.fetchRecipes(ctx, 4, 30*time.Second, "te-gzip-endless-headers") })
		a.fetchRecipes(ctx, 4, 30*time.Second, "short-length", "long-length", "length-and-chunked", "bad-chunks")
		wg.Wait()
	}},
	{"bombs", "1 GiB of zeros as gzip transfer coding and as gzip content coding", nil, false, func(ctx context.Context, a *attack) {
		a.fetchRecipes(ctx, 2, 30*time.Second, "te-gzip-bomb", "ce-gzip-bomb")
	}},
	{"bodies", "bodies without end, that stall half-way or trickle", nil, false, func(ctx context.Context, a *attack) {
		a.fetchRecipes(ctx, 4, 30*time.Second, "endless-body", "endless-close", "stall-body", "trickle-body")
	}},
	{"redirects", "302 to itself, chains without end, one path's 301 to https", []int{6}, true, func(ctx context.Context, a *attack) {
		a.fetchRecipes(ctx, 2, 10*time.Second, "redirect-self", "redirect-chain", "redirect-https")
	}},
	{"validators", "304s to unconditional requests, 304s without validators on revalidation", nil, true, func(ctx context.Context, a *attack) {
		a.workers(ctx, 2, func(ctx context.Context, w, i int) {
			r, _ := evilorigin.Lookup("304-always")
			a.get(ctx, a.lab.Proxy, a.lab.EvilHost(), r.Recipe.Path(fmt.Sprintf("/a/304/%d", i%8)), 10*time.Second)
			r, _ = evilorigin.Lookup("304-revalidate")
			a.get(ctx, a.lab.Proxy, a.lab.EvilHost(), r.Recipe.Path(fmt.Sprintf("/a/304r/%d", i%4)), 10*time.Second)
			sleep(ctx, 100*time.Millisecond)
		})
	}},
	{"vary", "a new variant per request (random User-Agent, Accept, Accept-Language), Vary: *", nil, true, func(ctx context.Context, a *attack) {
		a.workers(ctx, 4, func(ctx context.Context, w, i int) {
			r, _ := evilorigin.Lookup("vary-explosion")
			if i%10 == 9 {
				r, _ = evilorigin.Lookup("vary-star")
			}
			a.get(ctx, a.lab.Proxy, a.lab.EvilHost(), r.Recipe.Path(fmt.Sprintf("/a/vary/%d", i%4)), 10*time.Second,
				"User-Agent", fmt.Sprintf("ua-%d", a.rng(w).Uint64()), "Accept", fmt.Sprintf("x/%d", a.rng(w).IntN(1000)),
				"Accept-Language", fmt.Sprintf("l%d", a.rng(w).IntN(1000)))
		})
	}},
	{"unkeyed", "the victims asked for with an evil User-Agent or Accept, two User-Agent lines, a folded User-Agent (CPDoS)", []int{3, 7}, true, func(ctx context.Context, a *attack) {
		a.workers(ctx, 3, func(ctx context.Context, w, i int) {
			v := Victims[i%3] // the cached victims, not the no-store one
			target := v.Recipe.Path(v.Path)
			switch (i / 3) % 4 {
			case 0:
				a.get(ctx, a.lab.Proxy, a.lab.EvilHost(), target, 10*time.Second, "User-Agent", "evil/1", "Accept-Language", fmt.Sprintf("l%d", i))
			case 1:
				a.get(ctx, a.lab.Proxy, a.lab.EvilHost(), target, 10*time.Second, "Accept", "text/evil", "Accept-Language", "en")
			case 2:
				a.raw(ctx, a.lab.Proxy, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: hostilelab-canary/1\r\nUser-Agent: evil\r\nAccept-Language: en\r\nConnection: close\r\n\r\n", target, a.lab.EvilHost()))
			case 3:
				a.raw(ctx, a.lab.Proxy, fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: hostilelab-canary/1\r\n evil\r\nAccept-Language: en\r\nConnection: close\r\n\r\n", target, a.lab.EvilHost()))
			}
			sleep(ctx, 50*time.Millisecond)
		})
	}},
	{"stalled-readers", "readers that never read, every 100 ms, of 6 MiB objects: in turn one of 4 replaced every second (s-maxage=1) and a new one", []int{2}, true, func(ctx context.Context, a *attack) {
		for i := 0; ctx.Err() == nil && i < 400; i++ {
			big := evilorigin.Recipe{Policy: "short", N: 6 << 20}
			path := fmt.Sprintf("/a/big/%d", (i/2)%4)
			if i%2 == 1 {
				big.Tag = fmt.Sprintf("%d-%d", a.seed, i)
				path = "/a/big/new"
			}
			a.stalledReader(ctx, a.lab.Proxy, a.lab.EvilHost(), big.Path(path))
			sleep(ctx, 100*time.Millisecond)
		}
		<-ctx.Done()
	}},
	{"abandoned", "downloads of trickling objects abandoned after their head, 8 at a time", []int{4}, true, func(ctx context.Context, a *attack) {
		a.workers(ctx, 8, func(ctx context.Context, w, i int) {
			r, _ := evilorigin.Lookup("trickle-body")
			rc := r.Recipe
			rc.N, rc.Tag = 1<<20, fmt.Sprintf("ab%d-%d-%d", a.seed, w, i)
			a.abandon(ctx, a.lab.Proxy, a.lab.EvilHost(), rc.Path("/a/abandon"))
			sleep(ctx, 100*time.Millisecond)
		})
	}},
	{"slowloris", "300 client connections sending their request head one field a second", nil, true, func(ctx context.Context, a *attack) {
		for i := 0; ctx.Err() == nil && i < 300; i++ {
			a.slowloris(ctx, a.lab.Proxy, a.lab.HonestHost())
			if i%50 == 49 {
				sleep(ctx, 50*time.Millisecond)
			}
		}
		<-ctx.Done()
	}},
	{"many-origins", "one client asks for 16 trickling cacheable objects at once on each of 16 origins of one address (16 ports): it may hold at most its share of the download slots, an eighth (32)", nil, true, func(ctx context.Context, a *attack) {
		a.manyOrigins(ctx, 16, 16, 32)
	}},
	{"mix", "combinations of every dimension chosen by evilorigin.Mix from the seed, through the proxy and its peer", []int{1, 2, 3, 4, 6}, false, func(ctx context.Context, a *attack) {
		a.workers(ctx, 4, func(ctx context.Context, w, i int) {
			s := a.seed*1_000_003 + uint64(w)*10_007 + uint64(i)
			via := a.lab.Proxy
			if i%3 == 2 {
				via = a.lab.Peer
			}
			a.get(ctx, via, a.lab.EvilHost(), evilorigin.Mix(s).Path(fmt.Sprintf("/a/mix/%d", s)), 20*time.Second)
		})
	}},
}

// manyOrigins has one client ask for perOrigin trickling cacheable
// objects on each of n origins at once, n-1 of them evil origins of
// their own on the evil origin's address and other ports, again and again
// until ctx ends; the class's bound on the downloads one client may hold
// at once is share (max_client_downloads), checked in Result.
func (a *attack) manyOrigins(ctx context.Context, n, perOrigin, share int) {
	a.heldBound = share
	hosts := []string{a.lab.EvilHost()}
	for range n - 1 {
		s, err := evilorigin.Listen(a.lab.Evil.Addr().Addr(), 0)
		if err != nil {
			panic("hostilelab: another evil origin: " + err.Error())
		}
		defer s.Close()
		hosts = append(hosts, coralHost(s.Addr()))
	}
	r, _ := evilorigin.Lookup("trickle-body")
	rc := r.Recipe
	rc.N = 1 << 20
	// The client has an address of its own: the canary's users are
	// other clients.
	d := *dialer
	d.LocalAddr = &net.TCPAddr{IP: a.lab.Evil.Addr().Addr().Next().AsSlice()}
	c := &http.Client{Transport: &http.Transport{Proxy: nil, DialContext: d.DialContext, DisableCompression: true, DisableKeepAlives: true},
		CheckRedirect: attackClient.CheckRedirect}
	a.workers(ctx, n*perOrigin, func(ctx context.Context, w, i int) {
		rc := rc
		rc.Tag = fmt.Sprintf("mo%d-%d-%d", a.seed, w, i)
		a.heldGet(ctx, c, a.lab.Proxy, hosts[w%n], rc.Path("/a/many"), 20*time.Second)
	})
}

// heldGet is get through c, counting the answers with status 200 being
// read at once (each holds a download slot of the proxy's) in held, and
// their peak in peakHeld. A refused request waits a little, as a client
// told Retry-After would.
func (a *attack) heldGet(ctx context.Context, c *http.Client, p *Proxy, host, target string, timeout time.Duration) {
	a.getWith(ctx, c, p, host, target, timeout, func(resp *http.Response) func() {
		if resp.StatusCode != http.StatusOK {
			sleep(ctx, 200*time.Millisecond)
			return nil
		}
		n := a.held.Add(1)
		for m := a.peakHeld.Load(); n > m && !a.peakHeld.CompareAndSwap(m, n); m = a.peakHeld.Load() {
		}
		return func() { a.held.Add(-1) }
	})
}

// LookupClass finds a class by name.
func LookupClass(name string) (Class, bool) {
	for _, c := range Classes {
		if c.Name == name {
			return c, true
		}
	}
	return Class{}, false
}

// attack is one run of a class: its hostile clients and what they got.
type attack struct {
	lab  *Lab
	seed uint64
	seq  atomic.Int64

	requests, errors atomic.Int64
	// held counts a class's answers being read at once, peakHeld their
	// peak, and heldBound bounds the peak (0: none); see heldGet.
	held, peakHeld atomic.Int64
	heldBound      int

	mu    sync.Mutex
	conns []net.Conn
	rngs  map[int]*rand.Rand
}

func (a *attack) rng(w int) *rand.Rand {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.rngs == nil {
		a.rngs = map[int]*rand.Rand{}
	}
	r, ok := a.rngs[w]
	if !ok {
		r = rand.New(rand.NewPCG(a.seed, uint64(w)))
		a.rngs[w] = r
	}
	return r
}

// workers runs n goroutines calling do(ctx, worker, iteration) until ctx
// ends.
func (a *attack) workers(ctx context.Context, n int, do func(ctx context.Context, w, i int)) {
	var wg sync.WaitGroup
	for w := range n {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				do(ctx, w, i)
			}
		}()
	}
	wg.Wait()
}

// fetchRecipes has n workers fetch the named behaviours in turn, each
// time as a new object (a tag of its own), through the proxy.
func (a *attack) fetchRecipes(ctx context.Context, n int, timeout time.Duration, names ...string) {
	a.workers(ctx, n, func(ctx context.Context, w, i int) {
		b, ok := evilorigin.Lookup(names[(w+i)%len(names)])
		if !ok {
			panic("hostilelab: no behaviour " + names[(w+i)%len(names)])
		}
		r := b.Recipe
		r.Tag = fmt.Sprintf("%d-%d", a.seed, a.seq.Add(1))
		a.get(ctx, a.lab.Proxy, a.lab.EvilHost(), r.Path("/a/"+b.Name), timeout)
	})
}

var attackClient = &http.Client{
	Transport: &http.Transport{Proxy: nil, DialContext: dialer.DialContext, DisableCompression: true,
		DisableKeepAlives: true, MaxResponseHeaderBytes: 1 << 20},
	CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
}

// get is a hostile client's GET through p: it reads the whole answer
// (at most 64 MiB) within timeout.
func (a *attack) get(ctx context.Context, p *Proxy, host, target string, timeout time.Duration, fields ...string) {
	a.getWith(ctx, attackClient, p, host, target, timeout, nil, fields...)
}

// getWith is get through c; seen, if set, is called with the answer's
// head before its body is read, and may return a function to call after.
func (a *attack) getWith(ctx context.Context, c *http.Client, p *Proxy, host, target string, timeout time.Duration, seen func(*http.Response) func(), fields ...string) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	a.requests.Add(1)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Addr()+target, nil)
	if err != nil {
		panic(err)
	}
	req.Host = host
	for i := 0; i+1 < len(fields); i += 2 {
		req.Header.Set(fields[i], fields[i+1])
	}
	resp, err := c.Do(req)
	if err != nil {
		a.errors.Add(1)
		return
	}
	defer resp.Body.Close()
	if seen != nil {
		if after := seen(resp); after != nil {
			defer after()
		}
	}
	if _, err := io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<20)); err != nil {
		a.errors.Add(1)
	}
}

// dialRaw opens a connection to p, with a small receive buffer if small.
func (a *attack) dialRaw(ctx context.Context, p *Proxy, small bool) (net.Conn, error) {
	d := *dialer
	if small {
		d.Control = func(_, _ string, c syscall.RawConn) error {
			var serr error
			err := c.Control(func(fd uintptr) { serr = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
			if err != nil {
				return err
			}
			return serr
		}
	}
	c, err := d.DialContext(ctx, "tcp", p.Addr())
	if err != nil {
		return nil, err
	}
	a.mu.Lock()
	a.conns = append(a.conns, c)
	a.mu.Unlock()
	return c, nil
}

// raw sends a request as it is and reads the answer (at most 1 MiB, 10 s).
func (a *attack) raw(ctx context.Context, p *Proxy, request string) {
	a.requests.Add(1)
	c, err := a.dialRaw(ctx, p, false)
	if err != nil {
		a.errors.Add(1)
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(10 * time.Second))
	if _, err := io.WriteString(c, request); err != nil {
		a.errors.Add(1)
		return
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(c, 1<<20))
}

// stalledReader asks for target and never reads: the connection stays
// open, its receive buffer full, until the class ends.
func (a *attack) stalledReader(ctx context.Context, p *Proxy, host, target string) {
	a.requests.Add(1)
	c, err := a.dialRaw(ctx, p, true)
	if err != nil {
		a.errors.Add(1)
		return
	}
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, host); err != nil {
		a.errors.Add(1)
	}
}

// abandon asks for target, reads the first bytes of the answer and closes
// the connection.
func (a *attack) abandon(ctx context.Context, p *Proxy, host, target string) {
	a.requests.Add(1)
	c, err := a.dialRaw(ctx, p, false)
	if err != nil {
		a.errors.Add(1)
		return
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(15 * time.Second))
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", target, host); err != nil {
		a.errors.Add(1)
		return
	}
	if _, err := io.ReadFull(c, make([]byte, 12)); err != nil {
		a.errors.Add(1)
	}
}

// slowloris opens a connection to p and sends a request head one field a
// second, without end, until the class ends.
func (a *attack) slowloris(ctx context.Context, p *Proxy, host string) {
	a.requests.Add(1)
	c, err := a.dialRaw(ctx, p, false)
	if err != nil {
		a.errors.Add(1)
		return
	}
	go func() {
		if _, err := fmt.Fprintf(c, "GET /c/0 HTTP/1.1\r\nHost: %s\r\n", host); err != nil {
			return
		}
		for i := 0; ; i++ {
			if !sleep(ctx, time.Second) {
				return
			}
			if _, err := fmt.Fprintf(c, "X-Slow-%d: a\r\n", i); err != nil {
				return
			}
		}
	}()
}

// closeAll closes every raw connection of the attack.
func (a *attack) closeAll() {
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, c := range a.conns {
		_ = c.Close()
	}
	a.conns = nil
}

// sleep waits d or until ctx ends; it reports whether the whole d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
