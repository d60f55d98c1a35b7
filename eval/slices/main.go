// Command slices measures big files in slices (issue 42) on a fleet of
// three Coral proxies (bin/caddy, on loopback) in front of one origin:
//
//   - a crowd on a cold big file (-size, 1 GiB): -clients clients at each
//     proxy start at once; it counts the body bytes the origin sent and
//     its requests (the object once, each slice once is the aim: at most
//     1.05 times the file), and each client's throughput, checking every
//     byte it receives;
//
//   - cold ranges of another object (-range-object, 256 MiB), each on its
//     own URL at one proxy: bytes=0-1023, a kibibyte in the middle, and a
//     range joining a download of the whole object in progress; for each,
//     the status, the bytes that crossed the client's socket (head and
//     body) and the origin's bytes.
//
//     go run ./eval/slices [-caddy bin/caddy] [-net 127.0.94] [-size 1GiB] [-slice 4MiB] [-clients 4] [-out docs/eval]
//
// It prints a table and writes docs/eval/slices.json with its provenance.
// Addresses: the proxies on NET.10-12 (HTTP 8080, DSHT 4000, admin 2019),
// the origin on NET.2:8080.
package main

import (
	"bufio"
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
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
	"github.com/dustin/go-humanize"
)

const (
	zone      = "nyud.test"
	httpPort  = 8080
	dhtPort   = 4000
	adminPort = 2019
	proxies   = 3
)

// params are a run's settings.
type params struct {
	Caddy       string `json:"-"`
	Net         string `json:"net"`
	Size        int64  `json:"file_bytes"`
	RangeObject int64  `json:"range_object_bytes"`
	Slice       int64  `json:"slice_bytes"`
	Clients     int    `json:"clients_per_proxy"`
	Out         string `json:"-"`
	Name        string `json:"-"`
}

// Result is what a run writes.
type Result struct {
	Provenance *evalrun.Provenance `json:"provenance"`
	Params     params              `json:"params"`
	Crowd      Crowd               `json:"crowd"`
	Ranges     []RangeRow          `json:"ranges"`
}

// Crowd is the crowd on the cold big file.
type Crowd struct {
	OriginBytes    int64   `json:"origin_bytes"`
	OriginRatio    float64 `json:"origin_ratio"` // origin bytes / file size
	OriginRequests int     `json:"origin_requests"`
	// RangesAskedTwice counts the slice ranges the origin was asked for
	// more than once.
	RangesAskedTwice int `json:"ranges_asked_twice"`
	// Asked is the Range of each of the origin's requests for the file
	// ("" for none), in order.
	Asked   []string `json:"origin_asked"`
	Clients []Client `json:"clients"`
	Seconds float64  `json:"seconds"`
}

// Client is one client of the crowd.
type Client struct {
	Proxy   int     `json:"proxy"`
	Status  int     `json:"status"`
	Bytes   int64   `json:"bytes"`
	Correct bool    `json:"correct"` // every byte the origin's, and all of them
	MBps    float64 `json:"mb_per_second"`
	FirstMs float64 `json:"first_byte_ms"`
	Error   string  `json:"error,omitempty"`
}

// RangeRow is one cold range request.
type RangeRow struct {
	Case        string  `json:"case"`
	Range       string  `json:"range"`
	Status      int     `json:"status"`
	BodyBytes   int64   `json:"body_bytes"`
	SocketBytes int64   `json:"socket_bytes"` // head and body, as read from the client's socket
	Correct     bool    `json:"correct"`
	OriginBytes int64   `json:"origin_bytes"` // sent for the URL by the time the answer ended
	Ms          float64 `json:"ms"`
}

func main() {
	p := params{}
	var size, rangeObject, slice string
	flag.StringVar(&p.Caddy, "caddy", "", "the Caddy binary (default: bin/caddy of the repository)")
	flag.StringVar(&p.Net, "net", "127.0.94", "the first three octets of the lab's addresses")
	flag.StringVar(&size, "size", "1GiB", "the crowd's file")
	flag.StringVar(&rangeObject, "range-object", "256MiB", "the object of the cold ranges")
	flag.StringVar(&slice, "slice", "4MiB", "the proxies' slice_size")
	flag.IntVar(&p.Clients, "clients", 4, "clients of the crowd at each proxy")
	flag.StringVar(&p.Out, "out", evalrun.ResultsDir, "directory for the result file (\"\": none)")
	flag.StringVar(&p.Name, "name", "slices", "the result file's name, without .json")
	flag.Parse()
	for _, s := range []struct {
		v   string
		dst *int64
	}{{size, &p.Size}, {rangeObject, &p.RangeObject}, {slice, &p.Slice}} {
		n, err := humanize.ParseBytes(s.v)
		if err != nil || n == 0 || n > 1<<40 {
			fmt.Fprintf(os.Stderr, "slices: %q is not a size\n", s.v)
			os.Exit(2)
		}
		*s.dst = int64(n)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	res, err := run(ctx, p)
	if err != nil {
		fmt.Fprintln(os.Stderr, "slices:", err)
		os.Exit(1)
	}
	printTable(os.Stdout, res)
}

// run runs the experiment and writes its result file (unless p.Out is "").
func run(ctx context.Context, p params) (*Result, error) {
	if p.Caddy == "" {
		var err error
		if p.Caddy, err = labconf.Binary("caddy"); err != nil {
			return nil, err
		}
	}
	prov := evalrun.StartProvenance("slices", evalrun.TopologyLoopback)
	addr := func(last int) netip.Addr { return netip.MustParseAddr(fmt.Sprintf("%s.%d", p.Net, last)) }
	o, err := startOrigin(netip.AddrPortFrom(addr(2), httpPort), map[string]int64{"/big": p.Size, "/range": p.RangeObject})
	if err != nil {
		return nil, err
	}
	defer o.srv.Close()
	dir, err := os.MkdirTemp("", "coral-slices-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(dir)
	fleet, err := startFleet(ctx, p, dir, addr)
	defer func() {
		for _, x := range fleet {
			_ = x.Stop(5 * time.Second)
		}
	}()
	if err != nil {
		return nil, err
	}
	host := fmt.Sprintf("%s.%d.%s", o.addr.Addr(), o.addr.Port(), zone)
	res := &Result{Provenance: prov, Params: p}
	res.Crowd = crowd(ctx, p, o, host, addr)
	res.Ranges = coldRanges(ctx, p, o, host, netip.AddrPortFrom(addr(10), httpPort))
	for _, x := range fleet {
		if err := x.Exited(); err != nil {
			return nil, err
		}
	}
	prov.Finish()
	if p.Out == "" {
		return res, nil
	}
	b, err := json.MarshalIndent(res, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.MkdirAll(p.Out, 0o755); err != nil {
		return nil, err
	}
	return res, os.WriteFile(filepath.Join(p.Out, p.Name+".json"), append(b, '\n'), 0o644)
}

// crowd sends p.Clients clients to each proxy at once for the cold file.
func crowd(ctx context.Context, p params, o *origin, host string, addr func(int) netip.Addr) Crowd {
	var c Crowd
	var mu sync.Mutex
	var wg sync.WaitGroup
	gate := make(chan struct{})
	start := time.Now()
	for i := range proxies * p.Clients {
		wg.Go(func() {
			<-gate
			cl := fetchWhole(ctx, netip.AddrPortFrom(addr(10+i%proxies), httpPort), host, "/big", p.Size)
			cl.Proxy = i % proxies
			mu.Lock()
			c.Clients = append(c.Clients, cl)
			mu.Unlock()
		})
	}
	close(gate)
	wg.Wait()
	c.Seconds = time.Since(start).Seconds()
	sort.Slice(c.Clients, func(a, b int) bool { return c.Clients[a].Proxy < c.Clients[b].Proxy })
	c.OriginBytes = o.sentFor("/big")
	c.OriginRatio = float64(c.OriginBytes) / float64(p.Size)
	asked := o.rangesFor("/big")
	c.OriginRequests, c.Asked = len(asked), asked
	seen := map[string]int{}
	for _, r := range asked {
		if seen[r]++; seen[r] == 2 {
			c.RangesAskedTwice++
		}
	}
	return c
}

// fetchWhole GETs path and checks every byte against the origin's.
func fetchWhole(ctx context.Context, proxy netip.AddrPort, host, path string, size int64) Client {
	var cl Client
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+proxy.String()+path, nil)
	req.Host = host
	start := time.Now()
	resp, err := plainClient.Do(req)
	if err != nil {
		cl.Error = err.Error()
		return cl
	}
	defer resp.Body.Close()
	cl.Status = resp.StatusCode
	buf := make([]byte, 256<<10)
	want := make([]byte, len(buf))
	correct := true
	for {
		n, err := resp.Body.Read(buf)
		if n > 0 {
			if cl.Bytes == 0 {
				cl.FirstMs = float64(time.Since(start).Microseconds()) / 1000
			}
			content(want[:n], cl.Bytes)
			correct = correct && string(want[:n]) == string(buf[:n])
			cl.Bytes += int64(n)
		}
		if err == io.EOF {
			break
		}
		if err != nil {
			cl.Error = err.Error()
			break
		}
	}
	took := time.Since(start).Seconds()
	cl.MBps = float64(cl.Bytes) / 1e6 / took
	cl.Correct = correct && cl.Bytes == size && cl.Error == ""
	return cl
}

var plainClient = &http.Client{Transport: &http.Transport{Proxy: nil, DisableCompression: true, MaxIdleConnsPerHost: 64}}

// coldRanges asks one proxy for cold ranges of the range object, each on
// a URL of its own.
func coldRanges(ctx context.Context, p params, o *origin, host string, proxy netip.AddrPort) []RangeRow {
	mid := p.RangeObject / 2
	var rows []RangeRow
	for _, tc := range []struct{ name, path, rng string }{
		{"start", "/range?start", "bytes=0-1023"},
		{"middle", "/range?middle", fmt.Sprintf("bytes=%d-%d", mid, mid+1023)},
	} {
		row := rawRange(ctx, proxy, host, tc.path, tc.rng)
		row.Case = tc.name
		row.OriginBytes = o.sentFor(tc.path)
		rows = append(rows, row)
	}
	// A range joining a download of the whole object in progress: a client
	// reading the whole object slowly holds the download open.
	jctx, cancel := context.WithCancel(ctx)
	defer cancel()
	req, _ := http.NewRequestWithContext(jctx, http.MethodGet, "http://"+proxy.String()+"/range?join", nil)
	req.Host = host
	if resp, err := plainClient.Do(req); err == nil {
		defer resp.Body.Close()
		_, _ = io.CopyN(io.Discard, resp.Body, 1<<20)
	}
	row := rawRange(ctx, proxy, host, "/range?join", fmt.Sprintf("bytes=%d-%d", mid, mid+1023))
	row.Case = "joining a download"
	row.OriginBytes = o.sentFor("/range?join")
	return append(rows, row)
}

// rawRange sends one range request over a connection of its own and counts
// every byte read from the socket.
func rawRange(ctx context.Context, proxy netip.AddrPort, host, path, rng string) RangeRow {
	row := RangeRow{Range: rng}
	var first, last int64
	fmt.Sscanf(rng, "bytes=%d-%d", &first, &last)
	start := time.Now()
	c, err := (&net.Dialer{Timeout: 5 * time.Second}).DialContext(ctx, "tcp", proxy.String())
	if err != nil {
		return row
	}
	defer c.Close()
	_ = c.SetDeadline(time.Now().Add(60 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nRange: %s\r\nConnection: close\r\n\r\n", path, host, rng)
	counted := &countingReader{r: c}
	resp, err := http.ReadResponse(bufio.NewReader(counted), nil)
	if err != nil {
		return row
	}
	body, _ := io.ReadAll(resp.Body)
	row.Ms = float64(time.Since(start).Microseconds()) / 1000
	row.Status, row.BodyBytes, row.SocketBytes = resp.StatusCode, int64(len(body)), counted.n
	want := make([]byte, last-first+1)
	content(want, first)
	row.Correct = resp.StatusCode == http.StatusPartialContent && string(body) == string(want)
	return row
}

type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// content fills b with the objects' bytes from offset off: every object
// has the same bytes, a pattern that repeats only after 2^32 bytes.
func content(b []byte, off int64) {
	for i := range b {
		x := uint32(off + int64(i))
		b[i] = byte((x * 2654435761) >> 24)
	}
}

// contentReader is an object's body as an io.ReadSeeker, for
// http.ServeContent.
type contentReader struct{ off, size int64 }

func (r *contentReader) Read(p []byte) (int, error) {
	if r.off >= r.size {
		return 0, io.EOF
	}
	n := min(int64(len(p)), r.size-r.off)
	content(p[:n], r.off)
	r.off += n
	return int(n), nil
}

func (r *contentReader) Seek(off int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		off += r.off
	case io.SeekEnd:
		off += r.size
	}
	if off < 0 {
		return 0, errors.New("negative position")
	}
	r.off = off
	return off, nil
}

// origin serves objects by path (the query names a copy: its own URL),
// with ranges, and counts per URL the body bytes it sent and the Range of
// each request.
type origin struct {
	addr    netip.AddrPort
	srv     *http.Server
	mu      sync.Mutex
	sent    map[string]*atomic.Int64
	ranges  map[string][]string
	objects map[string]int64
}

var modTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func startOrigin(addr netip.AddrPort, objects map[string]int64) (*origin, error) {
	ln, err := net.Listen("tcp", addr.String())
	if err != nil {
		return nil, fmt.Errorf("the origin's address %s (another run?): %w", addr, err)
	}
	o := &origin{addr: addr, sent: map[string]*atomic.Int64{}, ranges: map[string][]string{}, objects: objects}
	o.srv = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(o.serve)}
	go func() { _ = o.srv.Serve(ln) }()
	return o, nil
}

func (o *origin) serve(w http.ResponseWriter, r *http.Request) {
	size, ok := o.objects[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	o.mu.Lock()
	c := o.sent[r.URL.RequestURI()]
	if c == nil {
		c = new(atomic.Int64)
		o.sent[r.URL.RequestURI()] = c
	}
	o.ranges[r.URL.RequestURI()] = append(o.ranges[r.URL.RequestURI()], r.Header.Get("Range"))
	o.mu.Unlock()
	w.Header().Set("Cache-Control", "max-age=3600")
	w.Header().Set("Content-Type", "application/octet-stream")
	w.Header().Set("Etag", `"`+strconv.FormatInt(size, 36)+`-v1"`)
	http.ServeContent(&countingWriter{ResponseWriter: w, n: c}, r, "", modTime, &contentReader{size: size})
}

func (o *origin) sentFor(uri string) int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	if c := o.sent[uri]; c != nil {
		return c.Load()
	}
	return 0
}

func (o *origin) rangesFor(uri string) []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return slices.Clone(o.ranges[uri])
}

type countingWriter struct {
	http.ResponseWriter
	n *atomic.Int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	k, err := c.ResponseWriter.Write(p)
	c.n.Add(int64(k))
	return k, err
}

// startFleet starts the three proxies, one DSHT network, and waits until
// each has joined it.
func startFleet(ctx context.Context, p params, dir string, addr func(int) netip.Addr) ([]*proc.Process, error) {
	keyFile := filepath.Join(dir, "network.key")
	if err := coraldht.WriteKeyFile(keyFile); err != nil {
		return nil, err
	}
	cacheSize := strconv.FormatInt(max(p.Size, p.RangeObject)*3/2+64<<20, 10)
	var fleet []*proc.Process
	for i := range proxies {
		a := addr(10 + i)
		pdir := filepath.Join(dir, fmt.Sprintf("proxy-%d", i))
		if err := os.MkdirAll(pdir, 0o755); err != nil {
			return fleet, err
		}
		node := labconf.Node{Listen: netip.AddrPortFrom(a, dhtPort), KeyFile: keyFile, Clusters: map[int]string{1: "region", 2: "metro"}}
		if i > 0 {
			node.Bootstrap = []netip.AddrPort{netip.AddrPortFrom(addr(10), dhtPort)}
		}
		px := labconf.Proxy{Zone: zone, CacheDir: filepath.Join(pdir, "cache"), CacheSize: cacheSize, RateLimit: "off",
			AllowOrigins: []string{p.Net + ".0/24"}, AllowPeers: []string{p.Net + ".0/24"},
			PeerAddress: netip.AddrPortFrom(a, httpPort).String(),
			Extra:       []labconf.Directive{labconf.D("slice_size", strconv.FormatInt(p.Slice, 10))}}
		admin := netip.AddrPortFrom(a, adminPort)
		cf := filepath.Join(pdir, "Caddyfile")
		err := labconf.WriteFile(cf, labconf.Caddy{
			Comment: fmt.Sprintf("eval/slices proxy %d.", i), Admin: admin, AdminOrigins: []string{admin.String()}, HTTPSOff: true,
			Options: []labconf.Directive{labconf.D("log").With(labconf.D("output", "stderr"), labconf.D("level", "WARN"))},
			Coral:   node,
			Sites:   []labconf.Directive{labconf.D(fmt.Sprintf("http://:%d", httpPort)).With(labconf.D("bind", a), px.Directive())},
		}.String())
		if err != nil {
			return fleet, err
		}
		name := fmt.Sprintf("caddy-%d", i)
		x, err := proc.Start(labconf.CaddyArgv(p.Caddy, cf), proc.Options{Name: name, Dir: pdir, Env: labconf.CaddyEnv(pdir), Log: filepath.Join(pdir, name+".log"), TailLines: 20})
		if err != nil {
			return fleet, err
		}
		fleet = append(fleet, x)
		status := "http://" + admin.String() + "/coral/status"
		if err := evalrun.WaitFor(ctx, name+" in the network", 30*time.Second, x.Exited, func() error { return inNetwork(ctx, status, i > 0) }); err != nil {
			return fleet, err
		}
	}
	return fleet, nil
}

// inNetwork: the node at status has joined, and knows a contact if it
// should.
func inNetwork(ctx context.Context, status string, contact bool) error {
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, status, nil)
	resp, err := plainClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	var st struct {
		Node   *struct{ Joined bool } `json:"node"`
		Levels []struct{ Contacts int }
	}
	switch err := json.NewDecoder(resp.Body).Decode(&st); {
	case err != nil:
		return err
	case st.Node == nil || !st.Node.Joined:
		return errors.New("node not joined")
	case contact && (len(st.Levels) == 0 || st.Levels[0].Contacts == 0):
		return errors.New("no contact yet")
	}
	return nil
}

func printTable(w io.Writer, res *Result) {
	p, c := res.Params, res.Crowd
	fmt.Fprintf(w, "crowd: %d clients (%d per proxy) on a cold %s file, slice_size %s\n", len(c.Clients), p.Clients, humanize.IBytes(uint64(p.Size)), humanize.IBytes(uint64(p.Slice)))
	fmt.Fprintf(w, "  origin: %s sent (%.3f × the file), %d requests, %d slice ranges asked twice; %.1f s\n",
		humanize.IBytes(uint64(c.OriginBytes)), c.OriginRatio, c.OriginRequests, c.RangesAskedTwice, c.Seconds)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "proxy\tstatus\tbytes\tcorrect\tMB/s\tfirst byte ms\terror\t\n")
	for _, cl := range c.Clients {
		fmt.Fprintf(tw, "%d\t%d\t%d\t%v\t%.1f\t%.1f\t%s\t\n", cl.Proxy, cl.Status, cl.Bytes, cl.Correct, cl.MBps, cl.FirstMs, cl.Error)
	}
	tw.Flush()
	fmt.Fprintf(w, "cold ranges of a %s object at one proxy:\n", humanize.IBytes(uint64(p.RangeObject)))
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "case\trange\tstatus\tbody\tsocket bytes\tcorrect\torigin bytes\tms\t\n")
	for _, r := range res.Ranges {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%v\t%d\t%.1f\t\n", r.Case, r.Range, r.Status, r.BodyBytes, r.SocketBytes, r.Correct, r.OriginBytes, r.Ms)
	}
	tw.Flush()
	fmt.Fprintf(w, "load before %s, after %s (%s)\n", res.Provenance.LoadBefore, res.Provenance.LoadAfter, strings.TrimSpace(res.Provenance.Command))
}
