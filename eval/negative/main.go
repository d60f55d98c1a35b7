// Command negative measures what reaches an origin when crowds ask a
// fleet of three Coral proxies (bin/caddy, on loopback) for answers that
// are not ordinary cacheable successes: a bare 404 and a bare 500 (no
// freshness information), a 200 the origin forbids storing (no-store),
// and a cacheable 200 from a slow origin (1 s to its head). For each it
// sends a crowd of 100 concurrent requests and one of 1,000 sequential
// requests, spread round-robin over the three proxies, each request from
// one of 100 client addresses, and counts the origin's requests (issue
// 41: errors cached network-wide, crowds collapsed whatever the answer).
//
//	go run ./eval/negative [-caddy bin/caddy] [-net 127.0.96] [-out docs/eval]
//
// It prints a table and writes docs/eval/negative.json with its
// provenance. The lab's addresses: the proxies on NET.10-12 (HTTP 8080,
// DSHT 4000, admin 2019), the origin on NET.2:8080, clients on
// NET+1.1-100 (127.0.97.x for the default).
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
)

const (
	zone       = "nyud.test"
	httpPort   = 8080
	dhtPort    = 4000
	adminPort  = 2019
	clients    = 100
	concurrent = 100
	sequential = 1000
	slowHead   = time.Second
)

// answers are the origin's answers measured, by path prefix.
var answers = []struct{ name, doc string }{
	{"404", "404 without freshness information"},
	{"500", "500 without freshness information"},
	{"uncacheable", "200 with Cache-Control: no-store"},
	{"slow", "200, max-age=600, after 1 s"},
}

// Row is one crowd on one answer.
type Row struct {
	Answer         string         `json:"answer"`
	Doc            string         `json:"doc"`
	Crowd          string         `json:"crowd"` // "concurrent" or "sequential"
	Requests       int            `json:"requests"`
	OriginRequests int64          `json:"origin_requests"`
	Statuses       map[string]int `json:"statuses"` // client-side status (or "error") → count
	Seconds        float64        `json:"seconds"`
}

// Result is the file written.
type Result struct {
	Provenance *evalrun.Provenance `json:"provenance"`
	Proxies    int                 `json:"proxies"`
	Clients    int                 `json:"clients"`
	Rows       []Row               `json:"rows"`
}

func main() {
	caddy := flag.String("caddy", "", "the Caddy binary (default: bin/caddy of the repository)")
	network := flag.String("net", "127.0.96", "the first three octets of the lab's addresses")
	out := flag.String("out", evalrun.ResultsDir, "directory for negative.json (\"\": none)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	if err := run(ctx, *caddy, *network, *out); err != nil {
		fmt.Fprintln(os.Stderr, "negative:", err)
		os.Exit(1)
	}
}

func run(ctx context.Context, bin, network, out string) error {
	if bin == "" {
		var err error
		if bin, err = labconf.Binary("caddy"); err != nil {
			return err
		}
	}
	prov := evalrun.StartProvenance("negative", evalrun.TopologyLoopback)
	ip := func(net string, last int) netip.Addr { return netip.MustParseAddr(fmt.Sprintf("%s.%d", net, last)) }
	o, err := startOrigin(netip.AddrPortFrom(ip(network, 2), httpPort))
	if err != nil {
		return err
	}
	defer o.srv.Close()
	dir, err := os.MkdirTemp("", "coral-negative-")
	if err != nil {
		return err
	}
	defer os.RemoveAll(dir)
	proxies, err := startProxies(ctx, bin, dir, network, ip)
	defer func() {
		for _, p := range proxies {
			_ = p.srv.Stop(5 * time.Second)
		}
	}()
	if err != nil {
		return err
	}
	clientNet := strings.Split(network, ".")
	clientBase := fmt.Sprintf("%s.%s.%d", clientNet[0], clientNet[1], atoi(clientNet[2])+1)
	cs := make([]*http.Client, clients)
	for i := range cs {
		cs[i] = clientFrom(ip(clientBase, i+1))
	}
	res := Result{Provenance: prov, Proxies: len(proxies), Clients: clients}
	originHost := fmt.Sprintf("%s.%d.%s", o.addr.Addr(), o.addr.Port(), zone)
	for _, a := range answers {
		for _, crowd := range []string{"concurrent", "sequential"} {
			path := fmt.Sprintf("/%s/%s", a.name, crowd)
			row := Row{Answer: a.name, Doc: a.doc, Crowd: crowd, Statuses: map[string]int{}}
			var mu sync.Mutex
			count := func(status string) { mu.Lock(); row.Statuses[status]++; mu.Unlock() }
			start := time.Now()
			if crowd == "concurrent" {
				row.Requests = concurrent
				var wg sync.WaitGroup
				gate := make(chan struct{})
				for i := range concurrent {
					wg.Go(func() {
						<-gate
						count(get(ctx, cs[i%clients], proxies[i%len(proxies)], originHost, path))
					})
				}
				close(gate)
				wg.Wait()
			} else {
				row.Requests = sequential
				for i := range sequential {
					count(get(ctx, cs[i%clients], proxies[i%len(proxies)], originHost, path))
				}
			}
			row.Seconds = time.Since(start).Seconds()
			row.OriginRequests = o.count(path)
			res.Rows = append(res.Rows, row)
			if err := ctx.Err(); err != nil {
				return err
			}
		}
	}
	for _, p := range proxies {
		if err := p.srv.Exited(); err != nil {
			return err
		}
	}
	printTable(res)
	prov.Finish()
	if out == "" {
		return nil
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(out, "negative.json"), append(b, '\n'), 0o644)
}

func atoi(s string) int {
	n := 0
	fmt.Sscan(s, &n)
	return n
}

// origin answers by path prefix and counts requests per path.
type origin struct {
	addr   netip.AddrPort
	srv    *http.Server
	mu     sync.Mutex
	counts map[string]*atomic.Int64
}

func (o *origin) count(path string) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if c, ok := o.counts[path]; ok {
		return c.Load()
	}
	return 0
}

func startOrigin(addr netip.AddrPort) (*origin, error) {
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		return nil, fmt.Errorf("the origin's address %s (another run?): %w", addr, err)
	}
	o := &origin{addr: addr, counts: map[string]*atomic.Int64{}}
	o.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		c, ok := o.counts[r.URL.Path]
		if !ok {
			c = new(atomic.Int64)
			o.counts[r.URL.Path] = c
		}
		o.mu.Unlock()
		c.Add(1)
		kind, _, _ := strings.Cut(strings.TrimPrefix(r.URL.Path, "/"), "/")
		switch kind {
		case "404":
			http.Error(w, "no such page", http.StatusNotFound)
		case "500":
			http.Error(w, "the origin is broken", http.StatusInternalServerError)
		case "uncacheable":
			w.Header().Set("Cache-Control", "no-store")
			io.WriteString(w, "for you alone\n")
		case "slow":
			time.Sleep(slowHead)
			w.Header().Set("Cache-Control", "max-age=600")
			io.WriteString(w, "worth the wait\n")
		default:
			http.NotFound(w, r)
		}
	})}
	go func() { _ = o.srv.Serve(ln) }()
	return o, nil
}

// proxy is one bin/caddy.
type proxy struct {
	addr netip.Addr
	srv  *proc.Process
}

func startProxies(ctx context.Context, bin, dir, network string, ip func(string, int) netip.Addr) ([]*proxy, error) {
	keyFile := filepath.Join(dir, "network.key")
	if err := coraldht.WriteKeyFile(keyFile); err != nil {
		return nil, err
	}
	var ps []*proxy
	boot := netip.AddrPortFrom(ip(network, 10), dhtPort)
	for i := range 3 {
		a := ip(network, 10+i)
		pdir := filepath.Join(dir, fmt.Sprintf("proxy-%d", i))
		if err := os.MkdirAll(pdir, 0o755); err != nil {
			return ps, err
		}
		node := labconf.Node{Listen: netip.AddrPortFrom(a, dhtPort), KeyFile: keyFile, Clusters: map[int]string{1: "region", 2: "metro"}}
		if i > 0 {
			node.Bootstrap = []netip.AddrPort{boot}
		}
		admin := netip.AddrPortFrom(a, adminPort)
		text := labconf.Caddy{
			Comment: fmt.Sprintf("eval/negative proxy %d.", i), Admin: admin, AdminOrigins: []string{admin.String()}, HTTPSOff: true,
			Options: []labconf.Directive{labconf.D("log").With(labconf.D("output", "stderr"), labconf.D("format", "json"), labconf.D("level", "WARN"))},
			Coral:   node,
			Sites: []labconf.Directive{labconf.D(fmt.Sprintf("http://:%d", httpPort)).With(
				labconf.D("bind", a),
				labconf.Proxy{Zone: zone, CacheDir: filepath.Join(pdir, "cache"), CacheSize: "64MiB",
					AllowOrigins: []string{network + ".0/24"}, AllowPeers: []string{network + ".0/24"},
					PeerAddress: netip.AddrPortFrom(a, httpPort).String()}.Directive(),
			)},
		}.String()
		cf := filepath.Join(pdir, "Caddyfile")
		if err := labconf.WriteFile(cf, text); err != nil {
			return ps, err
		}
		name := fmt.Sprintf("caddy-%d", i)
		srv, err := proc.Start(labconf.CaddyArgv(bin, cf), proc.Options{Name: name, Dir: pdir, Env: labconf.CaddyEnv(pdir), Log: filepath.Join(pdir, name+".log"), TailLines: 20})
		if err != nil {
			return ps, err
		}
		p := &proxy{addr: a, srv: srv}
		ps = append(ps, p)
		if err := evalrun.WaitFor(ctx, name+" joined", 30*time.Second, srv.Exited, func() error { return joined(ctx, p, i) }); err != nil {
			return ps, err
		}
	}
	return ps, nil
}

// joined: the proxy's node is up and (but for the first) knows another.
func joined(ctx context.Context, p *proxy, i int) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s/coral/status", netip.AddrPortFrom(p.addr, adminPort)), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var st struct {
		Node *struct {
			Joined bool `json:"joined"`
		} `json:"node"`
		Levels []struct {
			Contacts int `json:"contacts"`
		} `json:"levels"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&st); err != nil {
		return err
	}
	if st.Node == nil || !st.Node.Joined {
		return errors.New("not joined")
	}
	if i > 0 && (len(st.Levels) == 0 || st.Levels[0].Contacts < 1) {
		return errors.New("no contact")
	}
	return nil
}

func clientFrom(a netip.Addr) *http.Client {
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: a.AsSlice()}}
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{Proxy: nil, DialContext: d.DialContext, MaxIdleConnsPerHost: 4}}
}

// get asks p for host/path and returns the status (or "error").
func get(ctx context.Context, c *http.Client, p *proxy, host, path string) string {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%s%s", netip.AddrPortFrom(p.addr, httpPort), path), nil)
	if err != nil {
		return "error"
	}
	req.Host = host
	resp, err := c.Do(req)
	if err != nil {
		return "error"
	}
	defer resp.Body.Close()
	_, _ = io.Copy(io.Discard, resp.Body)
	return fmt.Sprint(resp.StatusCode)
}

func printTable(res Result) {
	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "answer\tcrowd\trequests\torigin requests\tstatuses\tseconds\t\n")
	for _, r := range res.Rows {
		var st []string
		for k, v := range r.Statuses {
			st = append(st, fmt.Sprintf("%s×%d", k, v))
		}
		sort.Strings(st)
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%s\t%.1f\t\n", r.Answer, r.Crowd, r.Requests, r.OriginRequests, strings.Join(st, " "), r.Seconds)
	}
	tw.Flush()
	fmt.Printf("%d proxies (bin/caddy) on loopback, %d client addresses; load %s\n", res.Proxies, res.Clients, res.Provenance.LoadBefore)
}
