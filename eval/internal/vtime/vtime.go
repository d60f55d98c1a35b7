// Package vtime runs an experiment in virtual time, so that experiments
// started with `go run ./eval/NAME` can simulate hours of a thousand-node
// network in seconds.
//
// Go provides virtual time only through testing/synctest, whose entry point
// needs the *testing.T of a running test, and a test runs only in a test
// binary. So Main, called by the experiment's main, builds the experiment's
// own test binary (`go test -c`) and runs it with the same command line; in
// that child process the test TestVirtualTime (one line per experiment,
// calling RunChild) runs main again, and main's Main call then runs the
// experiment inside a synctest bubble. Inside the bubble time advances only
// when every goroutine of the bubble is blocked, so the function must create
// its timers, channels and goroutines itself (build the simulated network
// inside it) and leave no goroutine blocked forever.
package vtime

import (
	"errors"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path"
	"path/filepath"
	"runtime/debug"
	"syscall"
	"testing"
	"testing/synctest"
)

// childEnv marks the test binary Main starts, so TestVirtualTime runs only
// there and skips under `go test ./...`.
const childEnv = "CORAL_VTIME_CHILD"

// TestName is the test every experiment that calls Main defines:
//
//	func TestVirtualTime(t *testing.T) { vtime.RunChild(t, main) }
const TestName = "TestVirtualTime"

// child is the running TestVirtualTime's T in the child process, nil in the
// parent.
var child *testing.T

// Main runs f in a synctest bubble and exits the process: status 0 when f
// returns nil, 1 after printing its error otherwise. Call it from main after
// parsing flags. It never returns.
//
// In the command itself it builds the command's test binary and runs it
// (flags, standard streams and exit status pass through); in that test
// binary, reached through RunChild, it runs f.
func Main(f func() error) {
	if child != nil {
		var err error
		synctest.Test(child, func(*testing.T) { err = f() })
		// Leave before the testing framework prints its summary, so the
		// output is the experiment's alone.
		if err != nil {
			fmt.Fprintln(os.Stderr, "error:", err)
			os.Exit(1)
		}
		os.Exit(0)
	}
	if testing.Testing() {
		fmt.Fprintln(os.Stderr, "vtime: Main called in a test binary outside RunChild; a test uses synctest.Test itself")
		os.Exit(2)
	}
	status, err := runChild(os.Args[1:])
	if err != nil {
		fmt.Fprintln(os.Stderr, "vtime:", err)
	}
	os.Exit(status)
}

// RunChild is the body of an experiment's TestVirtualTime: in the test
// binary Main started, it calls the experiment's main with the command
// line Main was given; everywhere else (go test ./...) the test skips.
func RunChild(t *testing.T, main func()) {
	if os.Getenv(childEnv) != "1" {
		t.Skip("runs only in the test binary vtime.Main starts (go run ./eval/NAME)")
	}
	// The testing framework parsed its own flags and stopped at "--"; what
	// follows is the experiment's command line, which main parses again.
	os.Args = append([]string{os.Args[0]}, flag.Args()...)
	child = t
	main()
	t.Fatal("main returned without calling vtime.Main")
}

// childArgs is the test binary's command line: the one test, then the
// experiment's own arguments after "--", where the testing framework stops
// parsing flags.
func childArgs(args []string) []string {
	return append([]string{"-test.run=^" + TestName + "$", "--"}, args...)
}

// buildArgs is the go command that builds the test binary of the command
// described by info into bin, with the build flags that change what the
// experiment runs (the race detector, build tags) as the command had them.
func buildArgs(info *debug.BuildInfo, bin string) []string {
	args := []string{"test", "-c", "-o", bin}
	for _, s := range info.Settings {
		switch {
		case s.Key == "-race" && s.Value == "true":
			args = append(args, "-race")
		case s.Key == "-tags" && s.Value != "":
			args = append(args, "-tags="+s.Value)
		}
	}
	return append(args, info.Path)
}

// runChild builds the calling command's test binary and runs it with args,
// returning its exit status.
func runChild(args []string) (int, error) {
	info, ok := debug.ReadBuildInfo()
	if !ok || info.Path == "" {
		return 2, errors.New("no build information: cannot tell which package to build")
	}
	dir, err := os.MkdirTemp("", "vtime-")
	if err != nil {
		return 2, err
	}
	defer os.RemoveAll(dir)
	bin := filepath.Join(dir, path.Base(info.Path)+".test")
	build := exec.Command("go", buildArgs(info, bin)...)
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return 2, fmt.Errorf("building the test binary of %s (run from inside the module): %w", info.Path, err)
	}

	run := exec.Command(bin, childArgs(args)...)
	run.Env = append(os.Environ(), childEnv+"=1")
	run.Stdin, run.Stdout, run.Stderr = os.Stdin, os.Stdout, os.Stderr
	// A terminal's Ctrl-C reaches both processes; a signal sent to this one
	// alone is passed on. Either way this process waits for the child and
	// removes the binary.
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(signals)
	if err := run.Start(); err != nil {
		return 2, err
	}
	done := make(chan struct{})
	defer close(done)
	go func() {
		for {
			select {
			case s := <-signals:
				_ = run.Process.Signal(s)
			case <-done:
				return
			}
		}
	}()
	err = run.Wait()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return 0, nil
	case errors.As(err, &exit) && exit.ExitCode() >= 0:
		return exit.ExitCode(), nil
	default:
		return 2, err
	}
}
