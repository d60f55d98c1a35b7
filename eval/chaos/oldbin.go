//go:build linux

package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"github.com/coralcdn/coral/internal/lab/labconf"
)

// oldBinaries returns the directory holding bin/coredns and bin/caddy of
// commit, building them the first time: a detached git worktree of the
// commit under the user cache directory, its own builds/ scripts (so the
// binaries are what that release built), the two binaries copied to
// <cache>/coral-chaos/<full commit>/bin, the worktree removed.
func oldBinaries(ctx context.Context, commit string, logf func(string, ...any)) (string, error) {
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	repo, err := labconf.RepoRoot(wd)
	if err != nil {
		return "", err
	}
	out, err := exec.CommandContext(ctx, "git", "-C", repo, "rev-parse", "--verify", commit+"^{commit}").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse %s: %w", commit, err)
	}
	full := strings.TrimSpace(string(out))
	cache, err := os.UserCacheDir()
	if err != nil {
		return "", err
	}
	dir := filepath.Join(cache, "coral-chaos", full)
	bin := filepath.Join(dir, "bin")
	if have(bin) {
		return bin, nil
	}
	src := filepath.Join(dir, "src")
	logf("building the binaries of %s in %s (once; minutes)", full[:12], src)
	if _, err := os.Stat(src); err != nil {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return "", err
		}
		if out, err := exec.CommandContext(ctx, "git", "-C", repo, "worktree", "add", "--detach", src, full).CombinedOutput(); err != nil {
			return "", fmt.Errorf("git worktree add: %v: %s", err, out)
		}
	}
	for _, script := range []string{"builds/coredns/build.sh", "builds/caddy/build.sh"} {
		cmd := exec.CommandContext(ctx, "bash", script)
		cmd.Dir = src
		if out, err := cmd.CombinedOutput(); err != nil {
			return "", fmt.Errorf("%s at %s: %v: %s", script, full[:12], err, tail(string(out)))
		}
	}
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return "", err
	}
	for _, name := range []string{"coredns", "caddy"} {
		if out, err := exec.Command("cp", filepath.Join(src, "bin", name), filepath.Join(bin, name+".tmp")).CombinedOutput(); err != nil {
			return "", fmt.Errorf("cp: %v: %s", err, out)
		}
		if err := os.Rename(filepath.Join(bin, name+".tmp"), filepath.Join(bin, name)); err != nil {
			return "", err
		}
	}
	if out, err := exec.Command("git", "-C", repo, "worktree", "remove", "--force", src).CombinedOutput(); err != nil {
		logf("git worktree remove %s: %v: %s", src, err, out)
	}
	return bin, nil
}

// have reports whether dir holds both binaries.
func have(dir string) bool {
	for _, name := range []string{"coredns", "caddy"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

func tail(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(0, len(lines)-20):], "\n")
}
