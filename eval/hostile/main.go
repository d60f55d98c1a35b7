//go:build linux

// Command hostile is the long, randomized version of the hostile-origin
// lab (internal/lab/hostilelab): the real bin/caddy and a peer on loopback
// (127.0.93.0/24 by default), attacked class by class by the evil origin
// of internal/lab/evilorigin and by hostile clients, while a canary keeps
// fetching an honest origin and a few victim objects and the attacked
// proxy's memory, open files, goroutines and disk use are sampled.
//
//	go run ./eval/hostile [-seed 1] [-duration 20s] [-classes headers,mix] [-out docs/eval]
//
// It needs bin/caddy (make caddy). For each class it prints a row: the
// hostile requests and what reached the evil origin, peak RSS over idle,
// peak disk (the cache directory plus unlinked files the proxy still holds
// open) against cache_size, peak open files and goroutines, canary
// failures and p99, changed victims, same-host failures, and then every
// broken invariant in words. It writes docs/eval/hostile.json. The exit
// status is 1 when an invariant broke (the table is the finding: today's
// main breaks some, see docs/evaluation.md).
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/internal/lab/hostilelab"
)

type report struct {
	Command   string              `json:"command"`
	Date      string              `json:"date"`
	Caddy     string              `json:"caddy"`
	CPUs      int                 `json:"cpus"`
	Kernel    string              `json:"kernel"`
	Go        string              `json:"go"`
	LoadAvg   [2]string           `json:"loadavg_before_after"`
	Seed      uint64              `json:"seed"`
	PerClass  string              `json:"duration_per_class"`
	CacheSize int64               `json:"cache_size"`
	Bounds    hostilelab.Bounds   `json:"bounds"`
	Classes   []classDoc          `json:"classes"`
	Results   []hostilelab.Result `json:"results"`
	Broken    int                 `json:"classes_broken"`
	Wall      float64             `json:"wall_seconds"`
}

type classDoc struct {
	Name    string `json:"name"`
	Doc     string `json:"doc"`
	Defects []int  `json:"defects"`
}

func main() {
	caddy := flag.String("caddy", "bin/caddy", "Caddy binary with the coral module (make caddy)")
	seed := flag.Uint64("seed", 1, "seed of the random choices (Mix recipes, variants, tags)")
	duration := flag.Duration("duration", 20*time.Second, "attack time per class")
	classes := flag.String("classes", "", "comma-separated classes to run (default: all)")
	cacheSize := flag.Int64("cache-size", hostilelab.DefaultCacheSize, "cache_size of both proxies, bytes")
	network := flag.String("net", "127.0.93", "loopback /24 of the lab")
	out := flag.String("out", "docs/eval", "directory for hostile.json (\"\": none)")
	keep := flag.Bool("keep", false, "keep the temporary directory (Caddyfiles, logs, caches)")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	broken, err := run(ctx, *caddy, *seed, *duration, *classes, *cacheSize, *network, *out, *keep)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostile:", err)
		os.Exit(2)
	}
	if broken > 0 {
		fmt.Fprintf(os.Stderr, "hostile: %d classes broke an invariant\n", broken)
		os.Exit(1)
	}
}

func run(ctx context.Context, caddy string, seed uint64, d time.Duration, only string, cacheSize int64, network, out string, keep bool) (int, error) {
	started := time.Now()
	if _, err := os.Stat(caddy); err != nil {
		return 0, fmt.Errorf("%s: %v (run `make caddy`)", caddy, err)
	}
	caddy, err := filepath.Abs(caddy) // the proxies run in directories of their own
	if err != nil {
		return 0, err
	}
	if out != "" {
		// Before the run, not after: a directory that cannot be made
		// fails at once, not after every class has run.
		if err := os.MkdirAll(out, 0o755); err != nil {
			return 0, err
		}
	}
	var run []hostilelab.Class
	if only == "" {
		run = hostilelab.Classes
	} else {
		for _, name := range strings.Split(only, ",") {
			c, ok := hostilelab.LookupClass(strings.TrimSpace(name))
			if !ok {
				return 0, fmt.Errorf("no class %q", name)
			}
			run = append(run, c)
		}
	}
	dir, err := os.MkdirTemp("", "hostile-")
	if err != nil {
		return 0, err
	}
	rep := report{
		Command: evalrun.CommandLine("hostile"), Date: time.Now().UTC().Format(time.RFC3339),
		Caddy: evalrun.FirstLine(exec.Command(caddy, "version")), CPUs: runtime.NumCPU(), Kernel: evalrun.Kernel(),
		Go: runtime.Version(), Seed: seed, PerClass: d.String(), CacheSize: cacheSize,
		Bounds: hostilelab.DefaultBounds(cacheSize),
	}
	rep.LoadAvg[0] = evalrun.LoadAvg()
	lab, err := hostilelab.Start(ctx, hostilelab.Config{Caddy: caddy, Dir: dir, Net: network, CacheSize: cacheSize,
		Logf: func(f string, a ...any) { fmt.Printf(f+"\n", a...) }})
	if err != nil {
		return 0, fmt.Errorf("%v (logs in %s)", err, dir)
	}
	defer func() {
		lab.Stop()
		if !keep {
			_ = os.RemoveAll(dir)
		} else {
			fmt.Println("kept", dir)
		}
	}()
	if errs := lab.Warm(); len(errs) > 0 {
		return 0, fmt.Errorf("warming up, before any attack: %d failures, first: %s", len(errs), errs[0])
	}
	fmt.Printf("%s, %v per class, seed %d, cache_size %s, bounds %+v\n", rep.Caddy, d, seed, hostilelab.MiB(cacheSize), rep.Bounds)
	for i, c := range run {
		rep.Classes = append(rep.Classes, classDoc{c.Name, c.Doc, c.Defects})
		fmt.Printf("--- %s: %s\n", c.Name, c.Doc)
		res, err := lab.Run(ctx, c, d, seed*1000+uint64(i), rep.Bounds)
		if err != nil {
			return 0, err
		}
		rep.Results = append(rep.Results, res)
		fmt.Print(hostilelab.Table([]hostilelab.Result{res}))
		for _, v := range res.Violations {
			fmt.Println("    BROKEN:", v)
		}
		if len(res.Violations) > 0 {
			rep.Broken++
		}
		if res.Exited != "" {
			fmt.Println(lab.Proxy.LogTail(40))
			break // the lab cannot go on without its proxy
		}
		if ctx.Err() != nil {
			break
		}
	}
	rep.LoadAvg[1] = evalrun.LoadAvg()
	rep.Wall = time.Since(started).Seconds()
	fmt.Printf("\n=== every class, %v each (seed %d) ===\n%s", d, seed, hostilelab.Table(rep.Results))
	if out != "" {
		b, err := json.MarshalIndent(rep, "", "  ")
		if err != nil {
			return 0, err
		}
		path := filepath.Join(out, "hostile.json")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			return 0, err
		}
		fmt.Println("wrote", path)
	}
	return rep.Broken, nil
}
