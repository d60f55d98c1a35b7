package main

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/coralcdn/coral/eval/internal/evalrun"
)

// targetOrder is the order of the targets in the tables and the plot: the
// pairs under comparison side by side.
var targetOrder = []string{"coral", "coral-old", "file", "respond", "respond-head", "coral-tls", "file-tls", "respond-tls", "nginx"}

// baseline is the target a target's req/s is compared with: file_server
// over the same protocol (nginx speaks only HTTP).
func baseline(name string) string {
	if strings.HasSuffix(name, "-tls") {
		return "file-tls"
	}
	return "file"
}

// floor is the target that gives the floor of a target's protocol: Caddy's
// respond over the same protocol.
func floor(name string) string {
	if strings.HasSuffix(name, "-tls") {
		return "respond-tls"
	}
	return "respond"
}

// fmtFloats formats each value with f, space-separated.
func fmtFloats(v []float64, f string) string {
	var parts []string
	for _, x := range v {
		parts = append(parts, fmt.Sprintf(f, x))
	}
	return strings.Join(parts, " ")
}

// printResponses prints what each target answers, counted on the wire.
func printResponses(w io.Writer, ss []*sample) {
	fmt.Fprintf(w, "\nResponses (one GET as wrk sends it, counted on the wire; over TLS, inside it, as wrk counts):\n")
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "  when\ttarget\tobject\tstatus\theader B\tbody B\torigin's bytes\tcache")
	seenTLS := map[string]string{}
	var tlsTargets []string
	for _, s := range ss {
		fmt.Fprintf(tw, "  %s\t%s\t%s\t%d\t%d\t%d\t%v\t%s\n", s.When, s.Target, sizeName(s.Size), s.Status, s.HeaderBytes, s.BodyBytes, s.Same, s.Cache)
		if _, ok := seenTLS[s.Target]; !ok && s.TLS != "" {
			seenTLS[s.Target] = s.TLS
			tlsTargets = append(tlsTargets, s.Target)
		}
	}
	tw.Flush()
	for _, name := range tlsTargets {
		fmt.Fprintf(w, "  %s: %s\n", name, seenTLS[name])
	}
	fmt.Fprintln(w)
}

// printReport prints the tables.
func printReport(w io.Writer, rep *report) {
	printResponses(w, rep.Responses)
	printThroughput(w, rep)
	printLarge(w, rep.Large)
	printMemory(w, rep)
	fmt.Fprintf(w, "\nChecks (every measured response a hit: no origin request, only hits in caddy_coral_requests_total, no socket error or non-2xx in any wrk run; hits of the origin's bytes before and after): %s\n", evalrun.PassFail(rep.PassCheck))
	for _, pr := range rep.Problems {
		fmt.Fprintf(w, "  PROBLEM: %s\n", pr)
	}
	if len(rep.Disturbed) > 0 {
		fmt.Fprintf(w, "Repeated %d runs that other processes disturbed (kept in the JSON as disturbed_runs, not counted)\n", len(rep.Disturbed))
	}
	for _, wn := range rep.Warnings {
		fmt.Fprintf(w, "  WARNING: %s\n", wn)
	}
	var parts, tlsParts []string
	for _, ss := range rep.Summary {
		parts = append(parts, fmt.Sprintf("%s %.3f", sizeLabel(ss.Size), ss.MedianRatio))
		tlsParts = append(tlsParts, fmt.Sprintf("%s %.3f", sizeLabel(ss.Size), ss.MedianTLSRatio))
	}
	fmt.Fprintf(w, "Acceptance: coral_proxy/file_server cache-hit req/s %s, target ≥ %.1f: %s\n", strings.Join(parts, ", "), targetRatio, evalrun.PassFail(rep.PassRatio))
	var floorParts, tlsFloorParts []string
	for _, ss := range rep.Summary {
		floorParts = append(floorParts, fmt.Sprintf("%s %.3f", sizeLabel(ss.Size), ss.MedianRespondRatio))
		tlsFloorParts = append(tlsFloorParts, fmt.Sprintf("%s %.3f", sizeLabel(ss.Size), ss.MedianTLSRespondRatio))
	}
	fmt.Fprintf(w, "Acceptance of issue 25: coral_proxy/respond cache-hit req/s %s, target ≥ %.1f: %s\n", strings.Join(floorParts, ", "), respondRatio, evalrun.PassFail(rep.PassRespond))
	if rep.PassBaseline != nil {
		var ab []string
		for _, ss := range rep.Summary {
			ab = append(ab, fmt.Sprintf("%s %.3f", sizeLabel(ss.Size), ss.MedianBaselineRatio))
		}
		fmt.Fprintf(w, "Acceptance of the A/B: coral_proxy's cache-hit req/s new/old (this build over %s) %s, target ≥ %.1f: %s\n", rep.Tools.Baseline, strings.Join(ab, ", "), baselineRatio, evalrun.PassFail(*rep.PassBaseline))
	}
	if rep.PassTLSRatio != nil {
		fmt.Fprintf(w, "Acceptance over TLS: coral_proxy/file_server cache-hit req/s %s, target ≥ %.1f: %s\n", strings.Join(tlsParts, ", "), targetRatio, evalrun.PassFail(*rep.PassTLSRatio))
	}
	if rep.PassTLSRespond != nil {
		fmt.Fprintf(w, "Acceptance of issue 25 over TLS: coral_proxy/respond cache-hit req/s %s, target ≥ %.1f: %s\n", strings.Join(tlsFloorParts, ", "), respondRatio, evalrun.PassFail(*rep.PassTLSRespond))
	}
	fmt.Fprintf(w, "Load average before %s, after %s (%d CPUs: the servers and wrk share them)\n", rep.Host.LoadAvgBefore, rep.Host.LoadAvgAfter, rep.Host.CPUs)
	fmt.Fprintf(w, "\nCommands:\n")
	for _, c := range rep.Commands {
		fmt.Fprintf(w, "  %s\n", c)
	}
	if len(rep.Profiles) > 0 {
		fmt.Fprintf(w, "CPU profiles (go tool pprof -top FILE): %s\n", strings.Join(rep.Profiles, " "))
	}
	for _, c := range rep.ProfileDiffs {
		fmt.Fprintln(w)
		c.Print(w)
	}
}

// printThroughput prints every measured run, the medians and the ratios.
func printThroughput(w io.Writer, rep *report) {
	fmt.Fprintf(w, "Throughput (wrk -t %d -c %d --latency, %s per run; CPU from /proc; other = processes other than the servers, wrk and this one):\n",
		rep.Params.Threads, rep.Params.Conns, rep.Params.Duration)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "round\tobject\ttarget\treq/s\tMiB/s\tB/resp\tp50 ms\tp75 ms\tp90 ms\tp99 ms\tmax ms\tserver µs CPU/req\twrk CPU s\tother CPU s\torigin reqs\tquiet wait s\t")
	for _, r := range rep.Throughput {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.0f\t%.1f\t%.0f\t%.3f\t%.3f\t%.3f\t%.3f\t%.1f\t%.1f\t%.1f\t%.1f\t%d\t%.0f\t\n", r.Round, sizeName(r.Size), r.Target, r.RPS,
			r.TransferMiBs, r.BytesPerResponse, r.P50, r.P75, r.P90, r.P99, r.MaxLatMs, r.CPUPerRequest, r.WrkCPU, r.OtherCPU, r.OriginRequests, r.QuietWait)
	}
	tw.Flush()

	fmt.Fprintf(w, "\nMedians over %d rounds (vs file, vs respond: over file_server's and respond's medians, over TLS theirs over TLS):\n", rep.Params.Rounds)
	tw = tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "object\ttarget\treq/s\tvs file\tvs respond\tMiB/s\tp50 ms\tp99 ms\tserver µs CPU/req\tresponse B\t")
	for _, ss := range rep.Summary {
		for _, name := range targetOrder {
			ts, base := ss.Targets[name], ss.Targets[baseline(name)]
			if ts == nil || base == nil {
				continue
			}
			vsFloor := "-"
			if fl := ss.Targets[floor(name)]; fl != nil && fl.MedianRPS > 0 {
				vsFloor = fmt.Sprintf("%.3f", ts.MedianRPS/fl.MedianRPS)
			}
			fmt.Fprintf(tw, "%s\t%s\t%.0f\t%.3f\t%s\t%.1f\t%.3f\t%.3f\t%.1f\t%d\t\n", sizeLabel(ss.Size), name, ts.MedianRPS, ts.MedianRPS/base.MedianRPS, vsFloor,
				ts.MedianMiBs, ts.MedianP50, ts.MedianP99, ts.MedianCPUPerR, ts.WireBytes)
		}
	}
	tw.Flush()
	fmt.Fprintln(w, "Per-round ratios of req/s and their medians:")
	for _, ss := range rep.Summary {
		fmt.Fprintf(w, "  %s:\n", sizeLabel(ss.Size))
		fmt.Fprintf(w, "    coral/file %s, median %.3f (target ≥ %.1f: %s)", fmtFloats(ss.Ratios, "%.3f"), ss.MedianRatio, targetRatio, evalrun.PassFail(ss.Pass))
		if ss.PassTLS != nil {
			fmt.Fprintf(w, "; over TLS coral-tls/file-tls %s, median %.3f (target ≥ %.1f: %s)", fmtFloats(ss.TLSRatios, "%.3f"), ss.MedianTLSRatio, targetRatio, evalrun.PassFail(*ss.PassTLS))
		}
		fmt.Fprintf(w, "\n    coral/respond %s, median %.3f (issue 25, target ≥ %.1f: %s); server CPU per request respond/coral %s, median %.3f",
			fmtFloats(ss.RespondRatios, "%.3f"), ss.MedianRespondRatio, respondRatio, evalrun.PassFail(ss.PassRespond), fmtFloats(ss.RespondCPURatios, "%.3f"), ss.MedianRespondCPURatio)
		if ss.PassTLSRespond != nil {
			fmt.Fprintf(w, "; over TLS coral-tls/respond-tls %s, median %.3f (target ≥ %.1f: %s)", fmtFloats(ss.TLSRespondRatios, "%.3f"), ss.MedianTLSRespondRatio, respondRatio, evalrun.PassFail(*ss.PassTLSRespond))
		}
		fmt.Fprintln(w)
		if len(ss.RespondHeadRatios) > 0 {
			fmt.Fprintf(w, "    coral/respond-head (respond with a hit's header fields) %s, median %.3f; server CPU per request respond-head/coral %s, median %.3f\n",
				fmtFloats(ss.RespondHeadRatios, "%.3f"), ss.MedianRespondHeadRatio, fmtFloats(ss.RespondHeadCPURatios, "%.3f"), ss.MedianRespondHeadCPU)
		}
		if len(ss.NginxRatios) > 0 {
			fmt.Fprintf(w, "    coral/nginx %s, median %.3f; nginx/file %s, median %.3f\n", fmtFloats(ss.CoralNginxRatios, "%.3f"), ss.CoralOverNginx, fmtFloats(ss.NginxRatios, "%.3f"), ss.MedianNginxRatio)
		}
		if ss.PassBaseline != nil {
			fmt.Fprintf(w, "    new/old (coral/coral-old) %s, median %.3f; server CPU per request old/new %s, median %.3f\n",
				fmtFloats(ss.BaselineRatios, "%.3f"), ss.MedianBaselineRatio, fmtFloats(ss.BaselineCPURatios, "%.3f"), ss.MedianBaselineCPURatio)
		}
	}
}

// printMemory prints the index's and the whole proxy's memory per object.
func printMemory(w io.Writer, rep *report) {
	if ix := rep.Index; ix != nil {
		fmt.Fprintf(w, "\nCache index memory (diskcache.Store in this process, in %s, %d objects with %d-byte keys and %d-byte bodies, heap in use after GC; %.1f s to insert):\n",
			ix.Dir, ix.Objects, ix.KeyBytes, ix.BodyBytes, ix.InsertSeconds)
		for _, s := range ix.Steps {
			fmt.Fprintf(w, "  %7d objects: +%6.2f MiB, %5.0f B/object\n", s.Objects, float64(s.HeapBytes)/(1<<20), s.PerObject)
		}
		fmt.Fprintf(w, "  %.0f B/object with all in (%.0f B/object marginal from the first quarter on); %.0f B/object after reopening (index rebuilt from disk); empty store %d B\n",
			ix.PerObject, ix.Marginal, ix.ReopenPerObject, ix.EmptyStoreBytes)
		if h := ix.Hot; h != nil {
			fmt.Fprintf(w, "  hot set after reading every object twice: %d objects' metadata in memory (estimated %.1f MiB, limit %.0f MiB), heap +%.1f MiB (%.0f B/entry)\n",
				h.Entries, float64(h.Estimated)/(1<<20), float64(h.Limit)/(1<<20), float64(h.HeapBytes)/(1<<20), h.PerEntry)
		}
	}
	if px := rep.Proxy; px != nil {
		fmt.Fprintf(w, "\nWhole proxy (Caddy's heap in use after GC, via its admin endpoint, before and after caching %d distinct %d-byte objects through coral_proxy in %.1f s: %d misses, %d origin fetches):\n",
			px.Objects, px.BodyBytes, px.Seconds, px.Misses, px.OriginFetches)
		fmt.Fprintf(w, "  heap %.1f → %.1f MiB: %.0f B/object (cache index, DSHT references and anything else kept per object); RSS %.1f → %.1f MiB (%.0f B/object)\n",
			float64(px.HeapBefore)/(1<<20), float64(px.HeapAfter)/(1<<20), px.PerObject, float64(px.RSSBefore)/(1<<20), float64(px.RSSAfter)/(1<<20), px.RSSPerObject)
		if px.SettledAfter > 0 {
			fmt.Fprintf(w, "  %.0f s after the fetch (the DSHT node prunes its per-key load records 2 min after a key's last request): heap %.1f MiB, %.0f B/object; RSS %.1f MiB\n",
				px.SettledAfter, float64(px.HeapSettled)/(1<<20), px.SettledPerObject, float64(px.RSSSettled)/(1<<20))
		}
		if px.HeapProfile != "" {
			fmt.Fprintf(w, "  heap profiles (go tool pprof -sample_index=inuse_space -top FILE): %s %s\n", px.HeapProfile, px.SettledHeapProfile)
		}
	}

}
