//go:build linux

package main

import (
	"context"
	"flag"
	"fmt"
	"net/netip"
	"os"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/coralcdn/coral/internal/lab/demonet"
	"github.com/coralcdn/coral/internal/lab/proc"
	"github.com/coralcdn/coral/internal/lab/resolvers"
)

func main() {
	nodes := flag.Int("nodes", 6, "number of Coral nodes (2–40); the first half are in cluster east, the rest west")
	resolverList := flag.String("resolvers", "unbound", "recursive resolvers to start, comma-separated: unbound, bind, knot, powerdns (the first is east, the second west, ...)")
	prefix := flag.String("prefix", "127.0.80.0/24", "the /24 of loopback addresses to use (127.0.80.0/24–127.0.89.0/24)")
	dir := flag.String("dir", "", "run directory for configurations, logs and caches (default: a new temporary directory)")
	keep := flag.Bool("keep", false, "keep the run directory when stopping")
	smoke := flag.Bool("smoke", os.Getenv("DEMO_SMOKE") != "" && os.Getenv("DEMO_SMOKE") != "0",
		"start the network, run the printed commands once, check their output, stop, and exit 0 or 1 (default from $DEMO_SMOKE)")
	flag.Parse()

	p, err := netip.ParsePrefix(*prefix)
	if err != nil {
		fatalf("-prefix: %v", err)
	}
	o := demonet.Options{Nodes: *nodes, Prefix: p, Dir: *dir, KeepDir: *keep}
	for _, k := range strings.Split(*resolverList, ",") {
		kind := resolvers.Kind(strings.TrimSpace(k))
		if kind.Binary() == "" {
			fatalf("-resolvers: unknown resolver %q (want unbound, bind, knot or powerdns)", k)
		}
		o.Resolvers = append(o.Resolvers, kind)
	}
	if o.Resolvers[0] != resolvers.Unbound {
		fatalf("-resolvers: the first must be unbound (the printed commands use it)")
	}
	os.Exit(run(o, *smoke))
}

func fatalf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, "coraldemo: "+format+"\n", args...)
	os.Exit(2)
}

func run(o demonet.Options, smoke bool) int {
	if err := demonet.Available(o); err != nil {
		fmt.Fprintf(os.Stderr, "coraldemo: cannot run here: %v\n(`make demo` builds the binaries and installs the packages; run it as root)\n", err)
		return 1
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	start := time.Now()
	o.Logf = func(format string, args ...any) {
		fmt.Printf("  [%5.1fs] %s\n", time.Since(start).Seconds(), fmt.Sprintf(format, args...))
	}
	fmt.Println("Starting a Coral network on loopback ...")
	n, err := demonet.Start(ctx, o)
	if err != nil {
		fmt.Fprintf(os.Stderr, "coraldemo: %v\n", err)
		return 1
	}
	o.Logf("ready")
	fmt.Println()
	printNetwork(n)
	steps := tryCommands(n)
	code := 0
	if smoke {
		code = runSmoke(ctx, n, steps)
	} else {
		printTry(n, steps)
		code = waitForSignal(ctx, n)
	}
	if code != 0 {
		n.KeepDir()
	}
	fmt.Println("\nStopping ...")
	if err := n.Stop(); err != nil {
		// Processes killed from the shell (as the demo suggests) are
		// reported here too; only the smoke check fails on it.
		fmt.Fprintf(os.Stderr, "coraldemo: stopping: %v\n", err)
		if smoke {
			code = 1
		}
	}
	if o.KeepDir || o.Dir != "" || code != 0 {
		fmt.Printf("Stopped. Configurations and logs are in %s\n", n.Dir)
	} else {
		fmt.Println("Stopped.")
	}
	return code
}

func printNetwork(n *demonet.Net) {
	l := n.Layout
	fmt.Printf("A Coral network is running (configurations and logs in %s):\n\n", n.Dir)
	byRegion := map[string][]string{}
	for _, nd := range n.Nodes {
		byRegion[nd.Region] = append(byRegion[nd.Region], nd.Addr.String())
	}
	fmt.Printf("  nodes       cluster %s: %s\n", demonet.RegionEast, strings.Join(byRegion[demonet.RegionEast], " "))
	fmt.Printf("              cluster %s: %s\n", demonet.RegionWest, strings.Join(byRegion[demonet.RegionWest], " "))
	fmt.Printf("              each: CoreDNS (coral plugin) on :%d, Caddy (coral_proxy) on :%d and :%d, admin API on :%d,\n",
		demonet.PortDNS, demonet.PortHTTP, demonet.PortHTTPS, demonet.PortAdmin)
	fmt.Printf("              CoreDNS metrics on :%d, DSHT nodes on UDP :%d (CoreDNS) and :%d (Caddy)\n",
		demonet.PortMetrics, demonet.PortDHTCoreDNS, demonet.PortDHTCaddy)
	for _, r := range n.Resolvers {
		fmt.Printf("  resolver    %s on %s (placed in cluster %s)\n", r.Name(), r.Addr, r.Region)
	}
	fmt.Printf("  fake root   %s: delegates %s and %s to the nodes, serves %s\n", l.Root(), demonet.AliasZone, demonet.CoralZone, demonet.OriginZone)
	fmt.Printf("  origin      http://%s/ on %s: a page with three images, /about.html, /news.html\n", demonet.OriginName, n.Origin.Addr)
	fmt.Printf("  ACME CA     %s (dns-01 only; root certificate %s)\n", n.ACMEDirectory(), n.CARoot)
	fmt.Printf("  Coralized   %s\n", n.URL("/"))
	fmt.Printf("              %s (one label, HTTPS: curl --cacert %s ...)\n", n.HTTPSURL("/"), n.CARoot)
	if n.OriginNote != "" {
		fmt.Printf("              (%s)\n", n.OriginNote)
	}
	var status []string
	for _, nd := range n.Nodes {
		if nd.StatusURL != "" {
			status = append(status, nd.StatusURL)
		}
	}
	if len(status) > 0 {
		fmt.Printf("  status      %s\n", strings.Join(status, " "))
	}
	fmt.Println()
}

func printTry(n *demonet.Net, steps []step) {
	fmt.Println("Try:")
	for _, s := range steps {
		fmt.Printf("\n  # %s\n", s.what)
		for _, line := range strings.Split(s.cmd, "\n") {
			fmt.Printf("  %s\n", line)
		}
	}
	nd := n.Nodes[min(1, len(n.Nodes)-1)]
	fmt.Printf(`
  # In a browser on this machine (Chromium), every Coralized name to one proxy:
  chromium --host-resolver-rules='MAP *.%s %s' %s

  # Kill a node (its Caddy is pid %d, its CoreDNS pid %d): within about 10 s
  # (live_within %s, answer TTL %d s) DNS stops handing it out.
  kill -9 %d %d

  # The DSHT on its own (put, get, put+get between 8 nodes): go run ./cmd/dhtdemo

Logs: %s/node*/{coredns,caddy}.log, %s/origin.log, %s/resolver*/
Ctrl-C stops everything.
`, demonet.AliasZone, nd.Addr, n.URL("/"), nd.Caddy.Pid(), nd.CoreDNS.Pid(), demonet.LiveWithin, demonet.AnswerTTL,
		nd.Caddy.Pid(), nd.CoreDNS.Pid(), n.Dir, n.Dir, n.Dir)
}

// waitForSignal runs until Ctrl-C or SIGTERM, reporting processes that
// die meanwhile.
func waitForSignal(ctx context.Context, n *demonet.Net) int {
	reported := map[string]bool{}
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return 0
		case <-tick.C:
		}
		for _, nd := range n.Nodes {
			for _, p := range []*proc.Process{nd.CoreDNS, nd.Caddy} {
				if !p.Running() && !reported[p.Name] {
					reported[p.Name] = true
					fmt.Printf("\n%s (pid %d) exited: %v; its log: %s\n", p.Name, p.Pid(), p.ExitError(), p.LogFile)
				}
			}
		}
	}
}
