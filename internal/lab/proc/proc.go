//go:build linux

// Package proc starts the child processes of the labs, the demo network
// and the experiments (bin/caddy, bin/coredns, the Debian resolvers,
// nginx) the one way they all need. Each runs in a process group of its
// own, so a terminal's Ctrl-C reaches only the parent, which then stops it
// in order, and a stop reaches the children it starts (nginx's workers).
// Each gets SIGKILL as its parent-death signal, so none outlives a test
// binary or a command that dies without cleaning up. Its stdout and stderr
// are appended to a log file, whose last lines go into the error when it
// exits unexpectedly.
//
//	p, err := proc.Start([]string{"bin/caddy", "run", "--config", cfg},
//		proc.Options{Name: "caddy", Dir: dir, Log: filepath.Join(dir, "caddy.log")})
//	...
//	if err := p.Exited(); err != nil { ... } // died on its own: the error has its log's tail
//	p.Stop(5 * time.Second)                  // SIGTERM, SIGKILL after 5 s, wait
package proc

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configure a process.
type Options struct {
	// Name is how messages call the process ("node2/caddy"). Default: the
	// program's base name.
	Name string
	// Dir is its working directory (default: the parent's).
	Dir string
	// Env is its environment; nil inherits the parent's.
	Env []string
	// Log is the file its stdout and stderr are appended to (created if
	// missing). Required.
	Log string
	// Banner, if set, is written to the log before the process starts:
	// "### BANNER TIME: ARGV", so a log appended to by restarts shows each.
	Banner string
	// TailLines is how many of the log's last lines an unexpected exit
	// reports (default 30).
	TailLines int
}

// Process is one running child process.
type Process struct {
	Name    string
	Argv    []string
	LogFile string

	tailLines int
	cmd       *exec.Cmd
	done      chan struct{}
	waitErr   error // valid once done is closed

	mu      sync.Mutex
	stopped bool // Stop or Kill was called: an exit is expected
}

// Start starts argv with o.
func Start(argv []string, o Options) (*Process, error) {
	if len(argv) == 0 {
		return nil, errors.New("proc: empty command line")
	}
	if o.Log == "" {
		return nil, errors.New("proc: Options.Log is required")
	}
	if o.Name == "" {
		o.Name = argv[0][strings.LastIndexByte(argv[0], '/')+1:]
	}
	if o.TailLines <= 0 {
		o.TailLines = 30
	}
	logf, err := os.OpenFile(o.Log, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy
	if o.Banner != "" {
		fmt.Fprintf(logf, "### %s %s: %s\n", o.Banner, time.Now().Format(time.RFC3339), strings.Join(argv, " "))
	}
	p := &Process{Name: o.Name, Argv: argv, LogFile: o.Log, tailLines: o.TailLines, done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Dir = o.Dir
	p.cmd.Env = o.Env
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", o.Name, err)
	}
	go func() {
		p.waitErr = p.cmd.Wait()
		close(p.done)
	}()
	return p, nil
}

// Pid is the process ID (also its process group ID).
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the process has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Running reports whether the process has not exited yet.
func (p *Process) Running() bool {
	select {
	case <-p.done:
		return false
	default:
		return true
	}
}

// ExitError describes how the process ended, once it has (nil while it
// runs).
func (p *Process) ExitError() error {
	if p.Running() {
		return nil
	}
	if p.waitErr == nil {
		return errors.New("exited with status 0")
	}
	return p.waitErr
}

// Exited returns an error, with the last lines of the log, if the process
// has exited without being told to (Stop or Kill), and nil otherwise.
func (p *Process) Exited() error {
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	if stopped || p.Running() {
		return nil
	}
	return fmt.Errorf("%s exited: %v\n--- %s, last lines ---\n%s", p.Name, p.ExitError(), p.LogFile, p.LogTail(p.tailLines))
}

// Signal sends sig to the process group.
func (p *Process) Signal(sig syscall.Signal) error {
	if !p.Running() {
		return nil
	}
	return syscall.Kill(-p.Pid(), sig)
}

func (p *Process) expectExit() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
}

// Kill sends SIGKILL to the process group (no chance to say goodbye to
// DSHT peers) and waits for the process to be gone.
func (p *Process) Kill() {
	p.expectExit()
	_ = p.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM to the process group, then SIGKILL if the process is
// still there after grace, and waits for it; whatever is left of its group
// (workers that outlived their master) gets SIGKILL too. It returns an
// error if the process needed SIGKILL. Stopping a stopped process does
// nothing.
func (p *Process) Stop(grace time.Duration) error {
	p.expectExit()
	if !p.Running() {
		return nil
	}
	pgid := -p.Pid()
	_ = syscall.Kill(pgid, syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	var err error
	select {
	case <-p.done:
	case <-t.C:
		_ = syscall.Kill(pgid, syscall.SIGKILL)
		<-p.done
		err = fmt.Errorf("%s did not exit within %v of SIGTERM; killed", p.Name, grace)
	}
	_ = syscall.Kill(pgid, syscall.SIGKILL)
	return err
}

// Log returns everything the process logged so far.
func (p *Process) Log() string {
	b, err := os.ReadFile(p.LogFile)
	if err != nil {
		return fmt.Sprintf("(reading %s: %v)", p.LogFile, err)
	}
	return string(b)
}

// LogTail returns the last n lines of the log.
func (p *Process) LogTail(n int) string { return TailLines(p.Log(), n) }

// TailLines returns the last n lines of s.
func TailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
