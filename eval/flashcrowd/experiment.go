package main

import (
	"context"
	"encoding/csv"
	"errors"
	"fmt"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/eval/internal/sim"
)

// validate checks the parameters, the addresses among them.
func validate(p params) error {
	switch {
	case p.Proxies < 2 || p.Proxies > 240:
		return errors.New("-proxies: want 2..240")
	case p.L1 < 1 || p.L2 < p.L1 || p.L2%p.L1 != 0 || p.L2 > p.Proxies:
		return errors.New("-l1, -l2: want 1 ≤ l1 ≤ l2 ≤ proxies with l2 a multiple of l1")
	case p.Files < 1 || p.Files > 99 || p.PageFiles < 1 || p.Files%p.PageFiles != 0:
		return errors.New("-files, -page-files: want 1..99 files that the pages split evenly")
	case p.FileBytes < 1 || p.FileBytes > 16<<20:
		return errors.New("-file-bytes: want 1 byte to 16 MiB")
	case p.LineKbit < 8:
		return errors.New("-line: want at least 8 kbit/s")
	case p.Clients < 1 || p.Clients > 7*250:
		return errors.New("-clients: want 1..1750")
	case p.Duration < 10*time.Second || p.Spread < 0 || p.Think < 0 || p.Timeout < time.Second || p.Settle < 0:
		return errors.New("-duration ≥ 10s, -spread, -think, -settle ≥ 0, -timeout ≥ 1s")
	case p.Port < 1 || p.Port > 65535 || p.Port == adminPort:
		return fmt.Errorf("-port: want 1..65535 other than the admin port %d", adminPort)
	}
	a, err := netip.ParseAddr(p.Net + ".1")
	if err != nil || !a.Is4() {
		return fmt.Errorf("-net %q: want three octets such as 127.0.100", p.Net)
	}
	b := a.As4()
	clientNets := (p.Clients + 249) / 250
	if b[0] != 127 || b[1] != 0 || b[2] < 100 || b[2] > 108 || (int(b[2]) >= 101 && int(b[2]) < 101+clientNets) {
		return fmt.Errorf("-net %s: want 127.0.100 to 127.0.108, clear of the clients' source /24s 127.0.101–%d and the burst's 127.0.109", p.Net, 100+clientNets)
	}
	return nil
}

func experiment(ctx context.Context, p params, command string) (rep *report, err error) {
	wallStart := time.Now()
	if err := validate(p); err != nil {
		return nil, err
	}
	if _, err := os.Stat(p.Caddy); err != nil {
		return nil, fmt.Errorf("%v: build it with `make caddy` (builds/caddy/build.sh)", err)
	}
	if p.Caddy, err = filepath.Abs(p.Caddy); err != nil {
		return nil, err
	}
	originAddr := netip.AddrPortFrom(netip.MustParseAddr(p.Net+".1"), uint16(p.Port))
	host := fmt.Sprintf("%v.%d.%s", originAddr.Addr(), p.Port, zone)
	rep = &report{
		Provenance: evalrun.StartProvenance("flashcrowd", evalrun.TopologyLoopback),
		Command:    command,
		Date:       time.Now().UTC().Format(time.RFC3339),
		Caddy:      evalrun.FirstLine(exec.Command(p.Caddy, "version")),
		Host:       hostInfo{CPUs: runtime.NumCPU(), Kernel: evalrun.Kernel(), GoVersion: runtime.Version(), LoadAvgBefore: evalrun.LoadAvg()},
		Params: jsonParams{Proxies: p.Proxies, L1: p.L1, L2: p.L2, Levels: levelsLine, Origin: originAddr.String(), Host: host,
			Files: p.Files, FileBytes: p.FileBytes, PageFiles: p.PageFiles, LineKbit: p.LineKbit, Clients: p.Clients,
			Duration: p.Duration.String(), Spread: p.Spread.String(), Think: p.Think.String(), Timeout: p.Timeout.String(), Seed: p.Seed,
			Pinned: p.Pin, ErrorCrowd: p.ErrorCrowd, Burst: p.Burst},
		Paper: paper,
	}

	dir, err := os.MkdirTemp("", "coral-flashcrowd-")
	if err != nil {
		return nil, err
	}
	keep := p.Keep
	defer func() {
		if keep || (err != nil && !errors.Is(err, context.Canceled)) {
			fmt.Printf("Kept %s (Caddyfiles, the proxies' logs caddy-NN.log, their caches)\n", dir)
			return
		}
		os.RemoveAll(dir)
	}()
	nw, err := newNetwork(p, dir)
	if err != nil {
		return nil, err
	}
	for _, x := range nw.proxies {
		rep.Proxies = append(rep.Proxies, proxyPlace{Proxy: x.i, Addr: x.addr.String(), L1: x.l1Name(), L2: x.l2Name()})
	}
	rep.Hierarchy = hierarchyText(nw.proxies, p)
	fmt.Printf("Flash crowd: %d × %s (%s), origin %v behind %d kbit/s, %d files of %d bytes in %d pages, %d clients for %v\n",
		p.Proxies, p.Caddy, rep.Caddy, originAddr, p.LineKbit, p.Files, p.FileBytes, p.Files/p.PageFiles, p.Clients, p.Duration)
	fmt.Printf("Command: %s\n", command)
	fmt.Printf("%d CPUs, load average %s\n", rep.Host.CPUs, rep.Host.LoadAvgBefore)
	if p.Pin {
		fmt.Printf("Hierarchy (levels %s; loopback RTTs are ~0, so clusters are pinned):\n%s", levelsLine, rep.Hierarchy)
	} else {
		fmt.Printf("Hierarchy (levels %s): not pinned; the nodes form their clusters\n", levelsLine)
	}

	if err := nw.checkFree(originAddr); err != nil {
		return nil, err
	}
	org := newOrigin(originAddr, p.Files, p.FileBytes, p.LineKbit)
	if err := org.start(); err != nil {
		return nil, fmt.Errorf("origin: %w", err)
	}
	defer org.close()
	started := time.Now()
	defer nw.stop()
	if err := nw.start(ctx); err != nil {
		return nil, err
	}
	fmt.Printf("Started %d proxies; waiting (at most %v) for every node to join and know its clusters' members ...\n", p.Proxies, p.Settle)
	rep.Ready, err = nw.waitReady(ctx, started)
	if err != nil {
		return nil, err
	}
	fmt.Printf("Ready after %.1f s: %v\n", rep.Ready.Seconds, readyLine(rep.Ready))

	ld := &load{p: p, proxies: nw.proxies, files: org.files, errorBody: org.errorBody, host: host, onRelease: org.setT0}
	crowdThenBurst := func() {}
	if p.Burst {
		fmt.Printf("Start burst: every proxy asks for every file at once (%d requests) ...\n", p.Proxies*p.Files)
		var waitBurst func()
		rep.Burst, waitBurst, err = ld.burst(ctx)
		if err != nil {
			return nil, err
		}
		// The crowd starts meanwhile; the burst's responses take as long
		// as the origin's line needs.
		defer func() {
			if waitBurst != nil {
				waitBurst()
			}
		}()
		crowdThenBurst = func() {
			waitBurst()
			waitBurst = nil
		}
		fmt.Printf("  sent within %.2f ms of each other (%.2f ms after the release); the crowd runs until t = %v ...\n",
			rep.Burst.SpreadMS, rep.Burst.BarrierMS, p.Duration)
	} else {
		ld.start()
		fmt.Printf("No start burst (-burst=false): the crowd alone runs until t = %v ...\n", p.Duration)
	}
	ld.crowd(ctx)
	crowdThenBurst()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	fmt.Printf("Load done at t = %.1f s\n", time.Since(ld.t0).Seconds())

	// What each proxy says about itself, then stop them.
	for _, x := range nw.proxies {
		e := proxyEnd{Proxy: x.i, Fetches: map[string]int{}}
		st, serr := proxyStatus(ctx, x)
		if serr != nil {
			e.Err = serr.Error()
		} else {
			for _, c := range st.Caches {
				e.Objects += c.Objects
				e.Hits += c.Hits
				e.Misses += c.Misses
				e.Commits += c.Commits
				e.Aborts += c.Aborts
			}
			for _, f := range st.RecentFetches {
				e.Fetches[f.Source]++
			}
			e.DHT = st.DHT
		}
		rep.ProxyEnd = append(rep.ProxyEnd, e)
	}
	aliveErr := nw.alive()
	nw.stop()
	rep.Host.LoadAvgAfter = evalrun.LoadAvg()

	fetches, perFile, errFetches := org.fetches()
	summarize(rep, p, ld.records, fetches, perFile, errFetches)
	check(rep, p)
	if aliveErr != nil {
		rep.Problems = append(rep.Problems, "a proxy exited during the run: "+aliveErr.Error())
		rep.Pass = false
	}
	printReport(os.Stdout, rep, p)
	if p.Records != "" {
		if err := writeRecords(p.Records, ld.records); err != nil {
			return rep, err
		}
		fmt.Printf("Wrote every request to %s\n", p.Records)
	}
	rep.Wall = time.Since(wallStart).Seconds()
	fmt.Printf("\nWall time %.0f s\n", rep.Wall)
	rep.Provenance.Finish()

	jsonPath := filepath.Join(p.Out, p.Name+".json")
	if err := sim.WriteJSON(jsonPath, rep); err != nil {
		return rep, err
	}
	if err := plotLoad(filepath.Join(p.Out, p.Name+".png"), rep); err != nil {
		return rep, err
	}
	if err := plotLatency(filepath.Join(p.Out, p.Name+"-latency.png"), rep); err != nil {
		return rep, err
	}
	fmt.Printf("Wrote %s, %s.png and %s-latency.png\n", jsonPath, p.Name, p.Name)
	if !rep.Pass {
		return rep, fmt.Errorf("%w: %s", errAcceptance, strings.Join(rep.Problems, "; "))
	}
	return rep, nil
}

// hierarchyText describes the pinned clusters.
func hierarchyText(xs []*proxy, p params) string {
	if !p.Pin {
		return fmt.Sprintf("  level 0: one global cluster of %d; levels 1 (60 ms) and 2 (20 ms): formed by the nodes, not pinned\n", len(xs))
	}
	var b strings.Builder
	byL1 := map[string][]*proxy{}
	var order []string
	for _, x := range xs {
		if _, ok := byL1[x.l1Name()]; !ok {
			order = append(order, x.l1Name())
		}
		byL1[x.l1Name()] = append(byL1[x.l1Name()], x)
	}
	fmt.Fprintf(&b, "  level 0: one global cluster of %d; level 1 (60 ms): %d clusters; level 2 (20 ms): %d clusters\n", len(xs), p.L1, p.L2)
	for _, r := range order {
		fmt.Fprintf(&b, "  %s:", r)
		last := ""
		for _, x := range byL1[r] {
			if x.l2Name() != last {
				if last != "" {
					b.WriteString(" |")
				}
				fmt.Fprintf(&b, " %s:", x.l2Name())
				last = x.l2Name()
			}
			fmt.Fprintf(&b, " %d", x.i)
		}
		b.WriteString("\n")
	}
	return b.String()
}

func readyLine(r *readiness) string {
	if r.Ready && r.Formed {
		return "every node joined, its coral_proxy answering, and in one cluster with every other node at levels 1 and 2 (formed, not pinned)"
	}
	if r.Ready {
		return "every node joined, pinned, its coral_proxy answering, and knowing every member of its clusters"
	}
	var parts []string
	for _, n := range r.Nodes {
		if !n.ready(!r.Formed) {
			parts = append(parts, fmt.Sprintf("proxy %d joined=%v pinned=%v http=%v contacts %v of %v", n.Proxy, n.Joined, n.Pinned, n.HTTP, n.Clusters, n.Want))
		}
	}
	return "NOT settled: " + strings.Join(parts, "; ")
}

// writeRecords writes every request as CSV.
func writeRecords(path string, recs []*record) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	w := csv.NewWriter(f)
	_ = w.Write([]string{"id", "client", "t", "proxy", "file", "status", "bytes", "ok", "latency_ms", "ttfb_ms", "source", "via", "cache_status", "error"})
	for _, r := range recs {
		_ = w.Write([]string{r.ID, strconv.Itoa(r.Client), strconv.FormatFloat(r.At, 'f', 4, 64), strconv.Itoa(r.Proxy), filePath(r.File),
			strconv.Itoa(r.Status), strconv.Itoa(r.Bytes), strconv.FormatBool(r.OK), strconv.FormatFloat(r.LatencyMS, 'f', 3, 64),
			strconv.FormatFloat(r.TTFBMS, 'f', 3, 64), r.Source, r.Via, r.CacheStatus, r.Err})
	}
	w.Flush()
	if err := w.Error(); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
