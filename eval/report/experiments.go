package main

import (
	"fmt"
	"os"
	"slices"
	"strings"

	"github.com/coralcdn/coral/eval/internal/evalrun"
)

// experiment is one committed result file and the command that writes it.
// The documents show these commands (renderer "command"), and -regenerate
// runs them, so what a reader is told to run is what made the figures.
type experiment struct {
	File    string   // under docs/eval
	Program string   // eval/PROG; a lab test's package (test/nodelab)
	Args    []string // after go run ./eval/PROG; $NAME is taken from the environment
	// Also are the other files under docs/eval the run writes, each with
	// the run's provenance (eval/conformance's per-implementation files).
	Also []string
	// Test, for a file a lab test writes: the test's name. It runs as
	// evalrun.TestCommandLine(Program, Test, Env...), which it records.
	Test string
	// Env are the environment variables the run is given, NAME=value (a
	// lab test's file name).
	Env []string
	// Data is true when the run needs the WonderProxy matrix
	// (CORAL_RTT_DATA).
	Data bool
	// Virtual is true for virtual-time simulations, false for runs of
	// real processes (which need the binaries, tools, sometimes root).
	Virtual bool
	Needs   string // what a run needs beyond Go, for the regeneration table
}

// experiments lists every result file the documents quote, in the order a
// regeneration runs them (cheap first).
var experiments = []experiment{
	{File: "lookup.json", Program: "lookup", Args: []string{"-topology", "wonderproxy"}, Data: true, Virtual: true},
	{File: "getlatency-wonderproxy.json", Program: "getlatency", Args: []string{"-topology", "wonderproxy", "-name", "getlatency-wonderproxy"}, Data: true, Virtual: true},
	{File: "getlatency-synthetic.json", Program: "getlatency", Args: []string{"-topology", "synthetic", "-name", "getlatency-synthetic"}, Virtual: true},
	{File: "getlatency-zipf-wonderproxy.json", Program: "getlatency", Args: []string{"-workload", "zipf", "-topology", "wonderproxy", "-name", "getlatency-zipf-wonderproxy"}, Data: true, Virtual: true},
	{File: "getlatency-zipf-synthetic.json", Program: "getlatency", Args: []string{"-workload", "zipf", "-topology", "synthetic", "-name", "getlatency-zipf-synthetic"}, Virtual: true},
	{File: "hotspot-zipf.json", Program: "hotspot", Args: []string{"-workload", "zipf", "-topologies", "both", "-name", "hotspot-zipf"}, Data: true, Virtual: true},
	{File: "clusters.json", Program: "clusters", Args: []string{"-topology", "wonderproxy"}, Data: true, Virtual: true},
	{File: "hotspot.json", Program: "hotspot", Args: []string{"-seeds", "1 2 3 4 5", "-topologies", "both", "-sweep", "128 256 512 1024 2048", "-name", "hotspot"}, Data: true, Virtual: true},
	// Fig. 5 runs 180 virtual minutes, not the paper's 30: the ratios
	// between configurations were still moving at 30 (docs/evaluation.md).
	{File: "endtoend-synthetic.json", Program: "endtoend", Args: []string{"-topology", "synthetic", "-duration", "180m", "-window", "15m", "-name", "endtoend-synthetic"}, Virtual: true},
	{File: "endtoend-wonderproxy.json", Program: "endtoend", Args: []string{"-topology", "wonderproxy", "-duration", "180m", "-window", "15m", "-name", "endtoend-wonderproxy"},
		Data: true, Virtual: true},
	{File: "endtoend-synthetic-answering.json", Program: "endtoend", Args: []string{"-topology", "synthetic", "-configs", "1,2", "-variants", "1",
		"-silent", "0", "-echo", "1", "-duration", "180m", "-window", "15m", "-name", "endtoend-synthetic-answering"}, Virtual: true},
	{File: "endtoend-synthetic-one-isp.json", Program: "endtoend", Args: []string{"-topology", "synthetic", "-configs", "1,2", "-variants", "1",
		"-isps", "1", "-duration", "180m", "-window", "15m", "-name", "endtoend-synthetic-one-isp"}, Virtual: true},
	// The topology is the WonderProxy matrix's because CORAL_RTT_DATA
	// names it (eval/members has no -topology flag).
	{File: "members.json", Program: "members", Data: true, Virtual: true},

	{File: "dnsperf.json", Program: "dnsperf", Needs: "bin/coredns, dnsperf"},
	{File: "dnsperf-floor.json", Program: "dnsperf", Args: []string{"-rounds", "3", "-duration", "5s", "-latduration", "5s", "-quiet", "20s", "-name", "dnsperf-floor"},
		Needs: "bin/coredns, dnsperf"},
	{File: "httpbench.json", Program: "httpbench", Needs: "bin/caddy, wrk, nginx"},
	{File: "httpbench-floor.json", Program: "httpbench", Args: []string{"-baseline", "$CORAL_BASELINE_CADDY", "-tls", "-nginx=", "-index-objects", "0", "-proxy-objects", "0",
		"-quiet", "20s", "-repeat", "1", "-rounds", "3", "-duration", "5s", "-name", "httpbench-floor"},
		Needs: "bin/caddy, wrk, and a bin/caddy built at 9d7c8c9 named by CORAL_BASELINE_CADDY"},
	{File: "scale.json", Program: "scale", Needs: "bin/caddy, nginx, varnish (eval/scale/install-deps.sh)"},
	{File: "headerfields.json", Program: "headerfields", Args: []string{"-rounds", "40", "-duration", "1s"}, Needs: "bin/caddy, wrk"},
	{File: "flashcrowd.json", Program: "flashcrowd", Needs: "bin/caddy"},
	{File: "flashcrowd-quick.json", Program: "flashcrowd", Args: []string{"-quick"}, Needs: "bin/caddy"},
	{File: "flashcrowd-noburst.json", Program: "flashcrowd", Args: []string{"-burst=false", "-duration", "2m", "-name", "flashcrowd-noburst"}, Needs: "bin/caddy"},
	{File: "flashcrowd-formed.json", Program: "flashcrowd", Args: []string{"-quick", "-pin=false", "-name", "flashcrowd-formed"}, Needs: "bin/caddy"},
	{File: "flashcrowd-error.json", Program: "flashcrowd", Args: []string{"-quick", "-error-crowd", "-name", "flashcrowd-error"}, Needs: "bin/caddy"},
	{File: "hostile.json", Program: "hostile", Args: []string{"-duration", "20s", "-seed", "1"}, Needs: "bin/caddy"},
	{File: "hostile-dns.json", Program: "hostile", Args: []string{"-classes", "dns-forged-flood,dns-probe-forgery", "-duration", "20s", "-seed", "1"},
		Needs: "root, bin/coredns"},
	{File: "negative.json", Program: "negative", Needs: "bin/caddy"},
	{File: "loadaware.json", Program: "loadaware", Needs: "bin/caddy, bin/coredns"},
	{File: "slices.json", Program: "slices", Needs: "bin/caddy, 4 GiB of disk"},
	{File: "chaos/chaos.json", Program: "chaos", Needs: "root, bin/caddy, bin/coredns, nftables"},
	{File: "conformance/summary.json", Program: "conformance", Args: []string{"-suite", "$CACHE_TESTS_DIR"},
		Also:  []string{"conformance/coral.json", "conformance/nginx.json", "conformance/squid.json", "conformance/trafficserver.json"},
		Needs: "root, bin/caddy, Node.js, a cache-tests clone named by CACHE_TESTS_DIR"},
	// eval/wan's figure run, then the DSHT alone: the longest runs, last.
	// -mode recompare (the models and the comparison again, from
	// wan.json's raw data) is not listed: a fresh run computes them.
	{File: "wan.json", Program: "wan", Needs: "root, bin/coredns, bin/caddy, internal/lab/wan/install-deps.sh"},
	{File: "wan-dht.json", Program: "wan", Args: []string{"-mode", "dht", "-dht-sizes", "100,200,400"}, Needs: "root, internal/lab/wan/install-deps.sh"},

	// The plugin README's two tables come from the labs' own tests, which
	// write their file when the variable names it.
	{File: "resolver-proofs.json", Program: "test/resolverlab", Test: "TestProofPerResolver", Env: []string{"RESOLVERLAB_PROOFS=docs/eval/resolver-proofs.json"},
		Needs: "root, bin/coredns, Debian's resolvers (test/resolverlab/install-deps.sh)"},
	{File: "restart.json", Program: "test/nodelab", Test: "TestRestartAnswersAtOnce", Env: []string{"NODELAB_RESULTS=docs/eval/restart.json"},
		Needs: "bin/coredns, bin/caddy"},
}

// experimentFor returns the registry entry of a result file.
func experimentFor(file string) (experiment, error) {
	for _, e := range experiments {
		if slices.Contains(e.files(), file) {
			return e, nil
		}
	}
	return experiment{}, fmt.Errorf("no experiment writes %q (eval/report/experiments.go lists them)", file)
}

// dataPlaceholder stands for the WonderProxy data's directory in the
// commands the documents show.
const dataPlaceholder = "/path/to/wonderproxy-2020-07"

// files are the result files the run writes.
func (e experiment) files() []string { return append([]string{e.File}, e.Also...) }

// source is the package that runs: eval/PROG, or a lab test's package.
func (e experiment) source() string {
	if e.Test != "" {
		return e.Program
	}
	return "eval/" + e.Program
}

// commandLine is the command as the documents show it.
func (e experiment) commandLine() string {
	if e.Test != "" {
		return evalrun.TestCommandLine(e.Program, e.Test, e.Env...)
	}
	var b strings.Builder
	for _, kv := range e.Env {
		b.WriteString(shellQuote(kv) + " ")
	}
	if e.Data {
		b.WriteString("CORAL_RTT_DATA=" + dataPlaceholder + " ")
	}
	b.WriteString("go run ./eval/" + e.Program)
	for _, a := range e.Args {
		b.WriteString(" " + shellQuote(a))
	}
	return b.String()
}

// argv is the command to run, with $NAME arguments taken from the
// environment; an unset one is an error naming it.
func (e experiment) argv() ([]string, error) {
	if e.Test != "" {
		return []string{"go", "test", "-count=1", "-run", e.Test, "-v", "./" + e.Program}, nil
	}
	out := []string{"go", "run", "./eval/" + e.Program}
	for _, a := range e.Args {
		if name, ok := strings.CutPrefix(a, "$"); ok {
			v := os.Getenv(name)
			if v == "" {
				return nil, fmt.Errorf("%s: set %s (%s)", e.File, name, e.Needs)
			}
			a = v
		}
		out = append(out, a)
	}
	return out, nil
}

// shellQuote quotes a word for a POSIX shell when it needs it.
func shellQuote(s string) string {
	if s != "" && !strings.ContainsAny(s, " \t\"'\\$*?[]{}();&|<>`~#!") {
		return s
	}
	if strings.HasPrefix(s, "$") && !strings.ContainsAny(s[1:], " \t\"'\\") {
		return s // an environment variable, for the shell to expand
	}
	return "\"" + strings.NewReplacer("\\", "\\\\", "\"", "\\\"", "$", "\\$", "`", "\\`").Replace(s) + "\""
}
