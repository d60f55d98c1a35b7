//go:build linux

package hostilelab

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/coralcdn/coral/internal/lab/evilorigin"
)

// CanaryTimeout bounds one canary request, head to last byte: a slower
// answer is a failure.
const CanaryTimeout = 10 * time.Second

// Kinds of canary probe.
const (
	// ProbeHonest: an object of the honest origin, through the attacked
	// proxy or its peer. Every one must succeed.
	ProbeHonest = "honest"
	// ProbeVictim: a cached object of the evil origin that the attacks
	// try to replace (error pages keyed on unkeyed fields, Vary indexes
	// wiped). It must keep its bytes: anything else is another user's
	// response changed.
	ProbeVictim = "victim"
	// ProbeSameHost: a no-store object of the evil origin, fetched each
	// time: the evil origin's other objects must stay reachable over
	// plain http (one path's https redirect must not switch the host;
	// abandoned downloads must not hold every per-origin slot).
	ProbeSameHost = "same-host"
)

// Victims are the evil origin's objects the canary checks: a 200 fresh
// for 2 s that turns into a cacheable error page for "evil" request
// fields, one with Vary: Accept-Language that turns into a 404 without
// Vary, one with Vary: User-Agent that turns into a 500 for two
// User-Agent lines, and a no-store object. The cached ones come first.
var Victims = []struct {
	Kind   string
	Path   string
	Recipe evilorigin.Recipe
	Fields []string // request fields the canary sends, name then value
}{
	{ProbeVictim, "/victim/unkeyed", evilorigin.Recipe{Policy: "error-on-unkeyed-short", N: 8 << 10}, nil},
	{ProbeVictim, "/victim/vary", evilorigin.Recipe{Policy: "vary-then-error", N: 8 << 10}, []string{"Accept-Language", "en"}},
	{ProbeVictim, "/victim/vary-ua", evilorigin.Recipe{Policy: "vary-ua-error", N: 8 << 10}, nil},
	{ProbeSameHost, "/victim/fresh", evilorigin.Recipe{Policy: "no-store", N: 8 << 10}, nil},
}

// probe is one canary request.
type probe struct {
	kind    string
	latency time.Duration
	err     string // "" when it succeeded
	// changed: the answer was not the object but some other response
	// presented as it: other bytes with 200, the poison body, or an error
	// served from the cache. A failure without it is the object being
	// unavailable (a 502 or 503, a timeout).
	changed bool
}

// canary fetches honest objects and the victims, one at a time, until
// stopped.
type canary struct {
	lab    *Lab
	client *http.Client
	// ctx ends the probe in flight when the canary stops (such a probe is
	// not recorded).
	ctx    context.Context
	cancel context.CancelFunc
	stop   chan struct{}
	done   chan struct{}
	mu     sync.Mutex
	probes []probe
}

func newCanaryClient() *http.Client {
	return &http.Client{
		Timeout: CanaryTimeout,
		Transport: &http.Transport{Proxy: nil, DialContext: dialer.DialContext, DisableCompression: true,
			MaxIdleConnsPerHost: 4},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
}

// startCanary starts two probing loops: the honest objects, and the evil
// origin's victims, so that a victim that takes its whole timeout does not
// thin out the honest probes.
func (l *Lab) startCanary() *canary {
	c := &canary{lab: l, client: newCanaryClient(), stop: make(chan struct{}), done: make(chan struct{})}
	c.ctx, c.cancel = context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); c.loop(c.honest) }()
	go func() { defer wg.Done(); c.loop(c.victim) }()
	go func() { wg.Wait(); close(c.done) }()
	return c
}

func (c *canary) loop(one func(i int) probe) {
	defer c.client.CloseIdleConnections()
	for i := 0; ; i++ {
		p := one(i)
		if c.ctx.Err() != nil {
			return // stopped in flight: not a result
		}
		c.record(p)
		select {
		case <-c.stop:
			return
		case <-time.After(20 * time.Millisecond):
		}
	}
}

func (c *canary) record(p probe) {
	c.mu.Lock()
	c.probes = append(c.probes, p)
	c.mu.Unlock()
}

// victim is the i-th probe of the victims.
func (c *canary) victim(i int) probe {
	v := Victims[i%len(Victims)]
	return c.fetch(v.Kind, c.lab.Proxy, c.lab.EvilHost(), v.Recipe.Path(v.Path), evilorigin.Content(v.Path, v.Recipe.N), v.Fields...)
}

// honest is the i-th probe of the honest objects: cacheable ones through
// the proxy and the peer in turn, and every eighth a no-store one (an
// origin fetch) through the proxy.
func (c *canary) honest(i int) probe {
	l := c.lab
	via := l.Proxy
	if i%2 == 1 {
		via = l.Peer
	}
	path := fmt.Sprintf("/c/%d", i%16)
	if i%8 == 6 {
		path, via = fmt.Sprintf("/n/%d", i%5), l.Proxy
	}
	return c.fetch(ProbeHonest, via, l.HonestHost(), path, evilorigin.Content(path, HonestSize(path)))
}

// fetch GETs target from p for host and checks status 200 and the body.
func (c *canary) fetch(kind string, p *Proxy, host, target string, want []byte, fields ...string) (pr probe) {
	start := time.Now()
	pr.kind = kind
	defer func() { pr.latency = time.Since(start) }()
	ctx := c.ctx
	if ctx == nil {
		ctx = context.Background()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+p.Addr()+target, nil)
	if err != nil {
		pr.err = err.Error()
		return pr
	}
	req.Host = host
	req.Header.Set("User-Agent", "hostilelab-canary/1")
	for i := 0; i+1 < len(fields); i += 2 {
		req.Header.Set(fields[i], fields[i+1])
	}
	resp, err := c.client.Do(req)
	if err != nil {
		pr.err = fmt.Sprintf("%s %s via %s: %v", host, target, p.Name, err)
		return pr
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, int64(len(want))+1))
	switch {
	case err != nil:
		pr.err = fmt.Sprintf("%s %s via %s: body: %v", host, target, p.Name, err)
	case resp.StatusCode != http.StatusOK:
		pr.err = fmt.Sprintf("%s %s via %s: %s (%s): %.80q", host, target, p.Name, resp.Status, resp.Header.Get("Cache-Status"), body)
		pr.changed = string(body) == evilorigin.Poison || strings.Contains(resp.Header.Get("Cache-Status"), "hit")
	case !bytes.Equal(body, want):
		pr.err = fmt.Sprintf("%s %s via %s: %d bytes, not the object's %d (%s): %.80q", host, target, p.Name, len(body), len(want), resp.Header.Get("Cache-Status"), body)
		pr.changed = true
	}
	return pr
}

// CanaryStats summarize the probes of one kind.
type CanaryStats struct {
	Requests int
	Failures int
	// Changed are the failures that were another response presented as
	// the object (see probe.changed); the others were unavailability.
	Changed  int
	P99, Max time.Duration
	// FirstErrors are up to three failures, as they were seen.
	FirstErrors []string
}

func (c *canary) finish() map[string]CanaryStats {
	close(c.stop)
	c.cancel()
	<-c.done
	c.mu.Lock()
	defer c.mu.Unlock()
	out := map[string]CanaryStats{}
	lat := map[string][]time.Duration{}
	for _, p := range c.probes {
		s := out[p.kind]
		s.Requests++
		if p.changed {
			s.Changed++
		}
		if p.err != "" {
			s.Failures++
			if len(s.FirstErrors) < 3 {
				s.FirstErrors = append(s.FirstErrors, p.err)
			}
		}
		s.Max = max(s.Max, p.latency)
		out[p.kind] = s
		lat[p.kind] = append(lat[p.kind], p.latency)
	}
	for k, v := range lat {
		slices.Sort(v)
		s := out[k]
		s.P99 = v[min(len(v)-1, len(v)*99/100)]
		out[k] = s
	}
	return out
}
