// Command conformance runs the HTTP caching test suite cache-tests
// (https://github.com/http-tests/cache-tests, the tests behind
// cache-tests.fyi) against coral_proxy in strict RFC 9111 mode and,
// when they are installed, Apache Traffic Server, Squid and nginx, each
// as a reverse proxy in front of the suite's origin on loopback
// (127.0.160.0/24), one after the other. It counts the results the
// suite's way (score.go), prints a table and writes a JSON file per
// implementation and a summary to docs/eval/conformance/.
//
// The suite is not part of this repository: CACHE_TESTS_DIR (or -suite)
// names a clone with its dependencies installed (`npm install --omit=dev`);
// docs/evaluation.md says which commit the committed results used.
//
//	make caddy
//	CACHE_TESTS_DIR=/path/to/cache-tests go run ./eval/conformance
//	go run ./eval/conformance -suite /path/to/cache-tests -impl coral,nginx
//
// The caches' configurations are the files in configs/ (templates filled
// in with the run's addresses and directory); an implementation that is
// not installed is reported as skipped.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"log"
	"net"
	"net/netip"
	"os"
	"os/signal"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
)

func main() {
	log.SetFlags(0)
	log.SetPrefix("conformance: ")
	var names []string
	for _, c := range caches {
		names = append(names, c.name)
	}
	suiteDir := flag.String("suite", os.Getenv("CACHE_TESTS_DIR"), "the cache-tests checkout (default $CACHE_TESTS_DIR)")
	impls := flag.String("impl", strings.Join(names, ","), "implementations to run, comma-separated: "+strings.Join(names, ", "))
	out := flag.String("out", "docs/eval/conformance", "directory for the result files, relative to the repository root unless absolute; empty: write none")
	node := flag.String("node", "node", "the Node.js binary")
	keep := flag.Bool("keep", false, "keep the run's directory (configurations, logs) and say where it is")
	verbose := flag.Bool("v", false, "list every required test an implementation did not pass")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, options{suiteDir: *suiteDir, impls: *impls, out: *out, node: *node, keep: *keep, verbose: *verbose}); err != nil {
		log.Fatal(err)
	}
}

type options struct {
	suiteDir, impls, out, node string
	keep, verbose              bool
}

// selectCaches returns the caches named in list, in the table's order.
func selectCaches(list string) ([]cache, error) {
	want := map[string]bool{}
	for _, n := range strings.Split(list, ",") {
		if n = strings.TrimSpace(n); n != "" {
			want[n] = true
		}
	}
	var out []cache
	for _, c := range caches {
		if want[c.name] {
			out = append(out, c)
			delete(want, c.name)
		}
	}
	if len(want) > 0 {
		var unknown []string
		for n := range want {
			unknown = append(unknown, n)
		}
		slices.Sort(unknown)
		return nil, fmt.Errorf("-impl: unknown %s", strings.Join(unknown, ", "))
	}
	if len(out) == 0 {
		return nil, errors.New("-impl: nothing to run")
	}
	return out, nil
}

// implReport is one implementation's result file.
type implReport struct {
	// Provenance is the run's, as in summary.json (where each
	// implementation's leaves it out).
	Provenance *evalrun.Provenance `json:"provenance,omitempty"`
	Name       string              `json:"implementation"`
	Label      string              `json:"label"`
	Version    string              `json:"version,omitempty"`
	// Skipped says why the implementation did not run.
	Skipped string `json:"skipped,omitempty"`
	Date    string `json:"date,omitempty"`
	Host    string `json:"host_header,omitempty"`
	Score
	// ClientOutput is what the suite's client printed: the format of the
	// suite's own results/*.json, to rescore or compare.
	ClientOutput json.RawMessage `json:"client_output,omitempty"`
}

// summary is summary.json.
type summary struct {
	Provenance  *evalrun.Provenance `json:"provenance"`
	Command     string              `json:"command"`
	Date        string              `json:"date"`
	SuiteRepo   string              `json:"suite_repository"`
	SuiteCommit string              `json:"suite_commit"`
	Node        string              `json:"node"`
	Kernel      string              `json:"kernel"`
	LoadAvg     string              `json:"loadavg_before"`
	Results     []implReport        `json:"implementations"` // without per-test results
}

func run(ctx context.Context, o options) error {
	chosen, err := selectCaches(o.impls)
	if err != nil {
		return err
	}
	outDir := o.out
	if o.out != "" && !filepath.IsAbs(o.out) {
		wd, err := os.Getwd()
		if err != nil {
			return err
		}
		root, err := labconf.RepoRoot(wd)
		if err != nil {
			return err
		}
		outDir = filepath.Join(root, o.out)
	}
	work, err := os.MkdirTemp("", "conformance-")
	if err != nil {
		return err
	}
	// Squid and Traffic Server started as root run as users of their own,
	// who must reach their directories inside.
	if err := os.Chmod(work, 0o755); err != nil {
		return err
	}
	if o.keep {
		defer log.Printf("the run's files are in %s", work)
	} else {
		defer os.RemoveAll(work)
	}
	s, err := openSuite(o.suiteDir, o.node, work)
	if err != nil {
		return err
	}
	tests, err := s.tests()
	if err != nil {
		return err
	}
	sum := summary{Provenance: evalrun.StartProvenance("conformance", evalrun.TopologyLoopback), Command: evalrun.CommandLine("conformance"), Date: time.Now().UTC().Format(time.RFC3339),
		SuiteRepo: suiteRepo, SuiteCommit: s.commit, Node: s.nodeVersion(), Kernel: evalrun.Kernel(), LoadAvg: evalrun.LoadAvg()}
	log.Printf("cache-tests %s (%d tests), Node.js %s", shortCommit(s.commit), len(tests), sum.Node)

	origin, err := s.startOrigin(ctx, originAddr.String(), originPort, work)
	if err != nil {
		return err
	}
	defer origin.Stop(5 * time.Second)

	var reports []implReport
	for _, c := range chosen {
		r, err := runCache(ctx, s, c, tests, work)
		if err != nil {
			return fmt.Errorf("%s: %w", c.name, err)
		}
		if err := origin.Exited(); err != nil {
			return err
		}
		reports = append(reports, r)
	}
	printTable(os.Stdout, reports, tests, o.verbose)
	if outDir == "" {
		return nil
	}
	// Every file of the run, written at its end, carries its provenance.
	sum.Provenance.Finish()
	for i, c := range chosen {
		if r := reports[i]; r.Skipped == "" {
			r.Provenance = sum.Provenance
			if err := writeJSON(filepath.Join(outDir, c.name+".json"), r); err != nil {
				return err
			}
		}
	}
	for _, r := range reports {
		r.Results, r.ClientOutput = nil, nil
		sum.Results = append(sum.Results, r)
	}
	if err := writeJSON(filepath.Join(outDir, "summary.json"), sum); err != nil {
		return err
	}
	log.Printf("results in %s", outDir)
	return nil
}

// runCache starts c in front of the origin, runs the suite's client
// against it, stops it and scores the results. A cache that is not
// installed is skipped.
func runCache(ctx context.Context, s *suite, c cache, tests []Test, work string) (implReport, error) {
	r := implReport{Name: c.name, Label: c.label}
	bin, err := c.find()
	if err != nil {
		r.Skipped = err.Error()
		log.Printf("%s: skipped: %s", c.name, r.Skipped)
		return r, nil
	}
	r.Version = c.version(bin)
	d := confData{Dir: filepath.Join(work, c.name), Addr: c.addr.String(), Port: cachePort, DHTPort: dhtPort,
		OriginAddr: originAddr.String(), OriginPort: originPort}
	if err := os.MkdirAll(d.Dir, 0o755); err != nil {
		return r, err
	}
	listen := netip.AddrPortFrom(c.addr, cachePort).String()
	if err := notListening(listen); err != nil {
		return r, err
	}
	argv, env, err := c.setup(bin, d)
	if err != nil {
		return r, err
	}
	p, err := proc.Start(argv, proc.Options{Name: c.name, Dir: d.Dir, Env: env, Log: filepath.Join(d.Dir, "stdout.log")})
	if err != nil {
		return r, err
	}
	defer p.Stop(10 * time.Second)
	if err := waitListening(ctx, c.name, listen, p); err != nil {
		return r, err
	}
	if c.coralHost {
		r.Host = originAddr.String() + "." + strconv.Itoa(originPort) + "." + zone
	}
	log.Printf("%s %s: running the suite", c.name, r.Version)
	r.Date = time.Now().UTC().Format(time.RFC3339)
	origin := "http://" + net.JoinHostPort(originAddr.String(), strconv.Itoa(originPort))
	out, err := s.runClient(ctx, "http://"+listen, origin, r.Host, filepath.Join(d.Dir, "client.log"))
	if err != nil {
		return r, err
	}
	if err := p.Exited(); err != nil {
		return r, err
	}
	raw, err := ParseResults(out)
	if err != nil {
		return r, err
	}
	if r.Score, err = ScoreResults(tests, raw); err != nil {
		return r, err
	}
	r.ClientOutput = json.RawMessage(out)
	return r, nil
}

func writeJSON(path string, v any) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	b, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func shortCommit(c string) string {
	if len(c) > 12 {
		return c[:12]
	}
	if c == "" {
		return "(commit unknown)"
	}
	return c
}

// printTable prints the counts, and with verbose the required tests each
// implementation did not pass and why.
func printTable(w *os.File, reports []implReport, tests []Test, verbose bool) {
	var req, opt Count
	for _, r := range reports {
		if r.Skipped == "" {
			req, opt = r.Required, r.Optimal
			break
		}
	}
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "\nimplementation\tversion\trequired passed (of %d)\toptimal passed (of %d)\tchecks yes (of %d)\n", req.Of, opt.Of, countChecks(tests))
	for _, r := range reports {
		if r.Skipped != "" {
			fmt.Fprintf(tw, "%s\t-\tskipped: %s\t\t\n", r.Label, r.Skipped)
			continue
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\n", r.Label, r.Version, r.Required.Passed, r.Optimal.Passed, r.Checks.Passed)
	}
	tw.Flush()
	if !verbose {
		return
	}
	for _, r := range reports {
		if r.Skipped != "" {
			continue
		}
		fmt.Fprintf(w, "\n%s: required tests not passed\n", r.Label)
		for _, res := range r.Results {
			if (res.Kind == "" || res.Kind == "required") && !res.Status.passed() {
				fmt.Fprintf(w, "  %-45s %-16s %s\n", res.ID, res.Status, res.Detail)
			}
		}
	}
}

func countChecks(tests []Test) int {
	n := 0
	for _, t := range tests {
		if t.Kind == "check" && !t.BrowserOnly {
			n++
		}
	}
	return n
}
