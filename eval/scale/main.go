// Command scale measures what a cache costs as it grows: coral_proxy
// (bin/caddy) beside Debian's nginx with proxy_cache and Varnish, all in
// front of the same fast origin written in Go, in one run, filled with
// 10,000, then 100,000, then 1,000,000 distinct 1 KiB objects
// (Cache-Control max-age=86400), each fetched once through the cache:
//
//	go run ./eval/scale [-counts 10000,100000,1000000] [-c 32] [-out docs/eval]
//
// At each count it records, per server: the miss throughput of the fill
// (requests per second for the objects added since the previous count,
// from -c concurrent keep-alive clients in this process), resident memory
// (Caddy: VmRSS; nginx and Varnish, which share memory among their
// processes: the sum of their processes' PSS), per object beyond what the
// server took before its first object, the disk its cache directory
// takes (allocated blocks of its files and directories, st_blocks) and
// its inodes, per object; for coral_proxy also the index's memory, read
// from Caddy's heap profile (its admin endpoint's /debug/pprof/heap?gc=1:
// the in-use bytes allocated under diskcache's index; -heap-profiles DIR
// keeps each profile), what its per-object table maps outside the Go heap
// (caddy_coral_offheap_bytes: the index, which also holds the state of
// the DSHT references; the heap profile does not see it), and the time from
// a restart of Caddy to its first hit, after a clean stop (SIGTERM) and
// after SIGKILL, with the resident memory after the restart. nginx is
// restarted too (its cache survives); Varnish's storage does not survive
// a restart, so it has no restart figure.
//
// Addresses (loopback): the origin 127.0.91.1:8080, Caddy 127.0.91.2
// (coral_proxy :8080, admin :2019, DSHT :4000), nginx 127.0.91.3:8080,
// Varnish 127.0.91.4:8080. It needs bin/caddy (make caddy), nginx and
// varnishd; eval/scale/install-deps.sh installs the latter two (run as
// root; -install=false refuses). It writes OUT/scale.json and prints a
// table.
package main

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"

	"github.com/coralcdn/coral/eval/internal/evalrun"
)

// params are the command line.
type params struct {
	Counts      []int    `json:"counts"`
	Concurrency int      `json:"concurrency"`
	ObjectBytes int      `json:"object_bytes"`
	Servers     []string `json:"servers"`
	Caddy       string   `json:"-"`
	Nginx       string   `json:"-"`
	Varnishd    string   `json:"-"`
	Out         string   `json:"-"`
	Install     bool     `json:"-"`
	Dir         string   `json:"-"`
	// HeapProfiles is where Caddy's heap profiles are kept (empty: not).
	HeapProfiles string `json:"-"`
}

func main() {
	var p params
	counts := flag.String("counts", "10000,100000,1000000", "object counts to measure at, increasing")
	servers := flag.String("servers", "coral,nginx,varnish", "servers to measure")
	flag.IntVar(&p.Concurrency, "c", 32, "concurrent clients filling the caches")
	flag.StringVar(&p.Caddy, "caddy", "", "the Caddy binary (default: bin/caddy of this repository)")
	flag.StringVar(&p.Nginx, "nginx", "nginx", "the nginx binary")
	flag.StringVar(&p.Varnishd, "varnishd", "varnishd", "the varnishd binary")
	flag.StringVar(&p.Out, "out", evalrun.ResultsDir, "directory for scale.json (empty: none)")
	flag.BoolVar(&p.Install, "install", true, "install nginx and Varnish when missing and running as root")
	flag.StringVar(&p.HeapProfiles, "heap-profiles", "", "directory to keep Caddy's heap profile at each count in (pprof debug=1 text; empty: none)")
	flag.StringVar(&p.Dir, "dir", "", "work directory for the caches (default: a temporary directory)")
	flag.Parse()
	p.ObjectBytes = objectBytes
	for _, f := range strings.Split(*counts, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n <= 0 || (len(p.Counts) > 0 && n <= p.Counts[len(p.Counts)-1]) {
			fatalf("-counts %q: want increasing positive numbers", *counts)
		}
		p.Counts = append(p.Counts, n)
	}
	p.Servers = strings.Split(*servers, ",")
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	prov := evalrun.StartProvenance("scale", evalrun.TopologyLoopback)
	// The file is written after each server, marked incomplete until the
	// last: a long run stopped midway keeps what it measured.
	save := func(res *Result) {
		prov.Finish()
		res.Provenance = prov
		if p.Out == "" {
			return
		}
		b, err := json.MarshalIndent(res, "", "  ")
		if err != nil {
			fatalf("%v", err)
		}
		path := filepath.Join(p.Out, "scale.json")
		if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
			fatalf("%v", err)
		}
		fmt.Println("wrote", path)
	}
	res, err := run(ctx, p, os.Stdout, save)
	if err != nil {
		fatalf("%v", err)
	}
	fmt.Print(res.table())
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "scale: "+format+"\n", args...)
	os.Exit(1)
}
