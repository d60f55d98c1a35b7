// Command flashcrowd is the paper's flash-crowd experiment (NSDI'04 §6.1–6.2,
// Figures 4 and 5) scaled to one machine, with real bin/caddy processes:
// a slow origin, a network of coral_proxy instances in a hierarchy of
// pinned clusters, and a crowd of clients that all want the same four pages.
//
//	go run ./eval/flashcrowd [-proxies 12] [-clients 150] [-duration 4m] [-out docs/eval]
//	go run ./eval/flashcrowd -quick        # about a minute of load
//
// It needs bin/caddy (make caddy). The set-up, all on loopback, in
// 127.0.100.0/24 and the source addresses 127.0.101–109.x:
//
//   - the origin, an HTTP server inside this command on 127.0.100.1:8080,
//     serves 12 files of 41 KiB (fixed pseudo-random bytes; Cache-Control
//     max-age=86400, so they stay fresh for the whole run) through one
//     384 kbit/s line: a token bucket shared by every response it sends, the
//     paper's DSL upstream. It counts every request per file and remembers
//     which client request caused it (a header the proxies pass on);
//   - -proxies (12) bin/caddy processes, proxy i on 127.0.100.(10+i): the
//     coral app (its DSHT node on UDP :4000, one generated network key,
//     bootstrapping through proxy 0, levels 60ms 20ms as in the paper) and
//     coral_proxy on :8080, admin API on :2019. Loopback RTTs are all about
//     zero, so the hierarchy is pinned with `cluster`: by default level 1
//     has 2 clusters of 6 (the paper's 60 ms "regions") and level 2 has 4
//     clusters of 3 (its 20 ms "metros"), each level-2 cluster inside one
//     level-1 cluster. The command waits until every node has joined and
//     knows every member of its clusters (admin API /coral/status);
//   - the start burst: at t = 0 every proxy is asked for every file at once:
//     144 requests on connections opened beforehand, written back to back
//     by one goroutine released by a barrier, its thread at the highest
//     priority when run as root (the spread of the sends is reported, with a
//     warning beyond 10 ms). The crowd starts at the same time;
//   - the crowd: -clients (150) client goroutines, each with a source address
//     of its own (127.0.101.1, …), picks one of the 4 pages (3 files each)
//     at random, waits a random start delay (0 to -spread), then loads its
//     page again and again until -duration is over: the 3 files in
//     parallel through one proxy chosen at random for each load, then a
//     think time (uniform in 0.5–1.5 × -think). With the defaults that is
//     about 0.6 requests per second per client, the paper's rate (166
//     clients, 99.6 requests per second).
//
// Every response is checked: status 200 and the origin's bytes, byte for
// byte. Its source comes from its Cache-Status: a local hit, collapsed
// (joined a download already running at that proxy), from a peer found at
// level 2, 1 or 0, or from the origin. The command prints a table per
// minute (requests by source, origin fetches, latency), the origin fetches
// per file, latency percentiles by source, and the paper's figures beside
// ours; it writes docs/eval/flashcrowd.json, flashcrowd.png (requests per
// minute by source, like Figure 4) and flashcrowd-latency.png (latency CDF,
// log x, like Figure 5). -quick writes flashcrowd-quick.* instead.
//
// Two variants beside the paper's set-up:
//
//   - -pin=false: the clusters are not pinned; the nodes form them from
//     what they measure (on loopback every RTT is below both thresholds),
//     and the command waits, at most -settle (6 minutes unless given: one
//     clustering period and some), until every node's clusters at levels 1
//     and 2 hold every node. What formed is in the JSON's readiness;
//   - -error-crowd: the origin also answers /missing with a bare 404 (no
//     freshness information), and the start burst and the crowd ask for
//     that URL instead of the pages: one request per page load. Every
//     response must be the origin's 404; the origin's requests for it are
//     counted, not judged (coral_proxy does not store an error without
//     freshness: module/caddy/README.md).
//
// Acceptance (exit status 1 otherwise, with the reason): exactly one origin
// fetch per file over the whole run (12 in all), the start burst's included,
// and every request answered 200 with the right bytes. When the origin saw
// more fetches, the report names the client request behind each one, its
// proxy and its Cache-Status, and the proxies' logs are kept.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
)

// params describes one run of the experiment.
type params struct {
	Caddy     string        // the Caddy binary with coral
	Proxies   int           // bin/caddy processes
	L1        int           // clusters at level 1
	L2        int           // clusters at level 2 (a multiple of L1: each inside one level-1 cluster)
	Net       string        // the /24 of the origin and the proxies, as "127.0.100"
	Port      int           // TCP port of the origin and of every proxy
	Files     int           // files on the origin
	FileBytes int           // bytes per file
	PageFiles int           // files per page
	LineKbit  int           // the origin's line, kbit/s
	Clients   int           // client goroutines
	Duration  time.Duration // load, from the start burst on
	Spread    time.Duration // client start delays are uniform in [0, Spread)
	Think     time.Duration // mean think time between a client's page loads
	Timeout   time.Duration // one client request, headers to last byte
	Settle    time.Duration // the longest to wait for the DSHT to be ready
	Seed      uint64        // clients' choices
	Burst     bool          // the start burst at t = 0
	Pin       bool          // pin the clusters (false: the nodes form them)
	// ErrorCrowd makes the burst and the crowd ask for the origin's
	// error URL instead of its files.
	ErrorCrowd bool
	Debug      bool // Caddy logs at DEBUG
	Keep       bool // keep the temporary directory (configurations, logs, caches)
	Quick      bool
	Records    string // CSV of every request ("": none)
	Name       string // output file names' stem
	Out        string
}

func defaultParams() params {
	return params{
		Caddy:     "bin/caddy",
		Proxies:   12,
		L1:        2,
		L2:        4,
		Net:       "127.0.100",
		Port:      8080,
		Files:     12,
		FileBytes: 41 << 10,
		PageFiles: 3,
		LineKbit:  384,
		Clients:   150,
		Duration:  4 * time.Minute,
		Spread:    30 * time.Second,
		Think:     5 * time.Second,
		Timeout:   60 * time.Second,
		Settle:    60 * time.Second,
		Seed:      1,
		Burst:     true,
		Pin:       true,
		Name:      "flashcrowd",
		Out:       "docs/eval",
	}
}

// quickParams changes what -quick changes, unless given explicitly.
func quickParams(p *params, set map[string]bool) {
	if !set["duration"] {
		p.Duration = time.Minute
	}
	if !set["spread"] {
		p.Spread = 10 * time.Second
	}
	if !set["name"] {
		p.Name = "flashcrowd-quick"
	}
}

func main() {
	p := defaultParams()
	flag.StringVar(&p.Caddy, "caddy", p.Caddy, "Caddy binary with the coral module (make caddy)")
	flag.IntVar(&p.Proxies, "proxies", p.Proxies, "bin/caddy processes (proxy i on NET.(10+i))")
	flag.IntVar(&p.L1, "l1", p.L1, "clusters at level 1 (60 ms), proxies split evenly in order")
	flag.IntVar(&p.L2, "l2", p.L2, "clusters at level 2 (20 ms), a multiple of -l1 so each lies inside one level-1 cluster")
	flag.StringVar(&p.Net, "net", p.Net, "first three octets of the loopback /24 of the origin (.1) and the proxies (.10 on); clients use the next /24s as sources")
	flag.IntVar(&p.Port, "port", p.Port, "TCP port of the origin and of every coral_proxy")
	flag.IntVar(&p.Files, "files", p.Files, "files on the origin")
	flag.IntVar(&p.FileBytes, "file-bytes", p.FileBytes, "bytes per file")
	flag.IntVar(&p.PageFiles, "page-files", p.PageFiles, "files per page (the pages split the files evenly)")
	flag.IntVar(&p.LineKbit, "line", p.LineKbit, "the origin's upstream line in kbit/s, shared by all its responses")
	flag.IntVar(&p.Clients, "clients", p.Clients, "client goroutines, each with a source address of its own")
	flag.DurationVar(&p.Duration, "duration", p.Duration, "load, from the start burst on (-quick: 1m)")
	flag.DurationVar(&p.Spread, "spread", p.Spread, "clients start after a random delay in [0, spread) (-quick: 10s)")
	flag.DurationVar(&p.Think, "think", p.Think, "mean think time between one client's page loads (uniform in 0.5–1.5×)")
	flag.DurationVar(&p.Timeout, "timeout", p.Timeout, "one client request, sent to last byte")
	flag.DurationVar(&p.Settle, "settle", p.Settle, "longest wait for every DSHT node to join and know its clusters' members")
	flag.Uint64Var(&p.Seed, "seed", p.Seed, "seed of the clients' choices (pages, proxies, delays)")
	flag.BoolVar(&p.Burst, "burst", p.Burst, "start with the burst (every proxy asks for every file at t = 0); false: the crowd alone, arriving over -spread")
	flag.BoolVar(&p.Pin, "pin", p.Pin, "pin the clusters (-l1, -l2); false: the nodes form them from their RTTs (-settle 6m unless given)")
	flag.BoolVar(&p.ErrorCrowd, "error-crowd", p.ErrorCrowd, "the burst and the crowd ask for "+errorPath+", which the origin answers with a bare 404")
	flag.BoolVar(&p.Debug, "debug", p.Debug, "Caddy logs at DEBUG level (kept with -keep or on failure)")
	flag.BoolVar(&p.Keep, "keep", p.Keep, "keep the temporary directory (Caddyfiles, logs, caches); it is always kept when the acceptance fails")
	flag.BoolVar(&p.Quick, "quick", p.Quick, "about a minute of load (-duration 1m -spread 10s), output as flashcrowd-quick.*")
	flag.StringVar(&p.Records, "records", p.Records, "also write every request to this CSV file (\"\": don't)")
	flag.StringVar(&p.Name, "name", p.Name, "stem of the output files in -out (-quick: flashcrowd-quick)")
	flag.StringVar(&p.Out, "out", p.Out, "directory for NAME.json, NAME.png and NAME-latency.png")
	flag.Parse()
	set := map[string]bool{}
	flag.Visit(func(f *flag.Flag) { set[f.Name] = true })
	if p.Quick {
		quickParams(&p, set)
	}
	if !p.Pin && !set["settle"] {
		p.Settle = formedSettle
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	_, err := experiment(ctx, p, evalrun.CommandLine("flashcrowd"))
	stop()
	if err != nil {
		fmt.Fprintln(os.Stderr, "flashcrowd:", err)
		os.Exit(1)
	}
}

// errAcceptance ends the command with status 1 after the results are
// written.
var errAcceptance = errors.New("acceptance not met")
