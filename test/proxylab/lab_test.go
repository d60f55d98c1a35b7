package proxylab

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
)

// Every process of the lab listens on its own loopback address in
// 127.0.70.0/24–127.0.79.0/24 (Linux answers on all of 127.0.0.0/8), on the
// same ports: the admin API on 2019, the DSHT node on UDP 4000 and the
// proxy on 8090.
const (
	zone      = "nyud.test"
	adminPort = 2019
	dhtPort   = 4000
	httpPort  = 8090
)

// ciRun reports whether this is CI, where a missing prerequisite is a
// failure rather than a reason to skip.
func ciRun() bool { return os.Getenv("CI") == "true" }

// caddyBinary finds bin/caddy: without it the tests skip, or fail under
// CI=true. It warns when the module's sources are newer than the binary.
func caddyBinary(t *testing.T) string {
	t.Helper()
	bin, err := labconf.Binary("caddy")
	if err != nil {
		if ciRun() {
			t.Fatal(err.Error() + " (CI=true, so this is a failure, not a skip)")
		}
		t.Skip(err)
	}
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	staleOnce.Do(func() {
		if newer := newerSource(filepath.Dir(filepath.Dir(bin)), st.ModTime()); newer != "" {
			t.Logf("warning: %s is newer than bin/caddy; `make caddy` to test the current code", newer)
		}
	})
	return bin
}

var staleOnce sync.Once

// newerSource returns a Go source file that goes into bin/caddy and is
// newer than it (the inputs builds/caddy/build.sh checks), or "".
func newerSource(root string, built time.Time) string {
	var newer string
	for _, dir := range []string{"module", "coraldht", "internal"} {
		_ = filepath.WalkDir(filepath.Join(root, dir), func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return nil
			}
			if !d.IsDir() && strings.HasSuffix(p, ".go") && !strings.HasSuffix(p, "_test.go") {
				if fi, err := d.Info(); err == nil && fi.ModTime().After(built) {
					newer = p
					return filepath.SkipAll
				}
			}
			return nil
		})
		if newer != "" {
			break
		}
	}
	return newer
}

// proxyOptions shape one proxy's Caddyfile.
type proxyOptions struct {
	noAllowOrigins bool     // leave out allow_origins 127.0.0.0/8
	noAllowPeers   bool     // leave out allow_peers 127.0.0.0/8
	extra          []string // more coral_proxy lines, e.g. "min_ttl 0"
	keys           []string // network key files, the primary first (none: the loopback development key)
	// hosts are lines added to /etc/hosts for this process only: it runs
	// in a mount namespace of its own with a copy of /etc/hosts bound over
	// the real one (needs root; see hostsSupported).
	hosts []string
}

// hostsSupported reports why a process cannot get hosts of its own (a
// mount namespace with /etc/hosts bound over), or "" if it can.
func hostsSupported() string {
	if os.Geteuid() != 0 {
		return "not root: a private /etc/hosts needs a mount namespace"
	}
	for _, b := range []string{"unshare", "mount", "sh"} {
		if _, err := exec.LookPath(b); err != nil {
			return b + " not found"
		}
	}
	return ""
}

// proxy is one bin/caddy process: a coral app (DSHT node) and a
// coral_proxy site.
type proxy struct {
	name string
	ip   netip.Addr
	proc *proc.Process
	dir  string // its Caddyfile, cache and log
}

func (p *proxy) base() string {
	return "http://" + netip.AddrPortFrom(p.ip, httpPort).String()
}

func (p *proxy) pid() int { return p.proc.Pid() }

// caddyfile is a proxy's configuration: the admin API on ip (accepting its
// own address as Host too, as `caddy reload --address` sends it), the coral
// app on ip:dhtPort joining through boot, and coral_proxy on ip:httpPort.
func caddyfile(dir string, ip, boot netip.Addr, opts proxyOptions) string {
	admin := netip.AddrPortFrom(ip, adminPort)
	node := labconf.Node{Listen: netip.AddrPortFrom(ip, dhtPort)}
	if boot.IsValid() {
		node.Bootstrap = []netip.AddrPort{netip.AddrPortFrom(boot, dhtPort)}
	}
	if len(opts.keys) > 0 {
		node.KeyFile, node.AcceptedKeys = opts.keys[0], opts.keys[1:]
	}
	px := labconf.Proxy{Zone: zone, CacheDir: filepath.Join(dir, "cache"), RateLimit: "off"}
	if !opts.noAllowOrigins {
		px.AllowOrigins = []string{"127.0.0.0/8"}
	}
	if !opts.noAllowPeers {
		px.AllowPeers = []string{"127.0.0.0/8"}
	}
	for _, line := range opts.extra {
		f := strings.Fields(line)
		px.Extra = append(px.Extra, labconf.D(f[0], f[1:]))
	}
	return labconf.Caddy{
		Admin:        admin,
		AdminOrigins: []string{fmt.Sprintf("localhost:%d", adminPort), admin.String()},
		HTTPSOff:     true,
		SkipTrust:    true,
		Grace:        "1s",
		Options:      []labconf.Directive{labconf.D("log").With(labconf.D("exclude", "admin.api"))},
		Coral:        node,
		Sites:        []labconf.Directive{labconf.D(fmt.Sprintf(":%d", httpPort)).With(labconf.D("bind", ip), px.Directive())},
	}.String()
}

// startProxy writes a Caddyfile into a temporary directory and starts
// bin/caddy on it. boot is the DSHT node to join through (none for the
// first node of a network). It does not wait for readiness.
func startProxy(t *testing.T, name string, ip, boot netip.Addr, opts proxyOptions) *proxy {
	t.Helper()
	bin := caddyBinary(t)
	dir := t.TempDir()
	cfgPath := filepath.Join(dir, "Caddyfile")
	if err := labconf.WriteFile(cfgPath, caddyfile(dir, ip, boot, opts)); err != nil {
		t.Fatal(err)
	}
	args := labconf.CaddyArgv(bin, cfgPath)
	if len(opts.hosts) > 0 {
		etcHosts, err := os.ReadFile("/etc/hosts")
		if err != nil {
			t.Fatal(err)
		}
		hostsPath := filepath.Join(dir, "hosts")
		if err := os.WriteFile(hostsPath, append(etcHosts, []byte("\n"+strings.Join(opts.hosts, "\n")+"\n")...), 0o644); err != nil {
			t.Fatal(err)
		}
		// unshare and sh exec in turn, so the PID stays Caddy's.
		args = append([]string{"unshare", "--mount", "--propagation", "private", "sh", "-c",
			`mount --bind "$1" /etc/hosts && shift && exec "$@"`, "sh", hostsPath}, args...)
	}
	// Caddy's data and config directories (and anything else it might
	// write under HOME) stay in the temporary directory. If the test binary
	// dies, so does Caddy, rather than holding the addresses the next run
	// needs.
	pr, err := proc.Start(args, proc.Options{Name: name, Dir: dir, Env: labconf.CaddyEnv(dir), Log: filepath.Join(dir, "caddy.log")})
	if err != nil {
		t.Fatal(err)
	}
	p := &proxy{name: name, ip: ip, proc: pr, dir: dir}
	t.Cleanup(func() {
		p.stop()
		if t.Failed() || os.Getenv("PROXYLAB_LOG") != "" {
			p.dumpLog(t, 150)
		}
	})
	return p
}

// running reports whether the process is still there.
func (p *proxy) running() bool { return p.proc.Running() }

// stop sends SIGTERM and waits (SIGKILL after 10 s).
func (p *proxy) stop() { _ = p.proc.Stop(10 * time.Second) }

// kill sends SIGKILL and waits for the process to be gone.
func (p *proxy) kill() { p.proc.Kill() }

// dumpLog prints the last n lines of the process's stderr (all of them
// with PROXYLAB_LOG set).
func (p *proxy) dumpLog(t *testing.T, n int) {
	log := p.proc.Log()
	lines := strings.Count(strings.TrimRight(log, "\n"), "\n") + 1
	if os.Getenv("PROXYLAB_LOG") != "" {
		n = lines
	}
	from := max(0, lines-n)
	t.Logf("--- %s (%s, pid %d, exit %v) log, lines %d-%d of %d:\n%s", p.name, p.ip, p.pid(), p.proc.ExitError(),
		from+1, lines, lines, proc.TailLines(log, n))
}

// coralStatus is the part of the admin API's GET /coral/status this lab
// reads (module/caddy/admin.go).
type coralStatus struct {
	Node *struct {
		Address   string    `json:"address"`
		Joined    bool      `json:"joined"`
		Started   time.Time `json:"started"`
		Bootstrap []string  `json:"bootstrap"`
	} `json:"node"`
	Levels []struct {
		Level    int    `json:"level"`
		Cluster  string `json:"cluster"`
		Contacts int    `json:"contacts"`
	} `json:"levels"`
	DHT *struct {
		Peers   int    `json:"peers"`
		PutGets uint64 `json:"put_gets"`
	} `json:"dht"`
	Caches []struct {
		Objects    int   `json:"objects"`
		Bytes      int64 `json:"bytes"`
		InProgress int   `json:"in_progress"`
		Readers    int64 `json:"readers"`
		Hits       int64 `json:"hits"`
		Misses     int64 `json:"misses"`
		Commits    int64 `json:"commits"`
		Aborts     int64 `json:"aborts"`
		References int   `json:"references"`
	} `json:"caches"`
	RecentFetches []struct {
		URL    string `json:"url"`
		Source string `json:"source"`
		Status int    `json:"status"`
		Bytes  int64  `json:"bytes"`
	} `json:"recent_fetches"`
}

// cacheTotals sums the caches of a status.
func (s *coralStatus) cacheTotals() (inProgress int, readers, commits, aborts int64) {
	for _, c := range s.Caches {
		inProgress += c.InProgress
		readers += c.Readers
		commits += c.Commits
		aborts += c.Aborts
	}
	return
}

// cacheObject is one entry of GET /coral/cache.
type cacheObject struct {
	Key     string     `json:"key"`
	URL     string     `json:"url"`
	Status  int        `json:"status"`
	Size    int64      `json:"size"`
	Source  string     `json:"source"`
	Expires *time.Time `json:"expires"`
	Writing bool       `json:"writing"`
}

var adminClient = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

// admin GETs a path of the process's admin API into v. The admin API only
// accepts its own default host names in Host.
func (p *proxy) admin(path string, v any) error {
	req, err := http.NewRequest(http.MethodGet, "http://"+netip.AddrPortFrom(p.ip, adminPort).String()+path, nil)
	if err != nil {
		return err
	}
	req.Host = fmt.Sprintf("localhost:%d", adminPort)
	resp, err := adminClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, 1024))
		return fmt.Errorf("admin %s: %s: %s", path, resp.Status, b)
	}
	return json.NewDecoder(resp.Body).Decode(v)
}

// adminPost POSTs form to a path of the process's admin API and returns the
// status and body.
func (p *proxy) adminPost(path string, form url.Values) (int, []byte, error) {
	req, err := http.NewRequest(http.MethodPost, "http://"+netip.AddrPortFrom(p.ip, adminPort).String()+path,
		strings.NewReader(form.Encode()))
	if err != nil {
		return 0, nil, err
	}
	req.Host = fmt.Sprintf("localhost:%d", adminPort)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	c := &http.Client{Timeout: 60 * time.Second, Transport: adminClient.Transport}
	resp, err := c.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, b, err
}

func (p *proxy) status() (*coralStatus, error) {
	var st coralStatus
	if err := p.admin("/coral/status", &st); err != nil {
		return nil, err
	}
	return &st, nil
}

func (p *proxy) cacheObjects() ([]cacheObject, error) {
	var page struct {
		Objects []cacheObject `json:"objects"`
	}
	err := p.admin("/coral/cache?limit=1000", &page)
	return page.Objects, err
}

// waitFor polls cond every 20 ms until it returns nil; past the deadline
// the test fails with cond's last error. It also fails at once when one of
// the processes has exited.
func waitFor(t *testing.T, what string, within time.Duration, procs []*proxy, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		err := cond()
		if err == nil {
			return
		}
		for _, p := range procs {
			if !p.running() {
				t.Fatalf("%s: %s (%s) exited: %v (last: %v)", what, p.name, p.ip, p.proc.ExitError(), err)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, within, err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// ready checks that the node has joined and knows at least peers other
// nodes in its level-0 (global) routing table, and that the HTTP site
// answers (421 for a name that is not Coralized). The higher levels' tables
// need not be full: a node learns a cluster member there only once it hears
// from it at that level, and lookups find the nodes nearest a key anyway.
func (p *proxy) ready(peers int) error {
	st, err := p.status()
	if err != nil {
		return err
	}
	if st.Node == nil || !st.Node.Joined {
		return fmt.Errorf("%s: DSHT node not joined", p.name)
	}
	if len(st.Levels) == 0 || st.Levels[0].Contacts < peers {
		return fmt.Errorf("%s: levels %+v: want %d contacts at level 0", p.name, st.Levels, peers)
	}
	req, _ := http.NewRequest(http.MethodGet, p.base()+"/", nil)
	req.Host = "ready.example"
	resp, err := adminClient.Do(req)
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMisdirectedRequest {
		return fmt.Errorf("%s: a non-Coral host got %s, want 421", p.name, resp.Status)
	}
	return nil
}

// startOne starts a single proxy (a DSHT network of one) and waits until
// it is ready.
func startOne(t *testing.T, ip netip.Addr, opts proxyOptions) *proxy {
	t.Helper()
	p := startProxy(t, "proxy-"+ip.String(), ip, netip.Addr{}, opts)
	waitFor(t, p.name+" ready", 30*time.Second, []*proxy{p}, func() error { return p.ready(0) })
	return p
}

// startNetwork starts one proxy per address, all in one DSHT network: the
// first one alone, the others bootstrapping through it. It returns once
// every node has joined and knows every other node at level 0, and logs
// each node's clusters and contacts per level.
//
// It does not wait for the nodes to agree on their clusters at levels 1
// and 2: on loopback they often do not at first (a joiner can form a
// cluster of its own rather than join the bootstrap node's, and clusters
// are reconsidered only every ClusterInterval, 5 minutes). put+get is still
// a test-and-set across the network, since its stores end at level 0.
func startNetwork(t *testing.T, ips []netip.Addr, opts proxyOptions) []*proxy {
	t.Helper()
	first := startOne(t, ips[0], opts)
	ps := []*proxy{first}
	for i, ip := range ips[1:] {
		ps = append(ps, startProxy(t, fmt.Sprintf("proxy-%d-%s", i+1, ip), ip, ips[0], opts))
	}
	waitFor(t, "DSHT network formed", 60*time.Second, ps, func() error {
		for _, p := range ps {
			if err := p.ready(len(ps) - 1); err != nil {
				return err
			}
		}
		return nil
	})
	var levels []string
	for _, p := range ps {
		st, err := p.status()
		if err != nil {
			t.Fatal(err)
		}
		var ls []string
		for _, l := range st.Levels {
			ls = append(ls, fmt.Sprintf("l%d:%s/%d", l.Level, l.Cluster, l.Contacts))
		}
		levels = append(levels, p.ip.String()+" "+strings.Join(ls, " "))
	}
	t.Logf("DSHT network of %d formed; cluster/contacts per level:\n%s", len(ps), strings.Join(levels, "\n"))
	return ps
}

// waitDownloads waits until no download is in progress at any of ps, as
// module/caddy's tests do: a download commits (or aborts) in the
// background after its last byte reached the clients.
func waitDownloads(t *testing.T, ps ...*proxy) {
	t.Helper()
	waitFor(t, "downloads finished", 30*time.Second, ps, func() error {
		for _, p := range ps {
			st, err := p.status()
			if err != nil {
				return err
			}
			if n, _, _, _ := st.cacheTotals(); n > 0 {
				return fmt.Errorf("%s: %d downloads in progress", p.name, n)
			}
		}
		return nil
	})
}

// memory reads a process's resident set size and its peak (VmRSS, VmHWM)
// in bytes.
func memory(pid int) (rss, hwm int64, err error) {
	f, err := os.Open(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0, 0, err
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if !ok || (k != "VmRSS" && k != "VmHWM") {
			continue
		}
		kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
		if err != nil {
			return 0, 0, fmt.Errorf("%s: %q: %w", k, v, err)
		}
		if k == "VmRSS" {
			rss = kb << 10
		} else {
			hwm = kb << 10
		}
	}
	if rss == 0 || hwm == 0 {
		return 0, 0, errors.New("no VmRSS/VmHWM in /proc/PID/status")
	}
	return rss, hwm, sc.Err()
}

// resetPeak sets the process's VmHWM to its current RSS (Linux 4.0+), so
// a later VmHWM is the peak of what happened in between.
func resetPeak(pid int) error {
	return os.WriteFile(fmt.Sprintf("/proc/%d/clear_refs", pid), []byte("5"), 0)
}

// newClient is an HTTP client for the proxies: no environment proxy, no
// transparent gzip (bodies are compared byte for byte), no redirects.
func newClient(t *testing.T) *http.Client {
	tr := &http.Transport{
		Proxy:               nil,
		DialContext:         (&net.Dialer{Timeout: 5 * time.Second}).DialContext,
		DisableCompression:  true,
		MaxIdleConnsPerHost: 256,
	}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// request builds a GET of path at proxy p for the Coralized host.
func request(ctx context.Context, p *proxy, host, path string, hdr ...string) *http.Request {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, p.base()+path, nil)
	if err != nil {
		panic(err)
	}
	req.Host = host
	for i := 0; i+1 < len(hdr); i += 2 {
		req.Header.Set(hdr[i], hdr[i+1])
	}
	return req
}

// fetch GETs path at p and reads the whole body.
func fetch(c *http.Client, p *proxy, host, path string, hdr ...string) (*http.Response, []byte, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	resp, err := c.Do(request(ctx, p, host, path, hdr...))
	if err != nil {
		return nil, nil, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp, b, err
}

// detail is the detail= parameter of a Cache-Status value.
func detail(cacheStatus string) string {
	for _, part := range strings.Split(cacheStatus, ";") {
		if v, ok := strings.CutPrefix(strings.TrimSpace(part), "detail="); ok {
			return strings.Trim(v, `"`)
		}
	}
	return ""
}

// errorText is an error response's body for a log line (a success's size).
func errorText(resp *http.Response, body []byte) string {
	if resp.StatusCode < 400 {
		return fmt.Sprintf("(%d bytes)", len(body))
	}
	s := strings.TrimSpace(string(body))
	if len(s) > 200 {
		s = s[:200] + "…"
	}
	return s
}
