package vtime

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime/debug"
	"slices"
	"strings"
	"testing"
	"time"
)

// TestVirtualTime is this package's own child: run with CORAL_VTIME_CHILD=1
// and childArgs, it plays an experiment whose main sleeps a virtual hour, or
// fails when its first argument is "fail".
func TestVirtualTime(t *testing.T) {
	RunChild(t, func() {
		flag.Parse()
		Main(func() error {
			if flag.Arg(0) == "fail" {
				return fmt.Errorf("boom")
			}
			start := time.Now()
			time.Sleep(time.Hour)
			fmt.Printf("elapsed %d; args %q\n", int64(time.Since(start).Hours()), flag.Args())
			return nil
		})
	})
}

// runSelfAsChild runs this test binary the way Main runs an experiment's.
func runSelfAsChild(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command(os.Args[0], childArgs(args)...)
	cmd.Env = append(os.Environ(), childEnv+"=1")
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func TestChildRunsInVirtualTime(t *testing.T) {
	out, err := runSelfAsChild(t, "a", "-b")
	if err != nil {
		t.Fatalf("child failed: %v\n%s", err, out)
	}
	if out != "elapsed 1; args [\"a\" \"-b\"]\n" {
		t.Fatalf("child output %q: want an elapsed virtual hour, the arguments passed through and nothing else", out)
	}
}

func TestChildReportsErrors(t *testing.T) {
	out, err := runSelfAsChild(t, "fail")
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("child exit = %v, want status 1; output %q", err, out)
	}
	if out != "error: boom\n" {
		t.Fatalf("child output %q, want only the error", out)
	}
}

func TestChildArgsSelectOneTestAndPassTheRestThrough(t *testing.T) {
	got := childArgs([]string{"-n", "60", "--", "x"})
	want := []string{"-test.run=^TestVirtualTime$", "--", "-n", "60", "--", "x"}
	if !slices.Equal(got, want) {
		t.Fatalf("childArgs = %q, want %q", got, want)
	}
}

func TestBuildArgsKeepTheCommandsBuildFlags(t *testing.T) {
	info := &debug.BuildInfo{Path: "example.com/m/eval/x", Settings: []debug.BuildSetting{
		{Key: "-race", Value: "true"}, {Key: "-tags", Value: "a,b"}, {Key: "-trimpath", Value: "true"}, {Key: "GOOS", Value: "linux"},
	}}
	got := buildArgs(info, "/tmp/x.test")
	want := []string{"test", "-c", "-o", "/tmp/x.test", "-race", "-tags=a,b", "example.com/m/eval/x"}
	if !slices.Equal(got, want) {
		t.Fatalf("buildArgs = %q, want %q", got, want)
	}
	info.Settings = []debug.BuildSetting{{Key: "-race", Value: "false"}}
	if got := buildArgs(info, "b"); !slices.Equal(got, []string{"test", "-c", "-o", "b", "example.com/m/eval/x"}) {
		t.Fatalf("buildArgs without flags = %q", got)
	}
}

// TestCommandBuildsAndRunsItsTestBinary runs a real command (testdata/sleeper)
// with go run: Main must build its test binary, pass the flags and
// arguments through, sleep in virtual time and pass the exit status back.
func TestCommandBuildsAndRunsItsTestBinary(t *testing.T) {
	if testing.Short() {
		t.Skip("builds a command and its test binary")
	}
	goTool, err := exec.LookPath("go")
	if err != nil {
		t.Skip("no go command")
	}
	bin := t.TempDir() + "/sleeper"
	if out, err := exec.Command(goTool, "build", "-o", bin, "./testdata/sleeper").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	start := time.Now()
	out, err := exec.Command(bin, "-hours", "5", "x").CombinedOutput()
	if err != nil {
		t.Fatalf("sleeper: %v\n%s", err, out)
	}
	if string(out) != "slept 5h0m0s of virtual time; args [\"x\"]\n" {
		t.Fatalf("sleeper output %q", out)
	}
	if d := time.Since(start); d > 2*time.Minute {
		t.Fatalf("five virtual hours took %v of real time", d)
	}

	out, err = exec.Command(bin, "-fail").CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "error: boom") {
		t.Fatalf("sleeper -fail: %v, output %q; want status 1 and the error", err, out)
	}
}
