//go:build linux

// Command hostile is the long, randomized version of the hostile lab
// (internal/lab/hostilelab): the real bin/caddy and a peer on loopback
// (127.0.93.0/24 by default), attacked class by class by the evil origin
// of internal/lab/evilorigin and by hostile clients, while a canary keeps
// fetching an honest origin and a few victim objects and the attacked
// proxy's memory, open files, goroutines and disk use are sampled; then
// the real bin/coredns in network namespaces, attacked by forged sources
// and forged probe replies while a canary resolver asks (the DNS classes,
// hostilelab.DNSClasses; they need root).
//
//	go run ./eval/hostile [-seed 1] [-duration 20s] [-classes headers,mix,dns-forged-flood] [-out docs/eval]
//
// It needs bin/caddy (make caddy) for the proxy classes and bin/coredns
// (make coredns) for the DNS classes. For each proxy class it prints a row: the
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
	Provenance *evalrun.Provenance `json:"provenance"`
	Command    string              `json:"command"`
	Date       string              `json:"date"`
	Caddy      string              `json:"caddy,omitempty"`
	CoreDNS    string              `json:"coredns,omitempty"`
	CPUs       int                 `json:"cpus"`
	Kernel     string              `json:"kernel"`
	Go         string              `json:"go"`
	LoadAvg    [2]string           `json:"loadavg_before_after"`
	Seed       uint64              `json:"seed"`
	PerClass   string              `json:"duration_per_class"`
	CacheSize  int64               `json:"cache_size"`
	Bounds     hostilelab.Bounds   `json:"bounds"`
	Classes    []classDoc          `json:"classes"`
	Results    []hostilelab.Result `json:"results"`
	// DNSResults are the DNS classes' (hostilelab.DNSClasses).
	DNSResults []hostilelab.DNSResult `json:"dns_results,omitempty"`
	Broken     int                    `json:"classes_broken"`
	Wall       float64                `json:"wall_seconds"`
}

type classDoc struct {
	Name    string `json:"name"`
	Doc     string `json:"doc"`
	Defects []int  `json:"defects,omitempty"` // issue 19's, for the proxy classes
	Finding int    `json:"finding,omitempty"` // issue 34's, for the DNS classes
}

func main() {
	caddy := flag.String("caddy", "bin/caddy", "Caddy binary with the coral module (make caddy)")
	coredns := flag.String("coredns", "bin/coredns", "CoreDNS binary with the coral plugin (make coredns), for the DNS classes")
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
	broken, err := run(ctx, binaries{*caddy, *coredns}, *seed, *duration, *classes, *cacheSize, *network, *out, *keep)
	if err != nil {
		fmt.Fprintln(os.Stderr, "hostile:", err)
		os.Exit(2)
	}
	if broken > 0 {
		fmt.Fprintf(os.Stderr, "hostile: %d classes broke an invariant\n", broken)
		os.Exit(1)
	}
}

// binaries are the servers under attack.
type binaries struct{ caddy, coredns string }

// selection is the classes a run attacks with: proxy classes
// (hostilelab.Classes) and DNS classes (hostilelab.DNSClasses), in their
// lists' order. A class added to either list runs with no change here.
type selection struct {
	proxy []hostilelab.Class
	dns   []hostilelab.DNSClass
}

func selectClasses(only string) (selection, error) {
	if only == "" {
		return selection{hostilelab.Classes, hostilelab.DNSClasses}, nil
	}
	var sel selection
	for _, name := range strings.Split(only, ",") {
		name = strings.TrimSpace(name)
		if c, ok := hostilelab.LookupClass(name); ok {
			sel.proxy = append(sel.proxy, c)
		} else if c, ok := hostilelab.LookupDNSClass(name); ok {
			sel.dns = append(sel.dns, c)
		} else {
			return sel, fmt.Errorf("no class %q", name)
		}
	}
	return sel, nil
}

// absBinary is path made absolute (the servers run in directories of
// their own), or an error naming the make target.
func absBinary(path, target string) (string, error) {
	if _, err := os.Stat(path); err != nil {
		return "", fmt.Errorf("%s: %v (run `make %s`)", path, err, target)
	}
	return filepath.Abs(path)
}

func run(ctx context.Context, bins binaries, seed uint64, d time.Duration, only string, cacheSize int64, network, out string, keep bool) (int, error) {
	started := time.Now()
	sel, err := selectClasses(only)
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
	dir, err := os.MkdirTemp("", "hostile-")
	if err != nil {
		return 0, err
	}
	defer func() {
		if !keep {
			_ = os.RemoveAll(dir)
		} else {
			fmt.Println("kept", dir)
		}
	}()
	rep := report{
		Provenance: evalrun.StartProvenance("hostile", evalrun.TopologyLoopback),
		Command:    evalrun.CommandLine("hostile"), Date: time.Now().UTC().Format(time.RFC3339),
		CPUs: runtime.NumCPU(), Kernel: evalrun.Kernel(),
		Go: runtime.Version(), Seed: seed, PerClass: d.String(), CacheSize: cacheSize,
		Bounds: hostilelab.DefaultBounds(cacheSize),
	}
	rep.LoadAvg[0] = evalrun.LoadAvg()
	if len(sel.proxy) > 0 {
		if err := runProxyClasses(ctx, bins.caddy, sel.proxy, &rep, seed, d, cacheSize, network, dir); err != nil {
			return 0, err
		}
	}
	if len(sel.dns) > 0 && ctx.Err() == nil {
		if err := runDNSClasses(ctx, bins.coredns, sel.dns, &rep, d, dir); err != nil {
			return 0, err
		}
	}
	rep.LoadAvg[1] = evalrun.LoadAvg()
	rep.Provenance.Finish()
	rep.Wall = time.Since(started).Seconds()
	if len(rep.Results) > 0 {
		fmt.Printf("\n=== every proxy class, %v each (seed %d) ===\n%s", d, seed, hostilelab.Table(rep.Results))
	}
	if len(rep.DNSResults) > 0 {
		fmt.Printf("\n=== every DNS class, %v each ===\n%s", d, hostilelab.DNSTable(rep.DNSResults))
	}
	if out != "" {
		// The proxy classes' results in hostile.json, the DNS classes' in
		// hostile-dns.json: a run of one kind leaves the other's file.
		proxyRep, dnsRep := rep, rep
		proxyRep.DNSResults, dnsRep.Results = nil, nil
		proxyRep.Classes, dnsRep.Classes = nil, nil
		for _, c := range rep.Classes {
			if c.Finding != 0 {
				dnsRep.Classes = append(dnsRep.Classes, c)
			} else {
				proxyRep.Classes = append(proxyRep.Classes, c)
			}
		}
		for _, f := range []struct {
			name string
			rep  report
			ran  bool
		}{{"hostile.json", proxyRep, len(sel.proxy) > 0}, {"hostile-dns.json", dnsRep, len(sel.dns) > 0}} {
			if !f.ran {
				continue
			}
			b, err := json.MarshalIndent(f.rep, "", "  ")
			if err != nil {
				return 0, err
			}
			path := filepath.Join(out, f.name)
			if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
				return 0, err
			}
			fmt.Println("wrote", path)
		}
	}
	return rep.Broken, nil
}

// runProxyClasses attacks bin/caddy and its peer with the proxy classes.
func runProxyClasses(ctx context.Context, caddyPath string, classes []hostilelab.Class, rep *report, seed uint64, d time.Duration, cacheSize int64, network, dir string) error {
	caddy, err := absBinary(caddyPath, "caddy")
	if err != nil {
		return err
	}
	rep.Caddy = evalrun.FirstLine(exec.Command(caddy, "version"))
	lab, err := hostilelab.Start(ctx, hostilelab.Config{Caddy: caddy, Dir: filepath.Join(dir, "proxy"), Net: network, CacheSize: cacheSize,
		Logf: func(f string, a ...any) { fmt.Printf(f+"\n", a...) }})
	if err != nil {
		return fmt.Errorf("%v (logs in %s)", err, dir)
	}
	defer lab.Stop()
	if errs := lab.Warm(); len(errs) > 0 {
		return fmt.Errorf("warming up, before any attack: %d failures, first: %s", len(errs), errs[0])
	}
	fmt.Printf("%s, %v per class, seed %d, cache_size %s, bounds %+v\n", rep.Caddy, d, seed, hostilelab.MiB(cacheSize), rep.Bounds)
	for i, c := range classes {
		rep.Classes = append(rep.Classes, classDoc{Name: c.Name, Doc: c.Doc, Defects: c.Defects})
		fmt.Printf("--- %s: %s\n", c.Name, c.Doc)
		res, err := lab.Run(ctx, c, d, seed*1000+uint64(i), rep.Bounds)
		if err != nil {
			return err
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
	return nil
}

// runDNSClasses attacks bin/coredns in network namespaces with the DNS
// classes.
func runDNSClasses(ctx context.Context, corednsPath string, classes []hostilelab.DNSClass, rep *report, d time.Duration, dir string) error {
	coredns, err := absBinary(corednsPath, "coredns")
	if err != nil {
		return err
	}
	if err := hostilelab.DNSAvailable(); err != nil {
		return fmt.Errorf("the DNS classes: %w", err)
	}
	rep.CoreDNS = evalrun.FirstLine(exec.Command(coredns, "-version"))
	ddir := filepath.Join(dir, "dns")
	if err := os.MkdirAll(ddir, 0o755); err != nil {
		return err
	}
	lab, err := hostilelab.StartDNS(ctx, hostilelab.DNSConfig{CoreDNS: coredns, Dir: ddir, Logf: func(f string, a ...any) { fmt.Printf(f+"\n", a...) }})
	if err != nil {
		return fmt.Errorf("%v (logs in %s)", err, ddir)
	}
	defer lab.Stop()
	for _, c := range classes {
		rep.Classes = append(rep.Classes, classDoc{Name: c.Name, Doc: c.Doc, Finding: c.Finding})
		fmt.Printf("--- %s: %s\n", c.Name, c.Doc)
		res, err := lab.RunDNS(ctx, c, d)
		if err != nil {
			return err
		}
		rep.DNSResults = append(rep.DNSResults, res)
		fmt.Print(hostilelab.DNSTable([]hostilelab.DNSResult{res}))
		for _, v := range res.Violations {
			fmt.Println("    BROKEN:", v)
		}
		if len(res.Violations) > 0 {
			rep.Broken++
		}
		if res.Exited != "" {
			fmt.Println(lab.LogTail(40))
			break
		}
		if ctx.Err() != nil {
			break
		}
	}
	return nil
}
