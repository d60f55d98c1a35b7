//go:build linux

// Package loadlab starts, on loopback, the real servers that load-aware
// redirection and fair bandwidth shares are about (issue 41): bin/caddy
// proxies in pinned clusters, each with a bandwidth budget, one bin/coredns
// with the coral plugin, and origins inside the calling process. The
// experiment eval/loadaware and the integration tests in test/loadlab
// drive it.
//
// The address plan, in NET (default 127.0.154):
//
//	NET.1        CoreDNS (DNS on :5300, its DSHT node on :4000, metrics :9153)
//	NET.2, .3    origins (HTTP :8080)
//	NET.11–.1n   proxies (HTTP :8080, DSHT :4000, admin :2019)
//	NET+1.1–     client addresses (127.0.155.x for the default)
//
// Loopback RTTs are all near zero, so the clusters are pinned: proxies are
// placed in sites (level 2) and regions (level 1) by Spec.Sites, and the
// DNS server is in the first site; clients are classified at level 2, so
// the DNS server answers them from that site first.
package loadlab

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
	"github.com/miekg/dns"
)

// Ports and zones of the lab.
const (
	Zone      = "nyucd.test"
	AliasZone = "nyud.test"
	HTTPPort  = 8080
	DNSPort   = 5300
	dhtPort   = 4000
	adminPort = 2019
	metrics   = 9153
)

// Site is one level-2 cluster: its name, its region (level-1 cluster) and
// how many proxies it has.
type Site struct {
	Name, Region string
	Proxies      int
}

// Spec is a lab.
type Spec struct {
	// Net is the first three octets of the addresses (default 127.0.154).
	Net string
	// Dir holds configurations, caches and logs (required).
	Dir string
	// Caddy and CoreDNS are the binaries (default bin/caddy, bin/coredns).
	Caddy, CoreDNS string
	// Sites place the proxies; the DNS server is in the first site. With
	// no DNS wanted (NoDNS), one site of one proxy is typical.
	Sites []Site
	NoDNS bool
	// Budget is each proxy's bandwidth_budget (per hour), "" for none;
	// Share its bandwidth_share ("" for the default, fair).
	Budget, Share string
	// LoadThreshold is the DNS server's load_threshold ("off", "80").
	LoadThreshold string
	// AnswerTTL is the DNS server's answer_ttl in seconds (default 30).
	AnswerTTL int
	// Logf, if set, gets progress messages.
	Logf func(format string, args ...any)
}

// Proxy is one bin/caddy.
type Proxy struct {
	Addr         netip.Addr
	Site, Region string
	srv          *proc.Process
}

// Lab is a running lab.
type Lab struct {
	Spec    Spec
	Proxies []*Proxy
	DNS     *proc.Process // nil with NoDNS
	procs   []*proc.Process
}

// IP is address last of the lab's network, shifted by net networks
// (1: the clients' network).
func (s Spec) IP(net, last int) netip.Addr {
	p := strings.Split(s.Net, ".")
	third, _ := strconv.Atoi(p[2])
	return netip.MustParseAddr(fmt.Sprintf("%s.%s.%d.%d", p[0], p[1], third+net, last))
}

// DNSAddr is the DNS server's address.
func (l *Lab) DNSAddr() netip.AddrPort { return netip.AddrPortFrom(l.Spec.IP(0, 1), DNSPort) }

func (s *Spec) defaults() error {
	if s.Net == "" {
		s.Net = "127.0.154"
	}
	if s.Dir == "" {
		return errors.New("loadlab: no directory")
	}
	var err error
	if s.Caddy == "" {
		if s.Caddy, err = labconf.Binary("caddy"); err != nil {
			return err
		}
	}
	if s.CoreDNS == "" && !s.NoDNS {
		if s.CoreDNS, err = labconf.Binary("coredns"); err != nil {
			return err
		}
	}
	if s.AnswerTTL == 0 {
		s.AnswerTTL = 30
	}
	if s.Logf == nil {
		s.Logf = func(string, ...any) {}
	}
	return nil
}

// Start starts the lab and waits until every proxy has joined and, with a
// DNS server, until it sees every proxy live at every level. Stop it even
// when Start fails.
func Start(ctx context.Context, spec Spec) (*Lab, error) {
	if err := spec.defaults(); err != nil {
		return nil, err
	}
	l := &Lab{Spec: spec}
	keyFile := filepath.Join(spec.Dir, "network.key")
	if err := coraldht.WriteKeyFile(keyFile); err != nil {
		return l, err
	}
	dnsNode := netip.AddrPortFrom(spec.IP(0, 1), dhtPort)
	i := 0
	for _, s := range spec.Sites {
		for range s.Proxies {
			p := &Proxy{Addr: spec.IP(0, 11+i), Site: s.Name, Region: s.Region}
			var boot []netip.AddrPort
			switch {
			case !spec.NoDNS:
				boot = []netip.AddrPort{dnsNode}
			case i > 0:
				boot = []netip.AddrPort{netip.AddrPortFrom(spec.IP(0, 11), dhtPort)}
			}
			if err := l.startProxy(p, i, keyFile, boot); err != nil {
				return l, err
			}
			i++
		}
	}
	if !spec.NoDNS {
		if err := l.startDNS(keyFile); err != nil {
			return l, err
		}
	}
	for _, p := range l.Proxies {
		if err := waitFor(ctx, p.srv, 60*time.Second, func() error { return p.joined(ctx) }); err != nil {
			return l, fmt.Errorf("proxy %s: %w", p.Addr, err)
		}
	}
	if spec.NoDNS {
		return l, nil
	}
	return l, waitFor(ctx, l.DNS, 90*time.Second, func() error { return l.allLive(ctx) })
}

func (l *Lab) startProxy(p *Proxy, i int, keyFile string, boot []netip.AddrPort) error {
	s := l.Spec
	dir := filepath.Join(s.Dir, fmt.Sprintf("proxy-%d", i))
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	admin := netip.AddrPortFrom(p.Addr, adminPort)
	origins := s.Net + ".0/24"
	var extra []labconf.Directive
	if s.Budget != "" {
		extra = append(extra, labconf.D("bandwidth_budget", s.Budget, "per", "1h"))
	}
	if s.Share != "" {
		extra = append(extra, labconf.D("bandwidth_share", s.Share))
	}
	text := labconf.Caddy{
		Comment: fmt.Sprintf("internal/lab/loadlab proxy %d (%s, %s)", i, p.Site, p.Region), Admin: admin,
		AdminOrigins: []string{admin.String()}, HTTPSOff: true, Grace: "1s",
		Options: []labconf.Directive{labconf.D("log").With(labconf.D("level", "WARN"))},
		Coral:   labconf.Node{Listen: netip.AddrPortFrom(p.Addr, dhtPort), Bootstrap: boot, KeyFile: keyFile, Clusters: map[int]string{1: p.Region, 2: p.Site}},
		Sites: []labconf.Directive{labconf.D(fmt.Sprintf("http://:%d", HTTPPort)).With(
			labconf.D("bind", p.Addr),
			labconf.Proxy{Zone: AliasZone, CacheDir: filepath.Join(dir, "cache"), CacheSize: "256MiB",
				AllowOrigins: []string{origins}, AllowPeers: []string{origins}, RateLimit: "off",
				PeerAddress: netip.AddrPortFrom(p.Addr, HTTPPort).String(), Extra: extra}.Directive(),
		)},
	}.String()
	cf := filepath.Join(dir, "Caddyfile")
	if err := labconf.WriteFile(cf, text); err != nil {
		return err
	}
	name := fmt.Sprintf("caddy-%d", i)
	srv, err := proc.Start(labconf.CaddyArgv(s.Caddy, cf), proc.Options{Name: name, Dir: dir, Env: labconf.CaddyEnv(dir), Log: filepath.Join(dir, name+".log"), TailLines: 20})
	if err != nil {
		return err
	}
	p.srv = srv
	l.Proxies = append(l.Proxies, p)
	l.procs = append(l.procs, srv)
	return nil
}

func (l *Lab) startDNS(keyFile string) error {
	s := l.Spec
	dir := filepath.Join(s.Dir, "coredns")
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	first := s.Sites[0]
	addr := s.IP(0, 1)
	plugin := labconf.CoralPlugin{Zone: Zone, Alias: AliasZone,
		Node:     labconf.Node{Listen: netip.AddrPortFrom(addr, dhtPort), KeyFile: keyFile, Clusters: map[int]string{1: first.Region, 2: first.Name}},
		Probe:    "none",
		Classify: []string{s.IP(1, 0).String() + "/24 2"},
		// Liveness as the demo network has it: proxies heard within 3 s,
		// swept every second.
		AnswerTTL: s.AnswerTTL, LiveWithin: "3s", CheckEvery: "1s",
		Extra: []labconf.Directive{labconf.D("proximity", "off"), labconf.D("state_dir", "off"),
			labconf.If(s.LoadThreshold != "", labconf.D("load_threshold", s.LoadThreshold))},
	}
	text := labconf.Corefile("internal/lab/loadlab DNS server", labconf.D(fmt.Sprintf("%s:%d", Zone, DNSPort), fmt.Sprintf("%s:%d", AliasZone, DNSPort)).With(
		labconf.D("bind", addr),
		plugin.Directive(),
		labconf.D("prometheus", netip.AddrPortFrom(addr, metrics)),
		labconf.D("errors"),
	))
	cf := filepath.Join(dir, "Corefile")
	if err := labconf.WriteFile(cf, text); err != nil {
		return err
	}
	srv, err := proc.Start([]string{s.CoreDNS, "-conf", cf}, proc.Options{Name: "coredns", Dir: dir, Log: filepath.Join(dir, "coredns.log"), TailLines: 20})
	if err != nil {
		return err
	}
	l.DNS = srv
	l.procs = append(l.procs, srv)
	return nil
}

// Stop stops every process.
func (l *Lab) Stop() {
	var wg sync.WaitGroup
	for _, p := range l.procs {
		wg.Go(func() { _ = p.Stop(5 * time.Second) })
	}
	wg.Wait()
}

// Exited reports the first process that exited, if any did.
func (l *Lab) Exited() error {
	for _, p := range l.procs {
		if err := p.Exited(); err != nil {
			return err
		}
	}
	return nil
}

// waitFor polls cond every 100 ms until it holds, p exits, ctx ends or
// within passes.
func waitFor(ctx context.Context, p *proc.Process, within time.Duration, cond func() error) error {
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return nil
		}
		if perr := p.Exited(); perr != nil {
			return perr
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not within %v: %w", within, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// get fetches url with a short timeout and returns its body.
func get(ctx context.Context, url string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("%s: %s", url, resp.Status)
	}
	return string(b), err
}

// joined: the proxy's admin API says its node has joined.
func (p *Proxy) joined(ctx context.Context) error {
	body, err := get(ctx, fmt.Sprintf("http://%s/coral/status", netip.AddrPortFrom(p.Addr, adminPort)))
	if err != nil {
		return err
	}
	var st struct {
		Node *struct{ Joined bool } `json:"node"`
	}
	if err := json.Unmarshal([]byte(body), &st); err != nil {
		return err
	}
	if st.Node == nil || !st.Node.Joined {
		return errors.New("not joined")
	}
	return nil
}

// Metric returns the sum of the samples of the Prometheus metric name
// (with every label in match) that the proxy's admin API serves.
func (p *Proxy) Metric(ctx context.Context, name string, match ...string) (float64, error) {
	body, err := get(ctx, fmt.Sprintf("http://%s/metrics", netip.AddrPortFrom(p.Addr, adminPort)))
	if err != nil {
		return 0, err
	}
	return sumMetric(body, name, match...), nil
}

// sumMetric sums the samples of name in a Prometheus text exposition
// whose labels include every one of match ("k=\"v\"").
func sumMetric(text, name string, match ...string) float64 {
	var sum float64
	for line := range strings.SplitSeq(text, "\n") {
		if !strings.HasPrefix(line, name) || len(line) == len(name) || line[len(name)] != '{' && line[len(name)] != ' ' {
			continue
		}
		ok := true
		for _, m := range match {
			ok = ok && strings.Contains(line, m)
		}
		if i := strings.LastIndexByte(line, ' '); ok && i > 0 {
			v, err := strconv.ParseFloat(line[i+1:], 64)
			if err == nil {
				sum += v
			}
		}
	}
	return sum
}

// allLive: the DNS server's last sweep found every proxy live at level 0,
// its region's at level 1 and its site's at level 2.
func (l *Lab) allLive(ctx context.Context) error {
	body, err := get(ctx, fmt.Sprintf("http://%s/metrics", netip.AddrPortFrom(l.Spec.IP(0, 1), metrics)))
	if err != nil {
		return err
	}
	first := l.Spec.Sites[0]
	want := [3]int{}
	for _, p := range l.Proxies {
		want[0]++
		if p.Region == first.Region {
			want[1]++
		}
		if p.Site == first.Name {
			want[2]++
		}
	}
	for lvl, n := range want {
		if got := sumMetric(body, "coredns_coral_live_proxies", fmt.Sprintf(`level="%d"`, lvl)); int(got) != n {
			return fmt.Errorf("level %d: %v live proxies, want %d", lvl, got, n)
		}
	}
	return nil
}

// Resolve asks the DNS server for the proxies of host from the client
// address from, and returns them with the answer's TTL.
func (l *Lab) Resolve(ctx context.Context, from netip.Addr, host string) ([]netip.Addr, time.Duration, error) {
	q := new(dns.Msg)
	q.SetQuestion(dns.Fqdn(host), dns.TypeA)
	c := &dns.Client{Net: "tcp", Timeout: 2 * time.Second, Dialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice()}}}
	r, _, err := c.ExchangeContext(ctx, q, l.DNSAddr().String())
	if err != nil {
		return nil, 0, err
	}
	var out []netip.Addr
	ttl := time.Duration(0)
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			ip, _ := netip.AddrFromSlice(a.A)
			out = append(out, ip.Unmap())
			ttl = time.Duration(a.Hdr.Ttl) * time.Second
		}
	}
	if len(out) == 0 {
		return nil, 0, fmt.Errorf("no proxy for %s: %s", host, dns.RcodeToString[r.Rcode])
	}
	return out, ttl, nil
}

// Origin is an HTTP server in this process that serves Size bytes at any
// path (cacheable for an hour) after Delay, and counts its requests: by
// proxies, and directly by clients a proxy redirected (coral-no-serve).
type Origin struct {
	Addr     netip.AddrPort
	Size     int
	Delay    time.Duration
	srv      *http.Server
	byProxy  atomic.Int64
	byClient atomic.Int64
}

// StartOrigin starts an origin on addr.
func StartOrigin(addr netip.AddrPort, size int, delay time.Duration) (*Origin, error) {
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		return nil, fmt.Errorf("origin %s (another run?): %w", addr, err)
	}
	o := &Origin{Addr: addr, Size: size, Delay: delay}
	body := strings.Repeat("c", size)
	o.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.URL.RawQuery, "coral-no-serve") {
			o.byClient.Add(1)
		} else {
			o.byProxy.Add(1)
		}
		time.Sleep(o.Delay)
		w.Header().Set("Cache-Control", "max-age=3600")
		io.WriteString(w, body)
	})}
	go func() { _ = o.srv.Serve(ln) }()
	return o, nil
}

// Host is the Coralized host name of the origin.
func (o *Origin) Host() string {
	return fmt.Sprintf("%s.%d.%s", o.Addr.Addr(), o.Addr.Port(), AliasZone)
}

// Requests are the origin's requests so far: from proxies and from
// redirected clients.
func (o *Origin) Requests() (byProxy, byClient int64) { return o.byProxy.Load(), o.byClient.Load() }

// Close stops the origin.
func (o *Origin) Close() { _ = o.srv.Close() }

// Fetch is one client request and where it was served.
type Fetch struct {
	Status     int           // the first response's status (302: redirected)
	Redirected bool          // served by the origin after a coral-no-serve redirect
	Bytes      int           // body bytes received (from the proxy or, redirected, the origin)
	Took       time.Duration // including the redirect's request
}

// Get asks the proxy at proxy for path of the origin with c, following a
// redirect to the origin (coral-no-serve) as a browser would.
func Get(ctx context.Context, c *http.Client, proxy netip.Addr, o *Origin, path string) (Fetch, error) {
	start := time.Now()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s%s", netip.AddrPortFrom(proxy, HTTPPort), path), nil)
	if err != nil {
		return Fetch{}, err
	}
	req.Host = o.Host()
	resp, err := c.Do(req)
	if err != nil {
		return Fetch{}, err
	}
	n, err := io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	f := Fetch{Status: resp.StatusCode, Bytes: int(n)}
	if err != nil {
		return f, err
	}
	if resp.StatusCode == http.StatusFound {
		loc := resp.Header.Get("Location")
		if !strings.HasSuffix(loc, "coral-no-serve") {
			return f, fmt.Errorf("redirect to %q", loc)
		}
		r2, err := http.NewRequestWithContext(ctx, http.MethodGet, loc, nil)
		if err != nil {
			return f, err
		}
		resp, err := c.Do(r2)
		if err != nil {
			return f, err
		}
		n, err := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		f.Redirected, f.Bytes = true, int(n)
		if err != nil {
			return f, err
		}
	}
	f.Took = time.Since(start)
	if f.Bytes != o.Size {
		return f, fmt.Errorf("%d bytes, want %d (status %d)", f.Bytes, o.Size, f.Status)
	}
	return f, nil
}

// Client is an HTTP client whose connections come from a, which follows
// no redirect itself (Get does).
func Client(a netip.Addr) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: a.AsSlice()}}
	return &http.Client{Timeout: 30 * time.Second,
		Transport:     &http.Transport{Proxy: nil, DialContext: d.DialContext, MaxIdleConnsPerHost: 4},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}
