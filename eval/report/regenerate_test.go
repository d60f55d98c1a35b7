package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
)

// writeResult writes a result file under dir with a provenance block.
func writeResult(t *testing.T, dir, name, commit string, clean bool, started string) {
	t.Helper()
	prov := map[string]any{"commit": commit, "clean": clean, "started": started}
	if e, err := experimentFor(name); err == nil {
		prov["command"] = recordedCommand(e)
	}
	b, err := json.Marshal(map[string]any{"provenance": prov})
	if err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, filepath.FromSlash(name))
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, b, 0o644); err != nil {
		t.Fatal(err)
	}
}

// TestWrittenBy: an experiment's files count as this commit's only when
// every one of them (its other files too) names the commit and a clean
// tree, and, after a run, started no earlier than the run.
func TestWrittenBy(t *testing.T) {
	dir := t.TempDir()
	e := experiment{File: "a.json", Also: []string{"sub/b.json"}}
	const started = "2026-11-29T10:00:00Z"
	at, _ := time.Parse(time.RFC3339, started)
	check := func(what string, since time.Time, ok bool) {
		t.Helper()
		err := writtenBy(newResults(dir), e, "c1", since)
		if (err == nil) != ok {
			t.Errorf("%s: writtenBy = %v, want ok %v", what, err, ok)
		}
	}
	writeResult(t, dir, "a.json", "c1", true, started)
	check("its other file missing", time.Time{}, false)
	writeResult(t, dir, "sub/b.json", "c1", false, started)
	check("its other file from a tree with changes", time.Time{}, false)
	writeResult(t, dir, "sub/b.json", "c0", true, started)
	check("its other file from another commit", time.Time{}, false)
	writeResult(t, dir, "sub/b.json", "c1", true, started)
	check("both this commit's", time.Time{}, true)
	check("both started when the run did", at, true)
	check("both started before the run", at.Add(time.Second), false)
	if err := os.WriteFile(filepath.Join(dir, "a.json"), []byte(`{"command": "old"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	check("a file without provenance", time.Time{}, false)

	// This commit's file, written by another entry's run of the program
	// (hostile.json's run writes hostile-dns.json, every class in it).
	dns := experiment{File: "dns.json", Program: "hostile", Args: []string{"-classes", "dns-a,dns-b"}}
	b, err := json.Marshal(map[string]any{"provenance": map[string]any{"commit": "c1", "clean": true, "started": started,
		"command": `go run ./eval/hostile -classes="" -seed=1`}})
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "dns.json"), b, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := writtenBy(newResults(dir), dns, "c1", time.Time{}); err == nil {
		t.Error("a file another entry's command wrote counts as this entry's")
	}
}

// TestPick: -only takes result files (an experiment's other files too)
// and packages; -kind splits virtual time from real processes; the lab
// tests' files are real runs.
func TestPick(t *testing.T) {
	files := func(only, kind string) []string {
		t.Helper()
		es, err := pick(only, kind)
		if err != nil {
			t.Fatalf("pick(%q, %q): %v", only, kind, err)
		}
		var out []string
		for _, e := range es {
			out = append(out, e.File)
		}
		return out
	}
	if got := files("conformance/coral.json,test/nodelab", "all"); !slices.Equal(got, []string{"conformance/summary.json", "restart.json"}) {
		t.Errorf("-only conformance/coral.json,test/nodelab: %q", got)
	}
	if got := files("eval/getlatency", "all"); len(got) != 4 {
		t.Errorf("-only eval/getlatency: %q", got)
	}
	virtual, real := files("", "virtual"), files("", "real")
	if len(virtual)+len(real) != len(experiments) || slices.Contains(virtual, "resolver-proofs.json") || !slices.Contains(real, "resolver-proofs.json") {
		t.Errorf("-kind virtual %q, -kind real %q", virtual, real)
	}
	if _, err := pick("", "fast"); err == nil {
		t.Error("-kind fast: no error")
	}
	if _, err := pick("nothing.json", "all"); err == nil {
		t.Error("-only nothing.json: no error")
	}
}

// TestEveryResultFileListed: every JSON file under docs/eval is written by
// an experiment of the registry, so a regeneration remakes them all.
func TestEveryResultFileListed(t *testing.T) {
	dir := filepath.Join(repoRoot(t), filepath.FromSlash(evalrun.ResultsDir))
	n := 0
	err := filepath.WalkDir(dir, func(p string, d os.DirEntry, err error) error {
		if err != nil || d.IsDir() || !strings.HasSuffix(p, ".json") {
			return err
		}
		n++
		rel, _ := filepath.Rel(dir, p)
		if _, err := experimentFor(filepath.ToSlash(rel)); err != nil {
			t.Error(err)
		}
		return nil
	})
	if err != nil || n < len(experiments) {
		t.Fatalf("%d result files found: %v", n, err)
	}
}

// TestRegenerateResume: in a clean repository whose result file this
// commit already wrote, -resume runs nothing and the end-of-run check
// passes, and the other files are unfinished (so the documents wait); a file of an earlier commit is not skipped (a dry run says what
// would run); a tree with changes is refused.
func TestRegenerateResume(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	root := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		out, err := exec.Command("git", append([]string{"-C", root, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...).CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	results := filepath.Join(root, filepath.FromSlash(evalrun.ResultsDir))
	git("init", "-q")
	if err := os.WriteFile(filepath.Join(root, "go.mod"), []byte("module example\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	writeResult(t, results, "clusters.json", "old", true, "2026-11-01T00:00:00Z")
	git("add", ".")
	git("commit", "-q", "-m", "one")
	head := git("rev-parse", "HEAD")
	t.Setenv(evalrun.EnvRTTData, "/nonexistent") // clusters.json needs it named; nothing runs

	o := regenOptions{only: "clusters.json", kind: "all", resume: true, dryRun: true}
	if err := regenerate(root, o); err != nil {
		t.Fatalf("dry run over an earlier commit's file: %v", err)
	}
	writeResult(t, results, "clusters.json", head, true, "2026-11-29T10:00:00Z")
	o.dryRun = false
	if err := regenerate(root, o); err != nil {
		t.Fatalf("-resume over this commit's file: %v", err)
	}
	left, err := unfinished(root)
	if err != nil || len(left) != len(experiments)-1 || slices.Contains(left, "clusters.json") {
		t.Errorf("unfinished = %q, %v: want every file but clusters.json", left, err)
	}
	o.resume = false // it runs, and fails: the repository has no eval/clusters
	if err := regenerate(root, o); err == nil {
		t.Fatal("without -resume: no error from a run that cannot start")
	}
	o.resume = true
	writeResult(t, results, "clusters.json", head, false, "2026-11-29T10:00:00Z")
	o.dryRun = true
	if err := regenerate(root, o); err != nil {
		t.Fatalf("dry run: %v", err)
	}
	t.Setenv(evalrun.EnvRTTData, "")
	if err := regenerate(root, o); err == nil || !strings.Contains(err.Error(), evalrun.EnvRTTData) {
		t.Errorf("the data set unnamed: %v", err)
	}
	if err := os.WriteFile(filepath.Join(root, "x.go"), []byte("package x\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := regenerate(root, o); err == nil || !strings.Contains(err.Error(), "x.go") {
		t.Errorf("a tree with changes: %v", err)
	}
}
