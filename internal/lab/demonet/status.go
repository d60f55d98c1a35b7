//go:build linux

package demonet

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"time"

	"github.com/coralcdn/coral/internal/lab/proc"
	"github.com/coralcdn/coral/internal/lab/resolvers"
	"github.com/miekg/dns"
)

// WaitReady waits until the network works end to end: every running
// CoreDNS reports ready (joined, first sweep done) and sees every running
// proxy live at each level, and every running Caddy has joined and knows
// members of its clusters.
func (n *Net) WaitReady(ctx context.Context) error {
	var live []*Node
	for _, nd := range n.Nodes {
		if nd.Caddy.Running() {
			live = append(live, nd)
		}
	}
	region := map[string]int{}
	for _, nd := range live {
		region[nd.Region]++
	}
	for _, nd := range n.Nodes {
		if !nd.CoreDNS.Running() && !nd.Caddy.Running() {
			continue
		}
		if err := n.poll(ctx, nd.CoreDNS.Name+" ready", func() error {
			return httpOK("http://" + netip.AddrPortFrom(nd.Addr, PortReady).String() + "/ready")
		}); err != nil {
			return err
		}
		if err := n.poll(ctx, nd.Caddy.Name+" joined", func() error {
			st, err := nd.Status()
			if err != nil {
				return err
			}
			if st.Node == nil || !st.Node.Joined {
				return errors.New("not joined")
			}
			return nil
		}); err != nil {
			return err
		}
	}
	for _, nd := range live {
		if err := n.waitHTTPS(ctx, nd); err != nil {
			return err
		}
	}
	for _, nd := range n.Nodes {
		if !nd.CoreDNS.Running() {
			continue
		}
		want := map[int]int{0: len(live), 1: len(live), 2: region[nd.Region]}
		if err := n.poll(ctx, nd.CoreDNS.Name+" sees every proxy", func() error {
			got, err := nd.LiveProxies()
			if err != nil {
				return err
			}
			for lvl, w := range want {
				if got[lvl] != w {
					return fmt.Errorf("live proxies by level %v, want %v", got, want)
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	return nil
}

// poll runs cond every 100 ms until it succeeds, ctx ends, or a process
// exits unexpectedly.
func (n *Net) poll(ctx context.Context, what string, cond func() error) error {
	var last error
	for {
		if err := n.unexpectedExits(); err != nil {
			return fmt.Errorf("waiting for %s: %w", what, err)
		}
		if last = cond(); last == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s: %w (last: %v)", what, ctx.Err(), last)
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// unexpectedExits reports processes that died without being told to.
func (n *Net) unexpectedExits() error {
	var errs []error
	for _, nd := range n.Nodes {
		for _, p := range []*proc.Process{nd.CoreDNS, nd.Caddy} {
			if p != nil {
				errs = append(errs, p.Exited())
			}
		}
	}
	if n.CA != nil {
		errs = append(errs, n.CA.Exited())
	}
	for _, r := range n.Resolvers {
		if r != nil && !r.Running() {
			errs = append(errs, fmt.Errorf("%s exited:\n%s", r.Kind, r.LogTail(2000)))
		}
	}
	return errors.Join(errs...)
}

// Check reports processes that exited without being told to.
func (n *Net) Check() error { return n.unexpectedExits() }

var plainClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

func httpOK(url string) error {
	resp, err := plainClient.Get(url)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, resp.Status)
	}
	return nil
}

// Status is the part of a Caddy node's GET /coral/status the demo reads
// (module/caddy/admin.go).
type Status struct {
	Node *struct {
		ID      string `json:"id"`
		Address string `json:"address"`
		Joined  bool   `json:"joined"`
	} `json:"node"`
	Levels []struct {
		Level    int    `json:"level"`
		Cluster  string `json:"cluster"`
		Contacts int    `json:"contacts"`
	} `json:"levels"`
	Caches []struct {
		Objects    int   `json:"objects"`
		Bytes      int64 `json:"bytes"`
		InProgress int   `json:"in_progress"`
		Commits    int64 `json:"commits"`
	} `json:"caches"`
}

// AdminURL is the node's Caddy admin API address.
func (nd *Node) AdminURL() string {
	return "http://" + netip.AddrPortFrom(nd.Addr, PortAdmin).String()
}

// Admin GETs path from the node's Caddy admin API into v (JSON).
func (nd *Node) Admin(path string, v any) error {
	req, err := http.NewRequest(http.MethodGet, nd.AdminURL()+path, nil)
	if err != nil {
		return err
	}
	resp, err := plainClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("admin %s: %s: %s", path, resp.Status, strings.TrimSpace(string(b)))
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// Status returns the node's /coral/status.
func (nd *Node) Status() (*Status, error) {
	var st Status
	if err := nd.Admin("/coral/status", &st); err != nil {
		return nil, err
	}
	return &st, nil
}

// CacheObject is one entry of GET /coral/cache.
type CacheObject struct {
	Key     string    `json:"key"`
	URL     string    `json:"url"`
	Status  int       `json:"status"`
	Size    int64     `json:"size"`
	Source  string    `json:"source"`
	Expires time.Time `json:"expires"`
	Writing bool      `json:"writing"`
}

// CacheObjects lists the node's cached objects (at most 1000).
func (nd *Node) CacheObjects() ([]CacheObject, error) {
	var page struct {
		Objects []CacheObject `json:"objects"`
	}
	err := nd.Admin("/coral/cache?limit=1000", &page)
	return page.Objects, err
}

// Metrics returns the node's CoreDNS metrics text.
func (nd *Node) Metrics() (string, error) {
	resp, err := plainClient.Get("http://" + netip.AddrPortFrom(nd.Addr, PortMetrics).String() + "/metrics")
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return string(b), err
}

// LiveProxies returns, by level, how many proxies the node's CoreDNS
// found live in its last sweep (coredns_coral_live_proxies).
func (nd *Node) LiveProxies() (map[int]int, error) {
	text, err := nd.Metrics()
	if err != nil {
		return nil, err
	}
	out := map[int]int{}
	sc := bufio.NewScanner(strings.NewReader(text))
	for sc.Scan() {
		line := sc.Text()
		rest, ok := strings.CutPrefix(line, "coredns_coral_live_proxies{")
		if !ok {
			continue
		}
		labels, value, ok := strings.Cut(rest, "} ")
		if !ok {
			continue
		}
		var level int = -1
		for _, kv := range strings.Split(labels, ",") {
			if v, ok := strings.CutPrefix(kv, `level="`); ok {
				level, _ = strconv.Atoi(strings.TrimSuffix(v, `"`))
			}
		}
		f, err := strconv.ParseFloat(value, 64)
		if level >= 0 && err == nil {
			out[level] = int(f)
		}
	}
	return out, nil
}

// Lookup asks resolver r for name's A records and returns the addresses
// in the order given, and the answer's smallest TTL.
func Lookup(ctx context.Context, r netip.Addr, name string) ([]netip.Addr, uint32, error) {
	c := &dns.Client{Timeout: 5 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), dns.TypeA)
	m.SetEdns0(1232, false)
	resp, _, err := c.ExchangeContext(ctx, m, netip.AddrPortFrom(r, 53).String())
	if err != nil {
		return nil, 0, err
	}
	return resolvers.AnswerA(name, resp)
}
