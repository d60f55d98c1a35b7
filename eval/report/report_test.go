package main

import (
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/coralcdn/coral/eval/internal/evalrun"
)

// repoRoot is the repository, two levels up from this package.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// TestDocsMatchResults is the acceptance check: every generated region of
// every document is what the committed result files give, and no figure
// of a strict document (docs/evaluation.md) stands outside a region. A
// number edited by hand fails it; `go run ./eval/report` rewrites the
// regions from the files.
func TestDocsMatchResults(t *testing.T) {
	root := repoRoot(t)
	c := newResults(filepath.Join(root, evalrun.ResultsDir))
	for _, d := range documents {
		t.Run(d.Path, func(t *testing.T) {
			b, err := os.ReadFile(filepath.Join(root, d.Path))
			if err != nil {
				t.Fatal(err)
			}
			want, err := renderDoc(c, string(b))
			if err != nil {
				t.Fatal(err)
			}
			for _, diff := range regionDiffs(string(b), want) {
				t.Errorf("%s (go run ./eval/report rewrites it from docs/eval)", diff)
			}
			stray, err := d.strayFigures(string(b))
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range stray {
				t.Errorf("a figure outside the generated regions (put it in a region, or name it in figures.go if it is a name): %s", s)
			}
		})
	}
}

// TestHandEditFails edits the evaluation's figures by hand, in a region
// and in the prose, and checks that the check catches both.
func TestHandEditFails(t *testing.T) {
	root := repoRoot(t)
	b, err := os.ReadFile(filepath.Join(root, "docs", "evaluation.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	rs, err := parseRegions(doc)
	if err != nil {
		t.Fatal(err)
	}
	c := newResults(filepath.Join(root, evalrun.ResultsDir))
	digit := regexp.MustCompile(`[0-9]`)
	edited := 0
	// Every seventh region, so that the whole document is sampled.
	for i, r := range rs {
		if i%7 != 0 {
			continue
		}
		text := doc[r.Start:r.End]
		loc := digit.FindStringIndex(text)
		if loc == nil {
			continue
		}
		d := text[loc[0]]
		repl := byte('0' + (d-'0'+1)%10)
		hand := doc[:r.Start+loc[0]] + string(repl) + doc[r.Start+loc[0]+1:]
		want, err := renderDoc(c, hand)
		if err != nil {
			t.Fatal(err)
		}
		if diffs := regionDiffs(hand, want); len(diffs) != 1 || !strings.Contains(diffs[0], r.Key()) {
			t.Errorf("changing a digit of region %s (line %d) was not caught: %q", r.Key(), r.Line, diffs)
		}
		edited++
	}
	if edited == 0 {
		t.Fatal("no region with a figure in docs/evaluation.md")
	}
	// A figure typed into the prose.
	i := strings.Index(doc, "\n\n") + 2
	hand := doc[:i] + "The busiest node took 81 put RPCs a minute.\n\n" + doc[i:]
	stray, err := strayFigures(hand)
	if err != nil {
		t.Fatal(err)
	}
	if len(stray) != 1 || !strings.Contains(stray[0], "81 put RPCs") {
		t.Errorf("a figure typed into the prose: %q", stray)
	}
}

func TestStrayFigures(t *testing.T) {
	doc := "# Load (paper Fig. 8)\n\n" +
		"Issue 21 and RFC 9111, level 2 and levels 1 and 2, p50, p96 and p99.9, 127.0.100.0/24 and a /24, HTTP/1.1, TLS 1.3, a bare 404, wonderproxy-2020-07, NSDI'04.\n" +
		"It took <!-- report:x -->81<!-- /report --> a minute.\n" +
		"```\ngo run ./eval/hotspot -n 494\n```\n" +
		"Run `go run ./eval/x -n 5` and see [the file](eval/x2.json).\n" +
		"<!-- report:table -->\n| a | 1 |\n<!-- /report -->\n" +
		"But 12 here is a figure.\n" +
		"And so is a ratio of 4.2×.\n"
	got, err := strayFigures(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"line 12: But 12 here is a figure.", "line 13: And so is a ratio of 4.2×."}
	if !slices.Equal(got, want) {
		t.Errorf("strayFigures = %q, want %q", got, want)
	}
}

// TestMeasuredFigures: in a document that is not strict, the code's own
// numbers may stand in the prose, a timing, a throughput or a run's log
// may not.
func TestMeasuredFigures(t *testing.T) {
	doc := "# Cost of a hit\n\n" +
		"Levels 60 ms and 20 ms, 80 %, at most 16 MiB, slower than 1.25× the minimum RTT, 1000 a second.\n" +
		"A hit costs <!-- report:x -->2.1 µs<!-- /report --> and serves <!-- report:y -->26,480 req/s<!-- /report -->.\n" +
		"```\nBenchmarkHit1KiB  3.4 µs/op\n```\n" +
		"Run `wrk -d 5s -R 9` and see [the file](eval/x2.json), slower than 16 KB/s.\n" +
		"A 1 KiB hit takes 2.7–3.4 µs.\n" +
		"coral served 26,480 req/s against respond's 31,015.\n" +
		"The resolver answered 25,000 queries per second per core.\n" +
		"On 2026-11-26 at 20:27 UTC, machine otherwise idle.\n" +
		"The load average was 3.2.\n" +
		"It streamed 412 MiB/s.\n"
	got, err := measuredFigures(doc)
	if err != nil {
		t.Fatal(err)
	}
	want := []string{
		"line 9: A 1 KiB hit takes 2.7–3.4 µs.",
		"line 10: coral served 26,480 req/s against respond's 31,015.",
		"line 11: The resolver answered 25,000 queries per second per core.",
		"line 12: On 2026-11-26 at 20:27 UTC, machine otherwise idle.",
		"line 13: The load average was 3.2.",
		"line 14: It streamed 412 MiB/s.",
	}
	if !slices.Equal(got, want) {
		t.Errorf("measuredFigures = %q, want %q", got, want)
	}
}

func TestParseRegions(t *testing.T) {
	doc := "a\n<!-- report:t.x a b -->\nold\nlines\n<!-- /report -->\nz <!-- report:v 1 -->7<!-- /report --> y\n"
	rs, err := parseRegions(doc)
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || !rs[0].Block || rs[1].Block || rs[0].Key() != "t.x a b" || rs[1].Key() != "v 1" || rs[0].Line != 2 || rs[1].Line != 6 {
		t.Fatalf("regions %+v", rs)
	}
	if got := doc[rs[0].Start:rs[0].End]; got != "old\nlines\n" {
		t.Errorf("block text %q", got)
	}
	if got := doc[rs[1].Start:rs[1].End]; got != "7" {
		t.Errorf("inline text %q", got)
	}
	out, err := fill(doc, func(r region) (string, error) {
		if r.Block {
			return "new", nil
		}
		return "8", nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if want := "a\n<!-- report:t.x a b -->\nnew\n<!-- /report -->\nz <!-- report:v 1 -->8<!-- /report --> y\n"; out != want {
		t.Errorf("fill:\n%s\nwant\n%s", out, want)
	}
	for _, bad := range []string{
		"<!-- /report -->",
		"<!-- report:x -->",
		"<!-- report:X -->a<!-- /report -->",
		"<!-- report: -->a<!-- /report -->",
		"<!-- report:x -->a<!-- report:y -->b<!-- /report --><!-- /report -->",
		"<!-- report:x -->a\nb<!-- /report -->",
		"<!-- report:x\n-->a<!-- /report -->",
		"<!-- report:x -->\na\nb <!-- /report -->",
	} {
		if _, err := parseRegions(bad); err == nil {
			t.Errorf("parseRegions(%q): no error", bad)
		}
	}
	if _, err := fill("<!-- report:x -->a<!-- /report -->", func(region) (string, error) { return "1\n2", nil }); err == nil {
		t.Error("fill accepted a line break in an inline region")
	}
}

func FuzzRegions(f *testing.F) {
	f.Add("a\n<!-- report:t.x a b -->\nold\n<!-- /report -->\nz <!-- report:v 1 -->7<!-- /report --> y\n")
	f.Add("<!-- report:x -->a<!-- report:y -->b<!-- /report --><!-- /report -->")
	f.Add("<!-- report:x --><!-- /report --><!-- /report -->")
	f.Fuzz(func(t *testing.T, doc string) {
		rs, err := parseRegions(doc)
		if err != nil {
			return
		}
		// Filling every region with its own text gives the document back,
		// and every region's text lies within the document, in order.
		last := 0
		for _, r := range rs {
			if r.Start < last || r.End < r.Start || r.End > len(doc) {
				t.Fatalf("region %+v out of order or bounds (last %d, len %d)", r, last, len(doc))
			}
			last = r.End
		}
		same, err := fill(doc, func(r region) (string, error) { return doc[r.Start:r.End], nil })
		if err != nil {
			t.Fatalf("fill with the regions' own text: %v", err)
		}
		if same != doc {
			t.Fatalf("fill with the same text changed the document:\n%q\n%q", doc, same)
		}
	})
}

func TestFormat(t *testing.T) {
	for _, tc := range []struct {
		v    float64
		d    int
		want string
	}{{0, 0, "0"}, {999, 0, "999"}, {1234, 0, "1,234"}, {30527.4, 0, "30,527"}, {1234567.891, 2, "1,234,567.89"}, {0.1234, 3, "0.123"}, {-4.5, 1, "−4.5"}, {-0.0001, 1, "0.0"}} {
		if got := num(tc.v, tc.d); got != tc.want {
			t.Errorf("num(%v, %d) = %q, want %q", tc.v, tc.d, got, tc.want)
		}
	}
	if got := times(14.44, 1); got != "14.4×" {
		t.Errorf("times = %q", got)
	}
	if got := pct(0.8123, 0); got != "81 %" {
		t.Errorf("pct = %q", got)
	}
	if got := date("2026-11-29T07:35:09Z"); got != "2026-11-29 07:35 UTC" {
		t.Errorf("date = %q", got)
	}
}

// TestExperimentFlags: every flag the registry's commands pass is one the
// program defines (found in its source), so the commands the documents
// show run as written.
func TestExperimentFlags(t *testing.T) {
	root := repoRoot(t)
	defined := map[string]map[string]bool{}
	for _, e := range experiments {
		if e.Test != "" {
			checkLabTest(t, root, e)
			continue
		}
		if defined[e.Program] == nil {
			defined[e.Program] = programFlags(t, filepath.Join(root, "eval", e.Program))
		}
		for _, a := range e.Args {
			if !strings.HasPrefix(a, "-") {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			if !defined[e.Program][name] {
				t.Errorf("%s: eval/%s defines no flag -%s", e.File, e.Program, name)
			}
		}
		// A program without a topology flag takes the matrix when
		// CORAL_RTT_DATA names it (eval/members).
		picksTopology := defined[e.Program]["topology"] || defined[e.Program]["topologies"]
		if picksTopology && e.Data != slices.Contains(e.Args, "wonderproxy") && e.Data != slices.Contains(e.Args, "both") {
			t.Errorf("%s: needs the data set %v, but its topology arguments say otherwise: %q", e.File, e.Data, e.Args)
		}
	}
}

// checkLabTest: a lab test's entry names a test its package defines, and
// the variables it sets are ones the package reads, with the file's name.
func checkLabTest(t *testing.T, root string, e experiment) {
	t.Helper()
	dir := filepath.Join(root, filepath.FromSlash(e.Program))
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var src strings.Builder
	for _, ent := range ents {
		if strings.HasSuffix(ent.Name(), "_test.go") {
			b, err := os.ReadFile(filepath.Join(dir, ent.Name()))
			if err != nil {
				t.Fatal(err)
			}
			src.Write(b)
		}
	}
	if !strings.Contains(src.String(), "\nfunc "+e.Test+"(t *testing.T) {") {
		t.Errorf("%s: %s defines no %s", e.File, e.Program, e.Test)
	}
	if regexp.MustCompile(`\nfunc ` + e.Test + `[A-Za-z0-9_]`).MatchString(src.String()) {
		t.Errorf("%s: -run %s also runs another test of %s", e.File, e.Test, e.Program)
	}
	names := 0
	for _, kv := range e.Env {
		name, value, _ := strings.Cut(kv, "=")
		if !strings.Contains(src.String(), strconv.Quote(name)) {
			t.Errorf("%s: %s does not read %s", e.File, e.Program, name)
		}
		if value == evalrun.ResultsDir+"/"+e.File {
			names++
		}
	}
	if names != 1 {
		t.Errorf("%s: no variable of %q names %s/%s", e.File, e.Env, evalrun.ResultsDir, e.File)
	}
}

// programFlags lists the flag names a command's package defines through
// the flag package (flag.Int("name", …), flag.IntVar(&v, "name", …)).
func programFlags(t *testing.T, dir string) map[string]bool {
	t.Helper()
	fset := token.NewFileSet()
	out := map[string]bool{}
	ents, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	for _, ent := range ents {
		if !strings.HasSuffix(ent.Name(), ".go") || strings.HasSuffix(ent.Name(), "_test.go") {
			continue
		}
		f, err := parser.ParseFile(fset, filepath.Join(dir, ent.Name()), nil, 0)
		if err != nil {
			t.Fatal(err)
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok {
				return true
			}
			if id, ok := sel.X.(*ast.Ident); !ok || id.Name != "flag" {
				return true
			}
			i := 0
			if strings.HasSuffix(sel.Sel.Name, "Var") {
				i = 1
			}
			if len(call.Args) > i {
				if lit, ok := call.Args[i].(*ast.BasicLit); ok && lit.Kind == token.STRING {
					if s, err := strconv.Unquote(lit.Value); err == nil {
						out[s] = true
					}
				}
			}
			return true
		})
	}
	return out
}

func TestExperimentCommands(t *testing.T) {
	e := experiment{File: "x.json", Program: "hotspot", Args: []string{"-seeds", "1 2 3", "-suite", "$CORAL_TEST_SUITE"}, Data: true, Needs: "a suite"}
	if got, want := e.commandLine(), `CORAL_RTT_DATA=/path/to/wonderproxy-2020-07 go run ./eval/hotspot -seeds "1 2 3" -suite $CORAL_TEST_SUITE`; got != want {
		t.Errorf("commandLine = %q, want %q", got, want)
	}
	t.Setenv("CORAL_TEST_SUITE", "")
	if _, err := e.argv(); err == nil || !strings.Contains(err.Error(), "CORAL_TEST_SUITE") {
		t.Errorf("argv with the variable unset: %v", err)
	}
	t.Setenv("CORAL_TEST_SUITE", "/a b")
	argv, err := e.argv()
	if err != nil || !slices.Equal(argv, []string{"go", "run", "./eval/hotspot", "-seeds", "1 2 3", "-suite", "/a b"}) {
		t.Errorf("argv = %q, %v", argv, err)
	}
	lab := experiment{File: "restart.json", Program: "test/nodelab", Test: "TestRestartAnswersAtOnce", Env: []string{"NODELAB_RESULTS=docs/eval/restart.json"}}
	if got, want := lab.commandLine(), "NODELAB_RESULTS=docs/eval/restart.json go test -count=1 -run TestRestartAnswersAtOnce -v ./test/nodelab"; got != want {
		t.Errorf("a lab test's commandLine = %q, want %q", got, want)
	}
	if argv, err := lab.argv(); err != nil || !slices.Equal(argv, []string{"go", "test", "-count=1", "-run", "TestRestartAnswersAtOnce", "-v", "./test/nodelab"}) {
		t.Errorf("a lab test's argv = %q, %v", argv, err)
	}
	for _, f := range []string{"hotspot.json", "endtoend-wonderproxy.json", "chaos/chaos.json", "conformance/squid.json", "resolver-proofs.json"} {
		if _, err := experimentFor(f); err != nil {
			t.Error(err)
		}
	}
	if _, err := experimentFor("nothing.json"); err == nil {
		t.Error("experimentFor(nothing.json): no error")
	}
	seen := map[string]bool{}
	for _, e := range experiments {
		if seen[e.File] {
			t.Errorf("%s listed twice", e.File)
		}
		seen[e.File] = true
	}
}
