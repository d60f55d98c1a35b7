package evalrun

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"
)

func TestDirtyPaths(t *testing.T) {
	status := " M eval/hotspot/main.go\x00?? new.go\x00 M docs/eval/hotspot.json\x00?? docs/eval/x.png\x00" +
		"R  renamed.go\x00old.go\x00M  docs/evaluation.md\x00"
	got := dirtyPaths([]byte(status))
	want := []string{"eval/hotspot/main.go", "new.go", "renamed.go", "docs/evaluation.md"}
	if !slices.Equal(got, want) {
		t.Errorf("dirtyPaths = %q, want %q", got, want)
	}
	if got := dirtyPaths(nil); got != nil {
		t.Errorf("dirtyPaths(nil) = %q", got)
	}
	var many strings.Builder
	for i := range 30 {
		many.WriteString(" M f" + string(rune('a'+i)) + ".go\x00")
	}
	if got := dirtyPaths([]byte(many.String())); len(got) != maxDirty+1 || got[maxDirty] != "…" {
		t.Errorf("30 dirty paths gave %d: %q", len(got), got)
	}
}

// TestProvenanceInRepository makes a repository, commits, and checks what
// a run started in it records: the commit, clean until a file outside the
// results directory changes, and results written there do not count.
func TestProvenanceInRepository(t *testing.T) {
	if _, err := exec.LookPath("git"); err != nil {
		t.Skip("no git")
	}
	dir := t.TempDir()
	git := func(args ...string) string {
		t.Helper()
		cmd := exec.Command("git", append([]string{"-C", dir, "-c", "user.name=t", "-c", "user.email=t@t"}, args...)...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("git %v: %v\n%s", args, err, out)
		}
		return strings.TrimSpace(string(out))
	}
	write := func(name, text string) {
		t.Helper()
		p := filepath.Join(dir, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	git("init", "-q")
	write("go.mod", "module example\n")
	write(ResultsDir+"/old.json", "{}\n")
	git("add", ".")
	git("commit", "-q", "-m", "one")
	head := git("rev-parse", "HEAD")
	t.Chdir(filepath.Join(dir))

	p := StartProvenance("hotspot", "synthetic")
	if p.Commit != head || !p.Clean || len(p.Dirty) != 0 {
		t.Fatalf("clean tree: commit %q clean %v dirty %q, want %q clean", p.Commit, p.Clean, p.Dirty, head)
	}
	write(ResultsDir+"/old.json", "{\"new\": 1}\n")
	write(ResultsDir+"/new.json", "{}\n")
	if p := StartProvenance("hotspot", "synthetic"); !p.Clean {
		t.Fatalf("results written under %s made the tree unclean: %q", ResultsDir, p.Dirty)
	}
	write("eval/x.go", "package x\n")
	p = StartProvenance("hotspot", "synthetic")
	if p.Clean || !slices.Equal(p.Dirty, []string{"eval/x.go"}) {
		t.Fatalf("untracked source file: clean %v dirty %q", p.Clean, p.Dirty)
	}
	if p.Program != "eval/hotspot" || !strings.HasPrefix(p.Command, "go run ./eval/hotspot") || p.Topology != "synthetic" ||
		p.LoadBefore == "" || p.CPUs < 1 || p.Go == "" {
		t.Fatalf("provenance incomplete: %+v", p)
	}
	if _, err := time.Parse(time.RFC3339, p.Started); err != nil {
		t.Fatalf("started %q: %v", p.Started, err)
	}
	// A lab test's: its package, the go test command with the variable
	// that names its file, the same tree state.
	env := "NODELAB_RESULTS=" + ResultsDir + "/restart.json"
	tp := StartTestProvenance("test/nodelab", "TestRestartAnswersAtOnce", TopologyLoopback, env)
	wantCmd := env + " go test -count=1 -run TestRestartAnswersAtOnce -v ./test/nodelab"
	if tp.Program != "test/nodelab" || tp.Command != wantCmd || !slices.Equal(tp.Env, []string{env}) ||
		tp.Commit != head || tp.Clean || tp.Topology != TopologyLoopback || tp.Started == "" {
		t.Fatalf("a lab test's provenance: %+v, want command %q", tp, wantCmd)
	}
}

// TestProvenanceInBubble: a virtual-time experiment records wall-clock
// dates and its run's real length, not the bubble's.
func TestProvenanceInBubble(t *testing.T) {
	before := time.Now()
	synctest.Test(t, func(t *testing.T) {
		p := StartProvenance("lookup", "synthetic")
		time.Sleep(time.Hour) // virtual
		p.Finish()
		started, err := time.Parse(time.RFC3339, p.Started)
		if err != nil {
			t.Fatal(err)
		}
		if started.Before(before.Add(-2*time.Second)) || p.WallSeconds > 60 || p.Finished == "" || p.LoadAfter == "" {
			t.Errorf("started %v (test began %v), wall %v s: virtual time leaked into the provenance", started, before, p.WallSeconds)
		}
	})
}

func TestCommandLineLeavesOutTestFlags(t *testing.T) {
	// This test binary's flag set holds the testing package's flags.
	if got := CommandLine("x"); strings.Contains(got, "-test.") {
		t.Errorf("CommandLine = %q", got)
	}
}
