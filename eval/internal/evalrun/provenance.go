package evalrun

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"syscall"
	"time"
)

// Provenance says where a result file came from: the program and the
// command line that wrote it, the commit it was built from and whether
// the tree had changes, when it ran, how busy the machine was and on which
// topology. Every experiment under eval/ puts one in its JSON under the
// key "provenance" (eval/report prints it beside the figures and refuses
// figures whose file lacks it). Start it when the run starts and Finish
// it just before writing the file.
type Provenance struct {
	Program string `json:"program"` // "eval/hotspot"; a lab test's package, "test/nodelab"
	Command string `json:"command"` // every flag spelt out (CommandLine), or TestCommandLine
	// Env lists the environment variables that change what the program
	// measures, as NAME=value (CORAL_RTT_DATA).
	Env []string `json:"env,omitempty"`
	// Commit is the HEAD commit of the repository the program ran in, ""
	// when it could not be read (no git, not a checkout).
	Commit string `json:"commit"`
	// Clean is true when the tree had no change against Commit outside
	// ResultsDir (tracked or untracked), so Commit alone says what ran.
	Clean bool `json:"clean"`
	// Dirty lists the first paths that made the tree unclean.
	Dirty []string `json:"dirty,omitempty"`
	// Started and Finished are wall-clock times (UTC, RFC 3339), also in a
	// virtual-time run.
	Started  string `json:"started"`
	Finished string `json:"finished,omitempty"`
	// WallSeconds is Finished − Started.
	WallSeconds float64 `json:"wall_seconds,omitempty"`
	// LoadBefore and LoadAfter are /proc/loadavg's 1, 5 and 15 minute
	// averages at the start and the end.
	LoadBefore string `json:"load_before"`
	LoadAfter  string `json:"load_after,omitempty"`
	// OtherCPUs is the CPUs the rest of the machine kept busy on average
	// over the run (all of /proc/stat's busy time but this process's).
	OtherCPUs float64 `json:"other_cpus,omitempty"`
	CPUs      int     `json:"cpus"`
	Kernel    string  `json:"kernel,omitempty"`
	Go        string  `json:"go"`
	// Topology is what the measured network was: a simulated RTT matrix
	// ("synthetic", "wonderproxy-2020-07"), or where real processes ran
	// ("loopback", "network namespaces").
	Topology string `json:"topology"`

	busy0, self0 float64
	start        time.Time
}

// Topologies of the experiments that run real processes.
const (
	TopologyLoopback = "loopback"           // 127.0.0.0/8, every RTT near zero
	TopologyNetns    = "network namespaces" // hosts in namespaces on one bridge
)

// ResultsDir is where the committed result files live, relative to the
// repository's root. Changes under it do not make a tree unclean: a
// regeneration writes one file after another there.
const ResultsDir = "docs/eval"

// EnvRTTData is the environment variable that names the RTT data set
// (eval/internal/topology.EnvDataDir; repeated here, which is below it).
const EnvRTTData = "CORAL_RTT_DATA"

// StartProvenance records the start of a run of eval/prog on topology.
func StartProvenance(prog, topology string) *Provenance {
	return startProvenance("eval/"+prog, CommandLine(prog), topology, EnvRTTData)
}

// StartTestProvenance records the start of a lab test that writes a
// result file: test (TestRestartAnswersAtOnce) of the package pkg
// (test/nodelab), run on topology by TestCommandLine(pkg, test, env...).
// env are the environment variables the run was given, as NAME=value;
// they are recorded.
func StartTestProvenance(pkg, test, topology string, env ...string) *Provenance {
	p := startProvenance(pkg, TestCommandLine(pkg, test, env...), topology)
	p.Env = append(p.Env, env...)
	return p
}

// TestCommandLine is the command that runs test of the package pkg with
// the environment variables env (NAME=value) set: what a lab test that
// writes a result file records, and what eval/report shows and runs.
func TestCommandLine(pkg, test string, env ...string) string {
	var b strings.Builder
	for _, kv := range env {
		b.WriteString(kv + " ")
	}
	b.WriteString("go test -count=1 -run " + test + " -v ./" + pkg)
	return b.String()
}

// startProvenance records the start of a run of program, invoked as
// command; of envNames, those set are recorded.
func startProvenance(program, command, topology string, envNames ...string) *Provenance {
	p := &Provenance{Program: program, Command: command, Topology: topology,
		LoadBefore: LoadAvg(), CPUs: runtime.NumCPU(), Kernel: Kernel(), Go: runtime.Version(),
		start: WallNow(), busy0: MachineBusy(), self0: SelfCPU()}
	p.Started = p.start.UTC().Format(time.RFC3339)
	for _, name := range envNames {
		if v, ok := os.LookupEnv(name); ok && v != "" {
			p.Env = append(p.Env, name+"="+v)
		}
	}
	if root, err := RepoRoot(); err == nil {
		p.Commit, p.Dirty, _ = gitState(root)
		p.Clean = p.Commit != "" && len(p.Dirty) == 0
	}
	return p
}

// Finish records the end of the run.
func (p *Provenance) Finish() {
	end := WallNow()
	p.Finished = end.UTC().Format(time.RFC3339)
	p.WallSeconds = end.Sub(p.start).Seconds()
	p.LoadAfter = LoadAvg()
	if p.WallSeconds > 0 && p.busy0 > 0 {
		p.OtherCPUs = max(0, (MachineBusy()-p.busy0)-(SelfCPU()-p.self0)) / p.WallSeconds
	}
}

// TreeState is the repository at root's HEAD commit and the paths that
// differ from it outside ResultsDir (nil: a clean tree).
func TreeState(root string) (commit string, dirty []string, err error) { return gitState(root) }

// maxDirty bounds Provenance.Dirty.
const maxDirty = 20

// gitState is HEAD's commit and the paths that differ from it outside
// ResultsDir, untracked files included (a stray .go file changes a build).
func gitState(root string) (commit string, dirty []string, err error) {
	out, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		return "", nil, err
	}
	commit = strings.TrimSpace(string(out))
	out, err = exec.Command("git", "-C", root, "status", "--porcelain=v1", "-z", "--untracked-files=all").Output()
	if err != nil {
		return commit, []string{"(git status failed)"}, err
	}
	return commit, dirtyPaths(out), nil
}

// dirtyPaths parses `git status --porcelain=v1 -z`: the changed paths
// outside ResultsDir, at most maxDirty.
func dirtyPaths(status []byte) []string {
	var out []string
	fields := bytes.Split(status, []byte{0})
	for i := 0; i < len(fields); i++ {
		f := fields[i]
		if len(f) < 4 {
			continue
		}
		xy, path := string(f[:2]), string(f[3:])
		if xy[0] == 'R' || xy[0] == 'C' {
			i++ // a rename's or copy's source path follows
		}
		if path == ResultsDir || strings.HasPrefix(path, ResultsDir+"/") {
			continue
		}
		if len(out) == maxDirty {
			out = append(out, "…")
			break
		}
		out = append(out, path)
	}
	return out
}

// RepoRoot is the nearest directory at or above the working directory
// holding go.mod: the experiments run from the module's root, and write
// their results under it.
func RepoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir, nil
		}
		up := filepath.Dir(dir)
		if up == dir {
			return "", errors.New("no go.mod at or above the working directory")
		}
		dir = up
	}
}

// WallNow reads the real clock. Inside a virtual-time bubble time.Now is
// virtual, so what a run records of its own cost and dates uses this.
func WallNow() time.Time {
	var tv syscall.Timeval
	if err := syscall.Gettimeofday(&tv); err != nil {
		return time.Time{}
	}
	return time.Unix(tv.Unix())
}

// String is the provenance on one line, for the experiments' output.
func (p *Provenance) String() string {
	state := "clean"
	switch {
	case p.Commit == "":
		state = "commit unknown"
	case !p.Clean:
		state = fmt.Sprintf("dirty: %s", strings.Join(p.Dirty, " "))
	}
	c := p.Commit
	if len(c) > 12 {
		c = c[:12]
	}
	return fmt.Sprintf("%s at %s (%s), started %s, load %s, topology %s", p.Program, c, state, p.Started, p.LoadBefore, p.Topology)
}

// testFlagPrefix marks the flags of a test binary, which a virtual-time
// experiment runs in (eval/internal/vtime): they are not the experiment's.
const testFlagPrefix = "test."

// isTestFlag reports whether f is one of the testing package's flags.
func isTestFlag(f *flag.Flag) bool { return strings.HasPrefix(f.Name, testFlagPrefix) }
