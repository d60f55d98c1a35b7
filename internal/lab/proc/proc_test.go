//go:build linux

package proc

import (
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestStopAndLog(t *testing.T) {
	dir := t.TempDir()
	log := filepath.Join(dir, "sleep.log")
	// A shell that starts a child of its own and ignores SIGTERM: Stop must
	// kill the group, the child included.
	p, err := Start([]string{"sh", "-c", `trap "" TERM; echo started; sleep 60 & echo child $!; wait`},
		Options{Name: "stubborn", Dir: dir, Log: log, Banner: "proctest"})
	if err != nil {
		t.Fatal(err)
	}
	var child int
	deadline := time.Now().Add(10 * time.Second)
	for child == 0 && time.Now().Before(deadline) {
		for _, l := range strings.Split(p.Log(), "\n") {
			if v, ok := strings.CutPrefix(l, "child "); ok {
				child, _ = strconv.Atoi(strings.TrimSpace(v))
			}
		}
		time.Sleep(10 * time.Millisecond)
	}
	if child == 0 {
		t.Fatalf("no child in the log:\n%s", p.Log())
	}
	if !strings.HasPrefix(p.Log(), "### proctest ") || !strings.Contains(p.Log(), "started\n") {
		t.Errorf("log:\n%s", p.Log())
	}
	if err := p.Exited(); err != nil || !p.Running() {
		t.Fatalf("running process: Exited %v, Running %v", err, p.Running())
	}
	if err := p.Stop(200 * time.Millisecond); err == nil || !strings.Contains(err.Error(), "killed") {
		t.Errorf("Stop of a process ignoring SIGTERM: %v", err)
	}
	if p.Running() || p.Exited() != nil {
		t.Errorf("after Stop: Running %v, Exited %v", p.Running(), p.Exited())
	}
	waitGone(t, child)
	if err := p.Stop(time.Second); err != nil {
		t.Errorf("second Stop: %v", err)
	}
}

func TestUnexpectedExit(t *testing.T) {
	dir := t.TempDir()
	p, err := Start([]string{"sh", "-c", "for i in 1 2 3 4 5; do echo line $i; done; exit 3"},
		Options{Dir: dir, Log: filepath.Join(dir, "x.log"), TailLines: 2})
	if err != nil {
		t.Fatal(err)
	}
	<-p.Done()
	err = p.Exited()
	if err == nil || !strings.Contains(err.Error(), "sh exited: exit status 3") ||
		!strings.HasSuffix(err.Error(), "line 4\nline 5") || strings.Contains(err.Error(), "line 3") {
		t.Errorf("Exited: %v", err)
	}
	if err := p.Stop(time.Second); err != nil {
		t.Errorf("Stop after the exit: %v", err)
	}
	if p.Exited() != nil {
		t.Error("Exited after Stop still reports")
	}
}

func TestKill(t *testing.T) {
	dir := t.TempDir()
	p, err := Start([]string{"sleep", "60"}, Options{Log: filepath.Join(dir, "log"), Env: []string{"PATH=" + os.Getenv("PATH")}})
	if err != nil {
		t.Fatal(err)
	}
	p.Kill()
	if p.Running() || p.Exited() != nil || !strings.Contains(p.ExitError().Error(), "killed") {
		t.Errorf("after Kill: Running %v, Exited %v, ExitError %v", p.Running(), p.Exited(), p.ExitError())
	}
}

func TestStartErrors(t *testing.T) {
	if _, err := Start(nil, Options{Log: "x"}); err == nil {
		t.Error("empty argv accepted")
	}
	if _, err := Start([]string{"true"}, Options{}); err == nil {
		t.Error("no log accepted")
	}
	if _, err := Start([]string{"/nonexistent/program"}, Options{Log: filepath.Join(t.TempDir(), "log")}); err == nil ||
		!strings.HasPrefix(err.Error(), "program: ") {
		t.Errorf("missing program: %v", err)
	}
}

func TestTailLines(t *testing.T) {
	for _, tc := range []struct {
		in   string
		n    int
		want string
	}{{"a\nb\nc\n", 2, "b\nc"}, {"a\nb\nc", 5, "a\nb\nc"}, {"", 3, ""}} {
		if got := TailLines(tc.in, tc.n); got != tc.want {
			t.Errorf("TailLines(%q, %d) = %q, want %q", tc.in, tc.n, got, tc.want)
		}
	}
}

// waitGone waits until pid no longer exists (it may linger as a zombie of
// init for a moment).
func waitGone(t *testing.T, pid int) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for time.Now().Before(deadline) {
		if err := syscall.Kill(pid, 0); err != nil {
			return
		}
		if b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/stat"); err == nil && strings.Contains(string(b), ") Z ") {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Errorf("the group's child %d outlived Stop", pid)
}
