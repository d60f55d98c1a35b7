package main

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
)

// document is a file with generated regions. In a strict one no figure
// stands outside them (strayFigures); in the others no measured figure
// does (measuredFigures), while the code's own numbers may.
type document struct {
	Path   string
	Strict bool
}

// strayFigures lists the lines of text, the document's, that hold a
// figure its kind does not allow outside the regions.
func (d document) strayFigures(text string) ([]string, error) {
	if d.Strict {
		return strayFigures(text)
	}
	return measuredFigures(text)
}

// documents are the files eval/report writes.
var documents = []document{
	{Path: "docs/evaluation.md", Strict: true},
	{Path: "README.md"},
	{Path: "docs/design.md"},
	{Path: "docs/operations.md"},
	{Path: "coraldht/README.md"},
	{Path: "module/caddy/README.md"},
	{Path: "plugin/coredns/README.md"},
}

func main() {
	check := flag.Bool("check", false, "write nothing; exit 1 when a document differs from what the results give, or a strict one holds a figure outside its regions")
	regen := flag.Bool("regenerate", false, "run the experiments first (the tree must be clean), then write the documents")
	only := flag.String("only", "", "-regenerate: result files (hotspot.json) or programs (eval/hotspot), comma-separated")
	kind := flag.String("kind", "all", "-regenerate: virtual, real or all")
	keepGoing := flag.Bool("keep-going", false, "-regenerate: go on after an experiment fails")
	resume := flag.Bool("resume", false, "-regenerate: skip the experiments whose files this commit already wrote from a clean tree (a second sitting goes on where the first stopped)")
	dryRun := flag.Bool("n", false, "-regenerate: print what would run (and what -resume skips), check the environment, run nothing and write no document")
	resultsDir := flag.String("results", "", "read the result files from this directory instead of docs/eval (to preview other runs' figures)")
	flag.Parse()
	root, err := evalrun.RepoRoot()
	docs := !*dryRun
	if err == nil && *regen {
		err = regenerate(root, regenOptions{only: *only, kind: *kind, keepGoing: *keepGoing, resume: *resume, dryRun: *dryRun})
		if err == nil && docs {
			var left []string
			if left, err = unfinished(root); len(left) > 0 {
				// Rewriting them would change the tree, and every later
				// run (the next sitting's) would record it unclean.
				fmt.Printf("\nthe documents are left as they are: %d of the registry's experiments have files not yet written by this commit from a clean tree (%s); the regeneration that completes the registry rewrites them (or go run ./eval/report)\n",
					len(left), strings.Join(left, ", "))
				docs = false
			}
		}
	}
	if err == nil && docs {
		dir := *resultsDir
		if dir == "" {
			dir = filepath.Join(root, filepath.FromSlash(evalrun.ResultsDir))
		}
		err = writeDocs(root, dir, *check)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "report:", err)
		os.Exit(1)
	}
}

// renderDoc returns a document with its regions generated.
func renderDoc(c *results, text string) (string, error) {
	return fill(text, c.render)
}

// writeDocs renders every document; with check it only compares.
func writeDocs(root, resultsDir string, check bool) error {
	c := newResults(resultsDir)
	var problems []string
	for _, d := range documents {
		path := filepath.Join(root, filepath.FromSlash(d.Path))
		old, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		text, err := renderDoc(c, string(old))
		if err != nil {
			return fmt.Errorf("%s: %w", d.Path, err)
		}
		stray, err := d.strayFigures(text)
		if err != nil {
			return fmt.Errorf("%s: %w", d.Path, err)
		}
		for _, s := range stray {
			problems = append(problems, fmt.Sprintf("%s: a figure outside the generated regions: %s", d.Path, s))
		}
		if text == string(old) {
			continue
		}
		if check {
			for _, diff := range regionDiffs(string(old), text) {
				problems = append(problems, d.Path+": "+diff)
			}
			continue
		}
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			return err
		}
		fmt.Println("wrote", d.Path)
	}
	if len(problems) > 0 {
		return fmt.Errorf("the documents do not match the results (go run ./eval/report writes them):\n  %s", strings.Join(problems, "\n  "))
	}
	return nil
}

// regionDiffs names each region whose text differs between two versions
// of a document with the same regions.
func regionDiffs(old, want string) []string {
	ro, err1 := parseRegions(old)
	rw, err2 := parseRegions(want)
	if err := errors.Join(err1, err2); err != nil || len(ro) != len(rw) {
		return []string{fmt.Sprintf("differs (regions not comparable: %v)", err)}
	}
	var out []string
	for i := range ro {
		have, should := old[ro[i].Start:ro[i].End], want[rw[i].Start:rw[i].End]
		if have != should {
			out = append(out, fmt.Sprintf("line %d, region %s: the document has %q, the results give %q", ro[i].Line, ro[i].Key(), clip(have), clip(should)))
		}
	}
	return out
}

// startedBefore reports whether an RFC 3339 time is before t (to the
// second): the file is an earlier run's.
func startedBefore(s string, t time.Time) bool {
	st, err := time.Parse(time.RFC3339, s)
	return err != nil || st.Before(t.Truncate(time.Second))
}

func clip(s string) string {
	if len(s) > 300 {
		return s[:300] + "…"
	}
	return s
}

// unfinished lists the registry's experiments whose files are not all
// the work of the repository's HEAD from a clean tree.
func unfinished(root string) ([]string, error) {
	commit, _, err := evalrun.TreeState(root)
	if err != nil {
		return nil, err
	}
	c := newResults(filepath.Join(root, filepath.FromSlash(evalrun.ResultsDir)))
	var left []string
	for _, e := range experiments {
		if writtenBy(c, e, commit, time.Time{}) != nil {
			left = append(left, e.File)
		}
	}
	return left, nil
}

// regenOptions are -regenerate's flags.
type regenOptions struct {
	only, kind                string
	keepGoing, resume, dryRun bool
}

// pick is the registry's experiments that -only and -kind select.
func pick(only, kind string) ([]experiment, error) {
	if kind != "all" && kind != "virtual" && kind != "real" {
		return nil, fmt.Errorf("-kind %q: want virtual, real or all", kind)
	}
	var picked []experiment
	names := strings.FieldsFunc(only, func(r rune) bool { return r == ',' || r == ' ' })
	for _, e := range experiments {
		switch {
		case kind == "virtual" && !e.Virtual, kind == "real" && e.Virtual:
			continue
		case len(names) > 0 && !slices.Contains(names, e.source()) && !slices.ContainsFunc(e.files(), func(f string) bool { return slices.Contains(names, f) }):
			continue
		}
		picked = append(picked, e)
	}
	if len(picked) == 0 {
		return nil, fmt.Errorf("no experiment selected by -only %q -kind %s", only, kind)
	}
	return picked, nil
}

// writtenBy says why e's files are not all the work of a run of commit
// from a clean tree started no earlier than since (zero: any time), or
// nil when they are.
func writtenBy(c *results, e experiment, commit string, since time.Time) error {
	var errs []error
	for _, f := range e.files() {
		fi, err := c.info(f)
		switch {
		case err != nil:
			errs = append(errs, err)
		case fi.Provenance == nil || fi.Provenance.Commit != commit || !fi.Provenance.Clean:
			errs = append(errs, fmt.Errorf("%s was not written by commit %s from a clean tree", f, shortCommit(commit)))
		case !since.IsZero() && startedBefore(fi.Provenance.Started, since):
			errs = append(errs, fmt.Errorf("%s was not written by this run (it started %s)", f, fi.Provenance.Started))
		default:
			if err := commandAgrees(fi.Provenance.Command, e); err != nil {
				errs = append(errs, fmt.Errorf("%s was not written by %s's command: %w", f, e.File, err))
			}
		}
	}
	return errors.Join(errs...)
}

// regenerate runs the selected experiments from a clean tree, one after
// the other, each writing its result files under docs/eval. With resume
// it skips those whose files this commit already wrote from a clean tree;
// with dryRun it says what it would run.
func regenerate(root string, o regenOptions) error {
	commit, dirty, err := evalrun.TreeState(root)
	if err != nil {
		return fmt.Errorf("reading the tree's state: %w", err)
	}
	if len(dirty) > 0 {
		return fmt.Errorf("the tree has changes outside %s (%s): commit them first, so the results name the commit that made them", evalrun.ResultsDir, strings.Join(dirty, ", "))
	}
	picked, err := pick(o.only, o.kind)
	if err != nil {
		return err
	}
	var missing []error
	for _, e := range picked {
		if e.Data && os.Getenv(evalrun.EnvRTTData) == "" {
			missing = append(missing, fmt.Errorf("%s needs the WonderProxy matrix: set %s", e.File, evalrun.EnvRTTData))
		}
		if _, err := e.argv(); err != nil {
			missing = append(missing, err)
		}
	}
	if err := errors.Join(missing...); err != nil {
		return err
	}
	resultsDir := filepath.Join(root, filepath.FromSlash(evalrun.ResultsDir))
	var failed []string
	for i, e := range picked {
		argv, _ := e.argv()
		if o.resume && writtenBy(newResults(resultsDir), e, commit, time.Time{}) == nil {
			fmt.Printf("=== [%d/%d] %s: already written by %s from a clean tree, skipped (-resume)\n", i+1, len(picked), e.File, shortCommit(commit))
			continue
		}
		fmt.Printf("\n=== [%d/%d] %s: %s\n", i+1, len(picked), e.File, e.commandLine())
		if o.dryRun {
			fmt.Printf("    argv %q, env %q, in %s\n", argv, e.Env, root)
			continue
		}
		began := time.Now()
		cmd := exec.Command(argv[0], argv[1:]...)
		cmd.Dir, cmd.Stdout, cmd.Stderr = root, os.Stdout, os.Stderr
		cmd.Env = append(os.Environ(), e.Env...)
		runErr := cmd.Run()
		if err := writtenBy(newResults(resultsDir), e, commit, began); err != nil {
			runErr = errors.Join(runErr, err)
		} else if runErr != nil {
			// The files are this run's: an experiment whose acceptance
			// failed still writes its results, which are what they are.
			fmt.Printf("=== %s: %v; its results were written and are kept\n", e.File, runErr)
			runErr = nil
		}
		fmt.Printf("=== %s: %v wall\n", e.File, time.Since(began).Round(time.Second))
		if runErr != nil {
			failed = append(failed, fmt.Sprintf("%s: %v", e.File, runErr))
			if !o.keepGoing {
				break
			}
		}
	}
	if len(failed) > 0 {
		return fmt.Errorf("regeneration incomplete:\n  %s", strings.Join(failed, "\n  "))
	}
	if o.dryRun {
		return nil
	}
	// The end: every selected file, run now or in an earlier sitting, is
	// this commit's from a clean tree, and the tree is still that commit.
	var errs []error
	if now, dirty, err := evalrun.TreeState(root); err != nil || now != commit || len(dirty) > 0 {
		errs = append(errs, fmt.Errorf("the tree moved during the run: HEAD %s, changes %q (%v)", shortCommit(now), dirty, err))
	}
	for _, e := range picked {
		errs = append(errs, writtenBy(newResults(resultsDir), e, commit, time.Time{}))
	}
	if err := errors.Join(errs...); err != nil {
		return fmt.Errorf("regeneration incomplete: %w", err)
	}
	return nil
}
