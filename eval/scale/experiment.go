package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"math"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
)

const (
	objectBytes = 1024
	zone        = "nyud.test"
	port        = 8080
	adminPort   = 2019
	dhtPort     = 4000
)

var (
	originAddr  = netip.MustParseAddr("127.0.91.1")
	caddyAddr   = netip.MustParseAddr("127.0.91.2")
	nginxAddr   = netip.MustParseAddr("127.0.91.3")
	varnishAddr = netip.MustParseAddr("127.0.91.4")
)

// Result is scale.json.
type Result struct {
	Provenance *evalrun.Provenance `json:"provenance"`
	Params     params              `json:"params"`
	Servers    []ServerResult      `json:"servers"`
	// Complete is false while servers of Params.Servers are still to be
	// measured (the file is written after each).
	Complete bool `json:"complete"`
}

// ServerResult is one server's figures at each count.
type ServerResult struct {
	Name     string  `json:"name"`
	Command  string  `json:"command"`
	BaseRSS  int64   `json:"base_resident_bytes"` // before the first object
	Resident string  `json:"resident"`            // how resident memory is read
	Points   []Point `json:"points"`
}

// Point is one server at one count.
type Point struct {
	Objects        int     `json:"objects"`
	FillSeconds    float64 `json:"fill_seconds"`
	MissPerSecond  float64 `json:"miss_per_second"`
	ResidentBytes  int64   `json:"resident_bytes"`
	ResidentPerObj float64 `json:"resident_bytes_per_object"`
	// The index's memory as the store counts it (Caddy's
	// caddy_coral_cache_index_bytes), and as Caddy's heap profile
	// estimates it (sampled allocations, scaled as pprof does).
	IndexBytes       int64   `json:"index_bytes,omitempty"`
	IndexBytesPerObj float64 `json:"index_bytes_per_object,omitempty"`
	IndexHeapBytes   int64   `json:"index_heap_bytes,omitempty"`
	IndexPerObj      float64 `json:"index_heap_bytes_per_object,omitempty"`
	HeapInuseBytes   int64   `json:"heap_inuse_bytes,omitempty"`
	// The other state in Caddy's heap profile: coral_proxy's DSHT
	// references (their state lives in the index now, so about none), and
	// the DSHT node (its store and per-key load counters, bounded).
	RefsHeapBytes int64 `json:"references_heap_bytes,omitempty"`
	DHTHeapBytes  int64 `json:"dsht_heap_bytes,omitempty"`
	// What coral_proxy maps outside the Go heap for its per-object table
	// (the index, with the references' state: caddy_coral_offheap_bytes),
	// which the heap profile does not see; resident as written.
	OffheapBytes       int64   `json:"offheap_bytes,omitempty"`
	OffheapBytesPerObj float64 `json:"offheap_bytes_per_object,omitempty"`
	DiskBytes          int64   `json:"disk_bytes"`
	DiskPerObj         float64 `json:"disk_bytes_per_object"`
	Inodes             int64   `json:"inodes"`
	InodesPerObj       float64 `json:"inodes_per_object"`
	OriginRequests     int64   `json:"origin_requests"`
	RestartSeconds     float64 `json:"restart_to_hit_seconds,omitempty"`
	KillRestartSecs    float64 `json:"kill_restart_to_hit_seconds,omitempty"`
	RestartResident    float64 `json:"resident_bytes_per_object_after_restart,omitempty"`
	Load               string  `json:"load"`
}

// server is one cache under test.
type server struct {
	name     string
	addr     netip.Addr
	host     string // Host header of requests
	cacheDir string
	dir      string
	argv     []string
	env      []string
	p        *proc.Process
	resident string
}

func run(ctx context.Context, p params, log io.Writer, save func(*Result)) (*Result, error) {
	if err := findBinaries(&p); err != nil {
		return nil, err
	}
	dir := p.Dir
	if dir == "" {
		d, err := os.MkdirTemp("", "coral-scale-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(d)
		dir = d
	}
	o := &origin{size: p.ObjectBytes}
	if err := o.start(); err != nil {
		return nil, fmt.Errorf("origin: %w", err)
	}
	defer o.close()
	res := &Result{Params: p}
	for _, name := range p.Servers {
		s, err := newServer(name, filepath.Join(dir, name), p)
		if err != nil {
			return nil, err
		}
		fmt.Fprintf(log, "%s: %s\n", name, strings.Join(s.argv, " "))
		sr, err := measure(ctx, s, o, p, log)
		s.stop()
		os.RemoveAll(s.dir) // the next server's disk
		if err != nil {
			return nil, fmt.Errorf("%s: %w", name, err)
		}
		res.Servers = append(res.Servers, *sr)
		res.Complete = len(res.Servers) == len(p.Servers)
		if save != nil {
			save(res)
		}
	}
	return res, nil
}

// measure fills s's cache count by count and takes its figures.
func measure(ctx context.Context, s *server, o *origin, p params, log io.Writer) (*ServerResult, error) {
	if err := s.start(ctx); err != nil {
		return nil, err
	}
	sr := &ServerResult{Name: s.name, Command: strings.Join(s.argv, " "), Resident: s.resident}
	c := newClient(p.Concurrency)
	// One object first: the server's own start-up allocations (Caddy's
	// store, nginx's cache manager) are not per object.
	if err := fetch(ctx, c, s, 0, 1); err != nil {
		return nil, err
	}
	time.Sleep(time.Second)
	sr.BaseRSS = s.residentBytes()
	done := 1
	for _, n := range p.Counts {
		start := time.Now()
		o0 := o.requests.Load()
		if err := fetch(ctx, c, s, done, n); err != nil {
			return nil, err
		}
		fill := time.Since(start).Seconds()
		if got := o.requests.Load() - o0; got != int64(n-done) {
			return nil, fmt.Errorf("the origin served %d requests for %d new objects", got, n-done)
		}
		pt := Point{Objects: n, FillSeconds: fill, MissPerSecond: float64(n-done) / fill, Load: evalrun.LoadAvg()}
		done = n
		if err := s.hitCheck(ctx, c, o, n); err != nil {
			return nil, err
		}
		time.Sleep(time.Second)
		pt.ResidentBytes = s.residentBytes()
		pt.ResidentPerObj = float64(pt.ResidentBytes-sr.BaseRSS) / float64(n)
		if s.name == "coral" {
			hp, err := heapProfile(ctx, p.HeapProfiles, n)
			if err != nil {
				return nil, err
			}
			pt.IndexHeapBytes, pt.HeapInuseBytes = hp.index, hp.inuse
			pt.RefsHeapBytes, pt.DHTHeapBytes = hp.refs, hp.dsht
			pt.IndexPerObj = float64(hp.index) / float64(n)
			if pt.IndexBytes, err = metric(ctx, "caddy_coral_cache_index_bytes"); err != nil {
				return nil, err
			}
			pt.IndexBytesPerObj = float64(pt.IndexBytes) / float64(n)
			if pt.OffheapBytes, err = metric(ctx, "caddy_coral_offheap_bytes"); err != nil {
				return nil, err
			}
			pt.OffheapBytesPerObj = float64(pt.OffheapBytes) / float64(n)
		}
		var err error
		if pt.DiskBytes, pt.Inodes, err = diskUsage(s.cacheDir); err != nil {
			return nil, err
		}
		pt.DiskPerObj = float64(pt.DiskBytes) / float64(n)
		pt.InodesPerObj = float64(pt.Inodes) / float64(n)
		pt.OriginRequests = o.requests.Load()
		if s.name != "varnish" {
			if pt.RestartSeconds, err = s.restart(ctx, c, o, n, syscall.SIGTERM); err != nil {
				return nil, err
			}
			time.Sleep(time.Second)
			pt.RestartResident = float64(s.residentBytes()-sr.BaseRSS) / float64(n)
			if pt.KillRestartSecs, err = s.restart(ctx, c, o, n, syscall.SIGKILL); err != nil {
				return nil, err
			}
		}
		fmt.Fprintf(log, "%s %d: %.0f misses/s, %.0f B resident/object, index %.0f B/object (heap profile %.0f), disk %.0f B and %.2f inodes/object, restart %.2fs (after SIGKILL %.2fs)\n",
			s.name, n, pt.MissPerSecond, pt.ResidentPerObj, pt.IndexBytesPerObj, pt.IndexPerObj, pt.DiskPerObj, pt.InodesPerObj, pt.RestartSeconds, pt.KillRestartSecs)
		sr.Points = append(sr.Points, pt)
	}
	return sr, nil
}

// --- the servers ----------------------------------------------------------

func findBinaries(p *params) error {
	if p.Caddy == "" {
		bin, err := labconf.Binary("caddy")
		if err != nil {
			return err
		}
		p.Caddy = bin
	}
	need := map[string]*string{"nginx": &p.Nginx, "varnish": &p.Varnishd}
	missing := false
	for _, name := range p.Servers {
		if b := need[name]; b != nil {
			if _, err := exec.LookPath(*b); err != nil {
				missing = true
			}
		}
	}
	if missing && p.Install && os.Geteuid() == 0 {
		root, err := evalrun.RepoRoot()
		if err != nil {
			return err
		}
		cmd := exec.Command("bash", filepath.Join(root, "eval/scale/install-deps.sh"))
		cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
		if err := cmd.Run(); err != nil {
			return fmt.Errorf("installing nginx and varnish: %w", err)
		}
	}
	for _, name := range p.Servers {
		if b := need[name]; b != nil {
			path, err := exec.LookPath(*b)
			if err != nil {
				return fmt.Errorf("%s: %w (eval/scale/install-deps.sh installs it)", name, err)
			}
			*b = path
		}
	}
	return nil
}

func newServer(name, dir string, p params) (*server, error) {
	s := &server{name: name, dir: dir, cacheDir: filepath.Join(dir, "cache")}
	if err := os.MkdirAll(s.cacheDir, 0o755); err != nil {
		return nil, err
	}
	switch name {
	case "coral":
		s.addr, s.resident = caddyAddr, "VmRSS of the Caddy process"
		s.host = coralname.Coralize(coralname.Origin{Host: originAddr.String(), Port: port}, zone)
		admin := netip.AddrPortFrom(caddyAddr, adminPort)
		conf := labconf.Caddy{
			Comment: "coral_proxy in front of the scale experiment's origin.",
			Admin:   admin, AdminOrigins: []string{admin.String()}, HTTPSOff: true,
			Coral: labconf.Node{Listen: netip.AddrPortFrom(caddyAddr, dhtPort)},
			Sites: []labconf.Directive{labconf.D(fmt.Sprintf("http://:%d", port)).With(
				labconf.D("bind", caddyAddr),
				// The per-client limits stay out of the way: the clients
				// are one address, and nginx and Varnish have no such
				// limits.
				labconf.Proxy{Zone: zone, CacheDir: s.cacheDir, CacheSize: "16GiB",
					AllowOrigins: []string{"127.0.0.0/8"}, RateLimit: "1000000 1000000",
					Extra: []labconf.Directive{
						labconf.D("max_downloads", 1024, 1024, 1024),
						labconf.D("max_client_downloads", 1024),
						labconf.D("max_address_downloads", 1024),
					}}.Directive(),
			)},
		}
		if err := labconf.WriteFile(filepath.Join(dir, "Caddyfile"), conf.String()); err != nil {
			return nil, err
		}
		s.argv, s.env = labconf.CaddyArgv(p.Caddy, filepath.Join(dir, "Caddyfile")), labconf.CaddyEnv(dir)
	case "nginx":
		s.addr, s.resident = nginxAddr, "sum of PSS of nginx's processes (smaps_rollup)"
		user := ""
		if os.Geteuid() == 0 {
			user = "user root root;\n"
		}
		for _, d := range []string{"tmp"} {
			os.MkdirAll(filepath.Join(dir, d), 0o755)
		}
		// keys_zone sized for the largest count at nginx's ~8,000 keys
		// per MiB; only the pages touched are resident.
		zoneMiB := p.Counts[len(p.Counts)-1]/8000 + 16
		conf := fmt.Sprintf(`%[1]sworker_processes auto;
pid %[2]s/nginx.pid;
error_log %[2]s/error.log warn;
events { worker_connections 4096; }
http {
	access_log off;
	sendfile on;
	keepalive_requests 1000000;
	client_body_temp_path %[2]s/tmp/body;
	proxy_temp_path %[2]s/tmp/proxy;
	fastcgi_temp_path %[2]s/tmp/fastcgi;
	uwsgi_temp_path %[2]s/tmp/uwsgi;
	scgi_temp_path %[2]s/tmp/scgi;
	proxy_cache_path %[3]s levels=1:2 keys_zone=origin:%[4]dm max_size=16g inactive=1d use_temp_path=off;
	upstream origin { server %[5]v:%[6]d; keepalive 64; }
	server {
		listen %[7]v:%[6]d;
		location / {
			proxy_pass http://origin;
			proxy_http_version 1.1;
			proxy_set_header Connection "";
			proxy_cache origin;
		}
	}
}
`, user, dir, s.cacheDir, zoneMiB, originAddr, port, nginxAddr)
		if err := os.WriteFile(filepath.Join(dir, "nginx.conf"), []byte(conf), 0o644); err != nil {
			return nil, err
		}
		s.argv = []string{p.Nginx, "-p", dir, "-c", filepath.Join(dir, "nginx.conf"), "-e", filepath.Join(dir, "error.log"), "-g", "daemon off;"}
		s.env = os.Environ()
	case "varnish":
		// File storage: bodies in a file on the same disk as the others'
		// caches (malloc would hold them in memory); Varnish's objects
		// (heads, hashes) are in its memory either way. Varnish allocates
		// the whole file (4 GiB, enough for a million 1 KiB objects) when
		// it starts: its disk figure is that file, not what the objects
		// use of it.
		s.addr, s.resident = varnishAddr, "sum of PSS of Varnish's processes (smaps_rollup), the storage file's mapped pages included"
		s.argv = []string{p.Varnishd, "-F", "-j", "none", "-n", filepath.Join(dir, "work"),
			"-a", fmt.Sprintf("%v:%d", varnishAddr, port), "-b", fmt.Sprintf("%v:%d", originAddr, port),
			"-s", "file," + filepath.Join(s.cacheDir, "storage.bin") + ",4G",
			"-T", "none", "-p", "default_grace=0"}
		s.env = os.Environ()
	default:
		return nil, fmt.Errorf("unknown server %q (coral, nginx, varnish)", name)
	}
	return s, nil
}

func (s *server) start(ctx context.Context) error {
	ln, err := net.Listen("tcp", fmt.Sprintf("%v:%d", s.addr, port))
	if err != nil {
		return fmt.Errorf("TCP %v:%d is taken (another run?): %v", s.addr, port, err)
	}
	ln.Close()
	s.p, err = proc.Start(s.argv, proc.Options{Name: s.name, Dir: s.dir, Env: s.env, Log: filepath.Join(s.dir, s.name+".log"), TailLines: 100})
	if err != nil {
		return err
	}
	c := &http.Client{Timeout: 2 * time.Second}
	return evalrun.WaitFor(ctx, s.name+" to answer", 60*time.Second, s.p.Exited, func() error {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%v:%d/nonexistent", s.addr, port), nil)
		req.Host = s.host
		resp, err := c.Do(req)
		if err != nil {
			return err
		}
		resp.Body.Close()
		return nil
	})
}

func (s *server) stop() {
	if s.p != nil {
		s.p.Stop(30 * time.Second)
		s.p = nil
	}
}

// restart stops s with sig, starts it again and returns the time from the
// start to its first hit on an object stored before (the origin not
// asked).
func (s *server) restart(ctx context.Context, c *http.Client, o *origin, n int, sig syscall.Signal) (float64, error) {
	if sig == syscall.SIGKILL {
		s.p.Kill()
		<-s.p.Done()
		s.p = nil
	} else {
		s.stop()
	}
	// nginx's workers may outlive their master by a moment, holding the
	// port: the clock starts once it is free.
	if err := evalrun.WaitFor(ctx, s.name+"'s port to be free", 10*time.Second, func() error { return nil }, func() error {
		ln, err := net.Listen("tcp", fmt.Sprintf("%v:%d", s.addr, port))
		if err == nil {
			ln.Close()
		}
		return err
	}); err != nil {
		return 0, err
	}
	start := time.Now()
	if err := s.start(ctx); err != nil {
		return 0, err
	}
	if err := evalrun.WaitFor(ctx, s.name+" to hit after a restart", 120*time.Second, s.p.Exited, func() error {
		return s.hitCheck(ctx, c, o, n)
	}); err != nil {
		return 0, err
	}
	return time.Since(start).Seconds(), nil
}

// hitCheck asks for an object stored before and checks that the origin
// was not asked.
func (s *server) hitCheck(ctx context.Context, c *http.Client, o *origin, n int) error {
	before := o.requests.Load()
	if err := get(ctx, c, s, n/2); err != nil {
		return err
	}
	if o.requests.Load() != before {
		return errors.New("object " + strconv.Itoa(n/2) + " was fetched from the origin again: not a hit")
	}
	return nil
}

// residentBytes is the server's resident memory (see server.resident).
func (s *server) residentBytes() int64 {
	pids := []int{s.p.Pid()}
	if s.name != "coral" {
		pids = append(pids, children(s.p.Pid())...)
	}
	var sum int64
	for _, pid := range pids {
		file, field := "status", "VmRSS:"
		if s.name != "coral" {
			file, field = "smaps_rollup", "Pss:"
		}
		raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/%s", pid, file))
		if err != nil {
			continue
		}
		for _, line := range strings.Split(string(raw), "\n") {
			if f := strings.Fields(line); len(f) >= 2 && f[0] == field {
				kb, _ := strconv.ParseInt(f[1], 10, 64)
				sum += kb << 10
			}
		}
	}
	return sum
}

// children lists the descendants of pid.
func children(pid int) []int {
	var out []int
	raw, _ := os.ReadFile(fmt.Sprintf("/proc/%d/task/%d/children", pid, pid))
	for _, f := range strings.Fields(string(raw)) {
		if c, err := strconv.Atoi(f); err == nil {
			out = append(out, c)
			out = append(out, children(c)...)
		}
	}
	return out
}

// diskUsage sums the allocated blocks and counts the inodes under dir.
func diskUsage(dir string) (bytes, inodes int64, err error) {
	err = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				return nil
			}
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return nil
		}
		bytes += st.Blocks * 512
		inodes++
		return nil
	})
	return bytes, inodes, err
}

// heapFigures are in-use bytes from a heap profile: of the allocations
// made under diskcache's index, coral_proxy's reference table and the
// DSHT node (each record counted once, under the first of them its stack
// shows, innermost first), and the whole heap in use.
type heapFigures struct {
	index, refs, dsht, inuse int64
}

// heapProfile reads Caddy's heap profile after a GC, and keeps a copy
// (DIR/coral-heap-N.txt, pprof's debug=1 text) when dir is not empty.
func heapProfile(ctx context.Context, dir string, n int) (heapFigures, error) {
	admin := netip.AddrPortFrom(caddyAddr, adminPort)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%v/debug/pprof/heap?gc=1&debug=1", admin), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return heapFigures{}, fmt.Errorf("heap profile: %w", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return heapFigures{}, fmt.Errorf("heap profile: %s", resp.Status)
	}
	if dir == "" {
		return parseHeapProfile(resp.Body)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return heapFigures{}, fmt.Errorf("heap profile: %w", err)
	}
	if err := os.WriteFile(filepath.Join(dir, fmt.Sprintf("coral-heap-%d.txt", n)), b, 0o644); err != nil {
		return heapFigures{}, err
	}
	return parseHeapProfile(bytes.NewReader(b))
}

// parseHeapProfile reads a heap profile in pprof's debug=1 text form: a
// header "heap profile: ... @ heap/2*rate", records "inuse_objects:
// inuse_bytes [alloc_objects: alloc_bytes] @ pcs" followed by
// "#\tpc\tfunction+off\tfile:line" frames, and "# HeapInuse = N" among
// the MemStats at the end. The records are the sampled allocations as
// they are: each is scaled here as pprof scales them (an allocation of
// size s is sampled with probability 1-exp(-s/rate)).
func parseHeapProfile(r io.Reader) (heapFigures, error) {
	var h heapFigures
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	var recBytes int64
	counted := false
	rate := 512.0 * 1024
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "heap profile:"):
			if _, r, ok := strings.Cut(line, "@ heap/"); ok {
				if v, err := strconv.ParseFloat(strings.TrimSpace(r), 64); err == nil && v > 0 {
					rate = v / 2
				}
			}
		case strings.HasPrefix(line, "# HeapInuse = "):
			h.inuse, _ = strconv.ParseInt(strings.TrimPrefix(line, "# HeapInuse = "), 10, 64)
		case strings.HasPrefix(line, "#\t"):
			if counted {
				continue
			}
			switch {
			case strings.Contains(line, "module/caddy/diskcache.(*index)"):
				h.index += recBytes
			case strings.Contains(line, "module/caddy/proxy.(*References)"):
				h.refs += recBytes
			case strings.Contains(line, "github.com/coralcdn/coral/coraldht."):
				h.dsht += recBytes
			default:
				continue
			}
			counted = true
		case strings.Contains(line, " @ ") && !strings.HasPrefix(line, "heap profile:"):
			f := strings.Fields(line)
			recBytes = 0
			if len(f) >= 2 {
				objs, _ := strconv.ParseFloat(strings.TrimSuffix(f[0], ":"), 64)
				b, _ := strconv.ParseFloat(f[1], 64)
				if objs > 0 {
					recBytes = int64(b / (1 - math.Exp(-b/objs/rate)))
				}
			}
			counted = false
		}
	}
	if err := sc.Err(); err != nil {
		return h, err
	}
	if h.inuse == 0 {
		return h, errors.New("heap profile without HeapInuse")
	}
	return h, nil
}

// metric reads a gauge without labels from Caddy's admin /metrics.
func metric(ctx context.Context, name string) (int64, error) {
	admin := netip.AddrPortFrom(caddyAddr, adminPort)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%v/metrics", admin), nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("metrics: %w", err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), name+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			return int64(f), err
		}
	}
	return 0, fmt.Errorf("metrics: no %s (%v)", name, sc.Err())
}

// --- the clients ------------------------------------------------------------

func newClient(conc int) *http.Client {
	return &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{
		MaxIdleConns: conc * 2, MaxIdleConnsPerHost: conc * 2, DisableCompression: true,
	}}
}

// fetch asks s for objects from .. to-1, once each, from the concurrent
// clients.
func fetch(ctx context.Context, c *http.Client, s *server, from, to int) error {
	var next atomic.Int64
	next.Store(int64(from))
	var wg sync.WaitGroup
	var first atomic.Pointer[error]
	conc := c.Transport.(*http.Transport).MaxIdleConnsPerHost / 2
	for range conc {
		wg.Go(func() {
			for first.Load() == nil {
				i := int(next.Add(1) - 1)
				if i >= to {
					return
				}
				if err := get(ctx, c, s, i); err != nil {
					first.CompareAndSwap(nil, &err)
					return
				}
			}
		})
	}
	wg.Wait()
	if e := first.Load(); e != nil {
		return *e
	}
	return ctx.Err()
}

// get fetches object i through s and checks it.
func get(ctx context.Context, c *http.Client, s *server, i int) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, fmt.Sprintf("http://%v:%d/o/%d", s.addr, port, i), nil)
	if err != nil {
		return err
	}
	if s.host != "" {
		req.Host = s.host
	}
	resp, err := c.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK || len(b) != objectBytes || string(b) != string(objectBody(i, objectBytes)) {
		return fmt.Errorf("object %d: %s, %d bytes", i, resp.Status, len(b))
	}
	return nil
}

// --- the origin -------------------------------------------------------------

// origin serves /o/N: size bytes that depend on N, cacheable for a day.
type origin struct {
	size     int
	srv      *http.Server
	requests atomic.Int64
}

func (o *origin) start() error {
	ln, err := net.Listen("tcp", fmt.Sprintf("%v:%d", originAddr, port))
	if err != nil {
		return fmt.Errorf("TCP %v:%d is taken (another run?): %v", originAddr, port, err)
	}
	o.srv = &http.Server{Handler: o, ReadHeaderTimeout: 10 * time.Second}
	go o.srv.Serve(ln)
	return nil
}

func (o *origin) close() { o.srv.Close() }

func (o *origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	n, err := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/o/"))
	if err != nil || !strings.HasPrefix(r.URL.Path, "/o/") || n < 0 {
		http.NotFound(w, r)
		return
	}
	o.requests.Add(1)
	h := w.Header()
	h.Set("Cache-Control", "max-age=86400")
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Last-Modified", "Mon, 02 Jan 2026 15:04:05 GMT")
	h.Set("Content-Length", strconv.Itoa(o.size))
	w.Write(objectBody(n, o.size))
}

// objectBody is object n's bytes: its number, then letters.
func objectBody(n, size int) []byte {
	b := make([]byte, size)
	copy(b, strconv.Itoa(n)+":")
	for i := len(strconv.Itoa(n)) + 1; i < size; i++ {
		b[i] = 'a' + byte((n+i)%26)
	}
	return b
}
