package vtime

import (
	"errors"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

var errTest = errors.New("boom")

// TestMain lets the test binary double as a program that calls Main, so the
// test can check Main's behaviour in a child process.
func TestMain(m *testing.M) {
	switch os.Getenv("VTIME_CHILD") {
	case "sleep":
		Main(func() error {
			// An hour of virtual sleep must finish at once.
			start := time.Now()
			time.Sleep(time.Hour)
			println("elapsed", int64(time.Since(start).Hours()))
			return nil
		})
	case "fail":
		Main(func() error { return errTest })
	}
	os.Exit(m.Run())
}

func TestMainRunsInVirtualTime(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "VTIME_CHILD=sleep")
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child failed: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "elapsed 1") {
		t.Fatalf("child output %q: want an elapsed virtual hour", out)
	}
	if strings.Contains(string(out), "PASS") {
		t.Fatalf("child printed the testing summary: %q", out)
	}
}

func TestMainReportsErrors(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "VTIME_CHILD=fail")
	out, err := cmd.CombinedOutput()
	if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 {
		t.Fatalf("child exit = %v, want status 1; output %q", err, out)
	}
	if !strings.Contains(string(out), "error: boom") {
		t.Fatalf("child output %q lacks the error", out)
	}
}
