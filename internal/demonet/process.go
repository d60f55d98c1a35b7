//go:build linux

package demonet

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

// Process is one child process (bin/coredns or bin/caddy) with its output
// captured to a log file. It runs in a process group of its own, so a
// terminal's Ctrl-C reaches only the demo, which then stops it in order;
// and it gets SIGKILL if the demo itself dies.
type Process struct {
	Name    string // "node2/caddy"
	Argv    []string
	LogFile string

	cmd     *exec.Cmd
	done    chan struct{}
	waitErr error // valid once done is closed

	mu      sync.Mutex
	stopped bool // Stop or Kill was called: an exit is expected
}

// startProcess starts argv in dir with its stdout and stderr appended to
// logFile.
func startProcess(name, dir, logFile string, env []string, argv ...string) (*Process, error) {
	logf, err := os.OpenFile(logFile, os.O_WRONLY|os.O_CREATE|os.O_APPEND, 0o644)
	if err != nil {
		return nil, err
	}
	defer logf.Close() // the child has its own copy
	fmt.Fprintf(logf, "### demonet %s: %s\n", time.Now().Format(time.RFC3339), strings.Join(argv, " "))
	p := &Process{Name: name, Argv: argv, LogFile: logFile, done: make(chan struct{})}
	p.cmd = exec.Command(argv[0], argv[1:]...)
	p.cmd.Dir = dir
	p.cmd.Env = env
	p.cmd.Stdout, p.cmd.Stderr = logf, logf
	p.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := p.cmd.Start(); err != nil {
		return nil, fmt.Errorf("%s: %w", name, err)
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

// ExitError describes how the process ended, once it has.
func (p *Process) ExitError() error {
	if p.Running() {
		return nil
	}
	if p.waitErr == nil {
		return errors.New("exited with status 0")
	}
	return p.waitErr
}

// unexpectedExit returns an error if the process exited without being
// told to.
func (p *Process) unexpectedExit() error {
	p.mu.Lock()
	stopped := p.stopped
	p.mu.Unlock()
	if stopped || p.Running() {
		return nil
	}
	return fmt.Errorf("%s exited: %v\n--- %s, last lines ---\n%s", p.Name, p.ExitError(), p.LogFile, p.LogTail(30))
}

// Signal sends sig to the process group.
func (p *Process) Signal(sig syscall.Signal) error {
	if !p.Running() {
		return nil
	}
	return syscall.Kill(-p.Pid(), sig)
}

// Kill sends SIGKILL (the process gets no chance to say goodbye to its
// DSHT peers) and waits for it to be gone.
func (p *Process) Kill() {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	_ = p.Signal(syscall.SIGKILL)
	<-p.done
}

// Stop sends SIGTERM, then SIGKILL if the process is still there after
// grace, and waits for it. It returns an error if it needed SIGKILL.
func (p *Process) Stop(grace time.Duration) error {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	if !p.Running() {
		return nil
	}
	_ = p.Signal(syscall.SIGTERM)
	t := time.NewTimer(grace)
	defer t.Stop()
	select {
	case <-p.done:
		return nil
	case <-t.C:
	}
	_ = p.Signal(syscall.SIGKILL)
	<-p.done
	return fmt.Errorf("%s did not exit within %v of SIGTERM; killed", p.Name, grace)
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
func (p *Process) LogTail(n int) string { return tailLines(p.Log(), n) }

func tailLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
