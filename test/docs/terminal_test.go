package docs

import (
	"bufio"
	"fmt"
	"io"
	"os"
	"os/exec"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/portguard"
)

// terminal is a bash into which commands are pasted the way a reader
// pastes them: one complete command at a time (a line, or several when
// the first leaves a quote or a continuation open), the next once the
// previous has returned. A command that ends with & is a server started
// in the background: the next one waits until it listens, as a reader
// waits for its banner. Each command's output is kept; a command that
// exits non-zero fails the test.
type terminal struct {
	t      *testing.T
	cmd    *exec.Cmd
	stdin  io.WriteCloser
	lines  chan string // output, line by line
	done   chan struct{}
	output strings.Builder // everything, for failure messages
}

// commandTimeout bounds one command: the longest in the docs wait a minute
// for something (the walk-through's readiness loops).
const commandTimeout = 3 * time.Minute

// newTerminal starts bash in dir with env (nil: the test's), under argv0
// (e.g. unshare ... for a mount namespace of its own). It is killed, with
// everything it started, at the end of the test.
func newTerminal(t *testing.T, dir string, env []string, prefix ...string) *terminal {
	t.Helper()
	argv := append(prefix, "bash", "--norc", "--noprofile")
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Dir = dir
	cmd.Env = env
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stdout, cmd.Stderr = w, w
	stdin, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	term := &terminal{t: t, cmd: cmd, stdin: stdin, lines: make(chan string, 1024), done: make(chan struct{})}
	go func() {
		defer close(term.lines)
		sc := bufio.NewScanner(r)
		sc.Buffer(make([]byte, 64<<10), 4<<20)
		for sc.Scan() {
			term.lines <- sc.Text()
		}
	}()
	t.Cleanup(term.close)
	term.send("set -o pipefail")
	return term
}

// close kills the terminal's process group: the shell and what it started
// in the background.
func (term *terminal) close() {
	_ = term.stdin.Close()
	_ = syscall.Kill(-term.cmd.Process.Pid, syscall.SIGKILL)
	_ = term.cmd.Wait()
}

var doneLine = regexp.MustCompile(`^@@done ([0-9]+) ([0-9]*)@@$`)

// send runs one complete command and returns its output, its exit status
// and, after a command that ends with &, the background process's ID.
func (term *terminal) send(command string) (out string, status, bg int) {
	term.t.Helper()
	fmt.Fprintf(term.stdin, "%s\nprintf '\\n@@done %%d %%s@@\\n' \"$?\" \"${!:-}\"\n", command)
	var b strings.Builder
	timeout := time.After(commandTimeout)
	for {
		select {
		case line, ok := <-term.lines:
			if !ok {
				term.t.Fatalf("the shell exited during %q\n%s%s", command, term.output.String(), b.String())
			}
			if m := doneLine.FindStringSubmatch(line); m != nil {
				status, _ = strconv.Atoi(m[1])
				bg, _ = strconv.Atoi(m[2])
				out = strings.TrimSuffix(b.String(), "\n")
				term.output.WriteString(out)
				return out, status, bg
			}
			b.WriteString(line + "\n")
		case <-timeout:
			term.t.Fatalf("%q did not return within %v\n%s%s", command, commandTimeout, term.output.String(), b.String())
		}
	}
}

// run pastes script's commands one at a time and returns their outputs.
// Comment lines and blank lines are skipped, as a reader skips them.
func (term *terminal) run(what, script string) []string {
	term.t.Helper()
	var outs []string
	for _, c := range commands(term.t, script) {
		term.output.WriteString("$ " + c + "\n")
		out, status, bg := term.send(c)
		outs = append(outs, out)
		if status != 0 {
			term.t.Fatalf("%s: %q exited %d\n--- terminal\n%s", what, c, status, term.output.String())
		}
		if isBackground(c) {
			term.waitListening(c, bg)
		}
	}
	return outs
}

// isBackground reports whether a command ends with a lone &.
func isBackground(c string) bool {
	c = strings.TrimSpace(stripComment(c))
	return strings.HasSuffix(c, "&") && !strings.HasSuffix(c, "&&")
}

// stripComment drops a trailing " # comment" outside quotes, roughly: good
// enough for the docs' one-line commands.
func stripComment(c string) string {
	inSingle, inDouble := false, false
	for i, r := range c {
		switch {
		case r == '\'' && !inDouble:
			inSingle = !inSingle
		case r == '"' && !inSingle:
			inDouble = !inDouble
		case r == '#' && !inSingle && !inDouble && (i == 0 || c[i-1] == ' ' || c[i-1] == '\t'):
			return c[:i]
		}
	}
	return c
}

// waitListening waits until process pid serves a socket (a TCP listener
// or a bound UDP socket), for at most 30 s.
func (term *terminal) waitListening(command string, pid int) {
	term.t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		socks, err := portguard.Of(pid)
		if err == nil && len(socks) > 0 {
			return
		}
		if syscall.Kill(pid, 0) != nil {
			term.t.Fatalf("%q: the background process %d is gone\n%s", command, pid, term.output.String())
		}
		if time.Now().After(deadline) {
			term.t.Fatalf("%q: process %d serves no socket after 30 s (%v)\n%s", command, pid, err, term.output.String())
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// commands splits a script into complete commands: a line, joined with the
// next while it ends in a backslash or does not parse on its own (an open
// quote or block). Blank and comment-only lines are left out.
func commands(t *testing.T, script string) []string {
	t.Helper()
	var out []string
	var acc []string
	for _, line := range strings.Split(script, "\n") {
		if len(acc) == 0 && (strings.TrimSpace(line) == "" || strings.HasPrefix(strings.TrimSpace(line), "#")) {
			continue
		}
		acc = append(acc, line)
		text := strings.Join(acc, "\n")
		if strings.HasSuffix(line, "\\") || exec.Command("bash", "-n", "-c", text).Run() != nil {
			continue
		}
		out = append(out, text)
		acc = nil
	}
	if len(acc) > 0 {
		t.Fatalf("an incomplete command at the end of the block:\n%s", strings.Join(acc, "\n"))
	}
	return out
}
