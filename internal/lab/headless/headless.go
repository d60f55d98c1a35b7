//go:build linux

// Package headless runs Debian's Chromium headless for the tests that
// check pages in a real browser (test/statuspage, test/demonet).
package headless

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// Binary is the path of Chromium, or an error saying how to install it.
func Binary() (string, error) {
	p, err := exec.LookPath("chromium")
	if err != nil {
		return "", fmt.Errorf("chromium missing: run test/statuspage/install-deps.sh as root (make deps)")
	}
	return p, nil
}

// Run runs Chromium headless with args (e.g. "--dump-dom", URL) and a
// fresh profile under dir, and returns its standard output. Chromium's
// helper processes run in a process group of their own, killed whole when
// ctx ends and afterwards, so none outlive the call. As root it needs
// --no-sandbox, which is always given. After Trust(dir, ...), Chromium
// trusts the given CA.
func Run(ctx context.Context, bin, dir string, args ...string) ([]byte, error) {
	all := append([]string{
		"--headless", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
		"--no-first-run", "--no-default-browser-check", "--no-proxy-server",
		"--user-data-dir=" + filepath.Join(dir, "profile"),
	}, args...)
	cmd := exec.CommandContext(ctx, bin, all...)
	cmd.Dir = dir
	if _, err := os.Stat(nssDB(dir)); err == nil {
		cmd.Env = append(os.Environ(), "HOME="+filepath.Join(dir, "home"))
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
	cmd.WaitDelay = 10 * time.Second
	err := cmd.Run()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
	}
	if err != nil {
		return stdout.Bytes(), fmt.Errorf("chromium %s: %v\nstderr (last 3000 bytes):\n%s", strings.Join(args, " "), err, Tail(stderr.String(), 3000))
	}
	return stdout.Bytes(), nil
}

// Trust makes the Chromium runs under dir trust the CA whose root
// certificate (PEM) is in rootFile, as a user does who imports it: on
// Linux Chromium reads trust anchors from the NSS database in
// $HOME/.pki/nssdb, which this creates with NSS's certutil under dir
// (Run then sets HOME). Nothing outside dir changes.
func Trust(dir, name, rootFile string) error {
	certutil, err := exec.LookPath("certutil")
	if err != nil {
		return fmt.Errorf("certutil missing (apt-get install libnss3-tools; make deps): %w", err)
	}
	db := nssDB(dir)
	if err := os.MkdirAll(db, 0o700); err != nil {
		return err
	}
	for _, args := range [][]string{
		{"-N", "-d", "sql:" + db, "--empty-password"},
		{"-A", "-d", "sql:" + db, "-n", name, "-t", "C,,", "-i", rootFile},
	} {
		if out, err := exec.Command(certutil, args...).CombinedOutput(); err != nil {
			return fmt.Errorf("certutil %s: %v: %s", strings.Join(args, " "), err, out)
		}
	}
	return nil
}

func nssDB(dir string) string { return filepath.Join(dir, "home", ".pki", "nssdb") }

// Tail is the last n bytes of s.
func Tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[len(s)-n:]
}
