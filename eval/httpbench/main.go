// Command httpbench measures coral_proxy's cache-hit path with wrk against
// Caddy's own file_server serving the same bytes from files, and against
// Caddy's respond serving them from its configuration (the floor: the
// least any handler in the same Caddy can do for a response): one
// bin/caddy process, one run, the same load for all, over HTTP and over
// TLS. Debian's nginx with proxy_cache in front of the same origin is
// measured alongside, in the same run, over HTTP only.
//
//	go run ./eval/httpbench [-rounds 3] [-duration 10s] [-c 32] [-tls=false] [-large-size 256m] [-out docs/eval]
//
// It needs bin/caddy (make caddy), wrk and nginx; when wrk or nginx is
// missing and it runs as root, it installs them first with
// eval/httpbench/install-deps.sh (apt-get install wrk nginx; -install=false
// to refuse). -nginx= leaves nginx out; -tls=false leaves the TLS targets
// out (and Caddy's automatic HTTPS off, as before they were added).
//
// The set-up, all on loopback:
//
//   - the origin, an HTTP server inside this command on 127.0.90.1:8080,
//     serves /1k and /100k (fixed pseudo-random letters and digits from a
//     seeded generator, Cache-Control max-age=86400) and counts the
//     requests it gets;
//   - bin/caddy (make caddy) runs the coral app (its DSHT node on
//     127.0.90.2:4000, alone) and sites on 127.0.90.2: coral_proxy on
//     :8080, reached with Host 127.0.90.1.8080.nyud.test (the dotted
//     Coralized name), file_server on :8081, whose root holds the same
//     bytes as files /1k and /100k, and respond on :8084 (-port+4), one
//     `respond /1k `<the bytes>` 200` per object in a snippet (the bytes
//     are letters and digits, so a backtick-quoted token carries them as
//     they are; respond sets no Content-Length, so net/http sends a body
//     too big for its 2 KiB buffer, the 100 KiB one, chunked), and
//     respond-head on :8086 (-port+6): the same respond, with Caddy's
//     header directive setting the header fields of a coral_proxy hit
//     (the origin's Content-Type, Cache-Control, Last-Modified and
//     Content-Length, a fixed Date, Via, Cache-Status, Age and
//     Accept-Ranges; the checks compare its head with coral's), the floor
//     of the same response, where respond sends two fields; with -tls
//     also coral_proxy over TLS on :8082 (site *.nyud.test), reached as
//     https://127-0-90-1-8080.nyud.test:8082/ (the one-label name, which a
//     wildcard certificate covers; the same cache directory, so the same
//     store and cache keys as over HTTP), file_server over TLS on :8083
//     (site files.test), reached as https://files.test:8083/, and respond
//     over TLS on :8085 (site respond.test, the same snippet), reached as
//     https://respond.test:8085/; all sites in one Caddyfile with the same
//     global options;
//   - nginx (Debian's, apt-get install nginx) on 127.0.90.3:8080 with
//     proxy_cache in front of the origin, from a generated configuration in
//     a temporary directory (nginx -p DIR -c DIR/nginx.conf -e DIR/error.log
//     -g 'daemon off;'): one worker per CPU, sendfile on, no access log,
//     tcp_nopush off (Debian's nginx.conf turns it on; over loopback it
//     stalls every 100 KiB response for a 40 ms delayed ACK).
//
// Over TLS, the certificates come from Caddy's own local CA (tls internal:
// a wildcard *.nyud.test, files.test and respond.test), made in Caddy's
// data directory
// inside the bench's temporary directory (labconf.CaddyEnv), with
// skip_install_trust so that nothing touches the system's trust store, and
// auto_https disable_redirects so that no HTTP->HTTPS redirect listens on
// port 80 (the http:// sites are as without -tls). The checks in this
// process verify the certificates against that CA's root
// (pki/authorities/local/root.crt), with the target's name as the SNI. wrk
// takes the SNI and the Host header from the URL's host, so its URL carries
// the name; the names are in no DNS and no /etc/hosts, and wrk has no
// --resolve, so a Lua script (wrk -s, in the temporary directory and in
// the JSON) replaces wrk.resolve, which wrk calls once before the run, with
// a lookup of Caddy's address. That needs no root, no mount namespace and
// no certificate for an IP address, and changes nothing per request: the
// script has no request or response function, so wrk still sends one
// prebuilt request. wrk offers no ALPN protocol, so the TLS targets speak
// HTTP/1.1 over TLS 1.3, as the checks do; wrk does not verify the
// certificate, the checks do.
//
// Before measuring, each cache is warmed by one request per object, and the
// next request must be a hit (coral_proxy, over HTTP and over TLS:
// Cache-Status: coral; hit; detail="local"; nginx: X-Cache-Status: HIT);
// every target's body (file_server's and respond's too) must be the
// origin's bytes with status 200. Then:
//
//   - warm-up: a short unmeasured wrk run per target and size;
//   - throughput: -rounds rounds; in each, for each object size, one wrk run
//     (-t -c, --latency) per target, the targets' order rotated from round
//     to round (coral/file/respond/coral-tls/file-tls/respond-tls/nginx,
//     then file/respond/coral-tls/.../nginx/coral, ...) and the sizes'
//     order alternated; with -slices K, each of those runs is K wrk runs
//     of -duration/K, the targets' slices interleaved (slice 1 of every
//     target, then slice 2, the order rotated once more per slice), and a
//     target's req/s in the round is its slices' requests over their run
//     time (and its CPU per request their CPU over their requests): on a
//     shared machine whose speed drifts by 15-35 % over tens of seconds,
//     the drift then reaches every target of a round alike (and only the
//     first slice of a round's size waits for a quiet machine, so that
//     the slices follow each other closely);
//   - a large object (-large-size, 256 MiB; 0 leaves it out): one object
//     of pseudo-random bytes from a seeded generator, written once to
//     file_server's root and served by the origin from that file (ranges
//     honoured, for coral_proxy's slices), is warmed and checked in
//     coral_proxy, nginx and the -baseline Caddy (every body hashed as it
//     streams, never held), then measured in -rounds rounds: per round,
//     for each of -large-streams (1 and 4), one run of -large-duration
//     per target (coral, file, nginx, coral-old; the order rotated from
//     round to round, the stream counts' order alternated), in which that
//     many clients in this process, each on its own keep-alive
//     connection, ask for the object again and again and count every
//     body byte that arrives within the run through a fixed buffer (wrk
//     would complete a handful of responses and count only those). Every
//     response must be a 200 of the whole object and, for the caches, a
//     hit; the origin must see no request. Per round coral/file,
//     nginx/file and new/old of MB/s, and their medians; Caddy's resident
//     memory before and its peak (VmHWM) after (large.go);
//   - proxy memory: -proxy-objects distinct small objects are fetched through
//     coral_proxy (each a miss: an origin fetch, a DSHT put+get, a disk
//     write), and Caddy's heap in use after a GC (its admin endpoint's
//     /debug/pprof/heap?gc=1, then /metrics) gives the whole proxy's bytes per
//     cached object, DSHT references included; and again -proxy-settle
//     (160 s) later, when the DSHT node has dropped the per-key load records
//     it keeps for two minutes after a key's last request (the index
//     measurement below runs meanwhile);
//   - index memory: in this process, a diskcache.Store (the cache under
//     coral_proxy; on tmpfs, /dev/shm, when there is one) gets
//     -index-objects small objects with 40-hex-digit keys;
//     the heap in use after a GC, before and after, gives the index's bytes
//     per object; the store is reopened (index rebuilt from disk) and
//     measured again; then every object is read twice, as by two hits,
//     which fills the store's hot set of decoded metadata (bounded by
//     diskcache.DefaultHotMetaBytes), and measured again.
//
// Around every run the CPU time of Caddy, nginx (master and workers), wrk
// and the rest of the machine is read from /proc. Before every run the
// command waits (at most -quiet) for other processes to go quiet, and when
// they took over 0.25 CPUs during a run anyway, that round's runs of that
// size are repeated (at most -repeat times; the disturbed ones are kept in
// the JSON, not counted). The origin
// must see no request during any measured run (every response a hit), and
// wrk must see no socket error and no non-2xx response in any run of any
// target; the checks before the runs are repeated after them.
//
// An A/B of two builds (-baseline PATH): a second Caddy, the binary at
// PATH (an older bin/caddy, say), runs the same Caddyfile (coral_proxy and
// file_server over HTTP, each Caddy with its own cache directory, data
// directory and DSHT node) on -baseline-addr (127.0.90.4). Its coral_proxy
// is one more target, coral-old, warmed and checked as coral is, and
// measured in the same rounds, its runs alternated with the others'; each
// round gives new/old, coral's req/s over coral-old's, and the median of
// those is printed per size; the large object is measured on it too
// (new/old of MB/s per stream count, no acceptance). Both Caddyfiles
// raise coral_proxy's max_object_size to the large object's size when it
// is over its default, an eighth of cache_size. Both Caddy processes run
// throughout; the one not under load is idle. The respond site and, without -tls=false, the
// TLS sites are in -caddy's Caddyfile only (an older build may not know
// one-label names). For the A/B alone:
//
//	go run ./eval/httpbench -baseline /path/to/old/caddy -tls=false -nginx= \
//	    -index-objects 0 -proxy-objects 0 -out /tmp/ab
//
// Acceptance (issue 5): coral_proxy's cache-hit throughput ≥ 0.9× file_server's
// (median over rounds of the per-round ratio) for both object sizes; and,
// with -tls, the same over TLS: coral-tls ≥ 0.9× file-tls. Issue 25:
// coral ≥ 0.9× respond (median over rounds of the per-round ratio) for
// every size, and with -tls coral-tls ≥ 0.9× respond-tls; coral/respond-head
// is printed beside it, without an acceptance: the part of a hit's cost
// that is the handler's own, not the header fields'. With -baseline
// (issue 19), new/old ≥ 1.0 for every size. The command writes its results
// either way (httpbench.json: coral_over_respond_by_round,
// median_coral_over_respond and their TLS twins per size,
// pass_coral_ge_0_9_respond and pass_tls_coral_ge_0_9_respond), and exits
// with status 1 if a check failed or an acceptance was not met.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
)

// params describes one run of the experiment.
type params struct {
	Caddy      string // the Caddy binary with coral
	Nginx      string // the nginx binary ("": no nginx)
	Wrk        string // the wrk binary
	OriginAddr string // the origin's address
	CaddyAddr  string // Caddy's sites, admin endpoint and DSHT node
	NginxAddr  string
	Port       int // origin, coral_proxy and nginx; file_server on Port+1, respond on Port+4, respond-head on Port+6
	Sizes      []int
	// The large-object section (large.go): its object's size (0: none),
	// the stream counts and one run's length.
	LargeSize     int64
	LargeStreams  []int
	LargeDuration time.Duration
	Rounds        int
	Duration      time.Duration // one measured wrk run
	Slices        int           // a measured run cut into this many slices, interleaved with the other targets'
	Warmup        time.Duration // one unmeasured wrk run per target and size first
	Threads       int           // wrk -t
	Conns         int           // wrk -c
	NginxWorkers  int           // worker_processes; 0: auto (one per CPU)
	IndexObjects  int           // diskcache objects for the index measurement (0: skip)
	ProxyObjects  int           // objects fetched through coral_proxy for its memory (0: skip)
	ProxySettle   time.Duration // then measure again this long after the fetch (0: don't)
	Quiet         time.Duration // the longest to wait before a run for other processes to go quiet
	Repeat        int           // the most times a round's runs of one size are repeated when disturbed
	Profile       string        // directory for CPU profiles of Caddy (empty: none)
	Baseline      string        // a second Caddy binary with coral for the A/B (empty: none)
	BaselineAddr  string        // its sites, admin endpoint and DSHT node
	Install       bool          // run install-deps.sh when wrk or nginx is missing (as root)
	TLS           bool          // also coral_proxy, file_server and respond over TLS, on Port+2, Port+3 and Port+5
	Out           string
	Name          string // stem of the output files
}

func defaultParams() params {
	return params{
		Caddy:         "bin/caddy",
		Nginx:         "nginx",
		Wrk:           "wrk",
		OriginAddr:    "127.0.90.1",
		CaddyAddr:     "127.0.90.2",
		NginxAddr:     "127.0.90.3",
		BaselineAddr:  "127.0.90.4",
		Port:          8080,
		Sizes:         []int{1 << 10, 100 << 10},
		LargeSize:     256 << 20,
		LargeStreams:  []int{1, 4},
		LargeDuration: 5 * time.Second,
		Rounds:        3,
		Duration:      10 * time.Second,
		Slices:        1,
		Warmup:        2 * time.Second,
		Threads:       1,
		Conns:         32,
		IndexObjects:  100000,
		ProxyObjects:  20000,
		ProxySettle:   160 * time.Second,
		Quiet:         60 * time.Second,
		Repeat:        2,
		Install:       true,
		TLS:           true,
		Out:           "docs/eval",
		Name:          "httpbench",
	}
}

// targetRatio is the acceptance: coral req/s over file_server req/s.
const targetRatio = 0.9

// respondRatio is issue 25's acceptance: coral req/s over respond req/s, a
// hit within 10 % of the cheapest answer the same Caddy can give.
const respondRatio = 0.9

// baselineRatio is the A/B's acceptance (issue 19): coral_proxy's hits in
// -caddy at least as fast as in -baseline, the build before the hardening
// that bounded them.
const baselineRatio = 1.0

func main() {
	p := defaultParams()
	flag.StringVar(&p.Caddy, "caddy", p.Caddy, "Caddy binary with the coral module (make caddy)")
	flag.StringVar(&p.Nginx, "nginx", p.Nginx, "nginx binary (\"\": leave nginx out)")
	flag.StringVar(&p.Wrk, "wrk", p.Wrk, "wrk binary")
	flag.StringVar(&p.OriginAddr, "origin-addr", p.OriginAddr, "loopback address of the origin (served by this command)")
	flag.StringVar(&p.CaddyAddr, "caddy-addr", p.CaddyAddr, "loopback address of Caddy's sites, admin endpoint (:2019) and DSHT node (UDP :4000)")
	flag.StringVar(&p.NginxAddr, "nginx-addr", p.NginxAddr, "loopback address of nginx")
	flag.IntVar(&p.Port, "port", p.Port, "TCP port of the origin, coral_proxy and nginx; file_server gets -port+1, respond -port+4, respond-head -port+6, and with -tls coral_proxy, file_server and respond over TLS -port+2, -port+3 and -port+5")
	flag.Var((*sizeList)(&p.Sizes), "sizes", "object sizes in bytes, space-separated (k suffix: KiB)")
	flag.Var((*largeSizeFlag)(&p.LargeSize), "large-size", "size of the large object, whole MiB (256m), served as a coral_proxy hit against file_server (and nginx, and -baseline's coral_proxy) by streaming clients (0: no large-object section)")
	flag.Var((*streamsFlag)(&p.LargeStreams), "large-streams", "concurrent streams per large-object run, space-separated (one run per count, target and round)")
	flag.DurationVar(&p.LargeDuration, "large-duration", p.LargeDuration, "length of one large-object run")
	flag.IntVar(&p.Rounds, "rounds", p.Rounds, "throughput rounds (one wrk run per target and size each)")
	flag.DurationVar(&p.Duration, "duration", p.Duration, "length of one measured wrk run")
	flag.IntVar(&p.Slices, "slices", p.Slices, "cut each measured run into this many wrk runs of -duration/slices (whole seconds), interleaved with the other targets' in the round; a round's req/s is then its slices' requests over their time")
	flag.DurationVar(&p.Warmup, "warmup", p.Warmup, "unmeasured wrk run per target and size before measuring (0: none)")
	flag.IntVar(&p.Threads, "t", p.Threads, "wrk -t: threads")
	flag.IntVar(&p.Conns, "c", p.Conns, "wrk -c: connections (kept alive)")
	flag.IntVar(&p.NginxWorkers, "nginx-workers", p.NginxWorkers, "nginx worker_processes (0: auto, one per CPU, as Caddy's GOMAXPROCS)")
	flag.IntVar(&p.IndexObjects, "index-objects", p.IndexObjects, "objects put in a diskcache.Store in this process to measure the index's memory (0: skip)")
	flag.IntVar(&p.ProxyObjects, "proxy-objects", p.ProxyObjects, "distinct objects fetched through coral_proxy to measure Caddy's heap per cached object (0: skip)")
	flag.DurationVar(&p.ProxySettle, "proxy-settle", p.ProxySettle, "measure Caddy's heap again this long after the proxy-memory fetch, when the DSHT node has dropped its per-key load records (kept 2 min; 0: don't)")
	flag.DurationVar(&p.Quiet, "quiet", p.Quiet, "before each run, wait at most this long for other processes to use under 0.15 CPUs (1 s samples; 0: don't wait)")
	flag.IntVar(&p.Repeat, "repeat", p.Repeat, "repeat a round's runs of one size, at most this many times, when other processes used over 0.25 CPUs during one of them")
	flag.StringVar(&p.Profile, "profile", p.Profile, "directory for CPU profiles of Caddy under load (an extra unmeasured coral, file, respond and respond-head run per size) and its heap profile after the proxy-memory fetch (empty: none)")
	flag.StringVar(&p.Baseline, "baseline", p.Baseline, "a second Caddy binary with coral (an older build) run beside -caddy with the same Caddyfile on -baseline-addr: its coral_proxy hits (target coral-old) alternate with -caddy's, and new/old req/s is printed per size (empty: none)")
	flag.StringVar(&p.BaselineAddr, "baseline-addr", p.BaselineAddr, "loopback address of the -baseline Caddy's sites, admin endpoint and DSHT node")
	flag.BoolVar(&p.Install, "install", p.Install, "when wrk or nginx is missing and this runs as root, install them with eval/httpbench/install-deps.sh")
	flag.BoolVar(&p.TLS, "tls", p.TLS, "also measure coral_proxy, file_server and respond over TLS (Caddy's local CA), on -port+2, -port+3 and -port+5")
	flag.StringVar(&p.Out, "out", p.Out, "directory for NAME.json and NAME.png")
	flag.StringVar(&p.Name, "name", p.Name, "stem of the output files")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	_, err := experiment(ctx, p, evalrun.CommandLine("httpbench"))
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "httpbench:", err)
		os.Exit(1)
	}
}

// Errors that end the command with status 1 after the results are written.
var (
	errBelowTarget = errors.New("acceptance not met")
	errChecks      = errors.New("checks failed")
)

// sizeList is the -sizes flag: bytes, space-separated, "k" for KiB.
type sizeList []int

func (l *sizeList) String() string {
	if l == nil {
		return ""
	}
	var parts []string
	for _, n := range *l {
		parts = append(parts, sizeName(n))
	}
	return strings.Join(parts, " ")
}

func (l *sizeList) Set(v string) error {
	*l = nil
	for _, f := range strings.Fields(v) {
		mult := 1
		s := f
		if t, ok := strings.CutSuffix(strings.ToLower(s), "k"); ok {
			s, mult = t, 1<<10
		}
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n*mult > 64<<20 {
			return fmt.Errorf("size %q: want 1 byte to 64 MiB", f)
		}
		*l = append(*l, n*mult)
	}
	if len(*l) == 0 {
		return errors.New("no size")
	}
	return nil
}

// sizeName is an object's name and path on the origin: 1k for 1024 bytes,
// 100k for 102400, 1000 for 1000.
func sizeName(n int) string {
	if n%1024 == 0 {
		return strconv.Itoa(n/1024) + "k"
	}
	return strconv.Itoa(n)
}

// sizeLabel is a size for people: 1 KiB, 100 KiB, 1000 B.
func sizeLabel(n int) string {
	switch {
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n%1024 == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
