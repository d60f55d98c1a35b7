package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/coralcdn/coral/internal/lab/labconf"
)

// repoRoot is the repository around the test's working directory.
func repoRoot(t *testing.T) string {
	t.Helper()
	root, err := labconf.RepoRoot(".")
	if err != nil {
		t.Fatal(err)
	}
	return root
}

// repoFile is the path of a file of the repository, given relative to its
// root.
func repoFile(t *testing.T, rel string) string {
	return filepath.Join(repoRoot(t), filepath.FromSlash(rel))
}

// needTool returns the path of a command, or skips the test when it is
// not installed (`make deps` installs what test/deploy needs); with
// CI=true a missing tool fails the test.
func needTool(t *testing.T, name, from string) string {
	t.Helper()
	path, err := exec.LookPath(name)
	if err == nil {
		return path
	}
	msg := name + " is not installed (" + from + ")"
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "; CI=true, so this is a failure, not a skip")
	}
	t.Skip(msg)
	return ""
}

// systemdAnalyze returns the path of systemd-analyze, or skips the test
// where it is absent (a machine without systemd), CI included: nothing
// installs it for a test.
func systemdAnalyze(t *testing.T) string {
	t.Helper()
	path, err := exec.LookPath("systemd-analyze")
	if err != nil {
		t.Skip("systemd-analyze is not installed (Debian package systemd)")
	}
	return path
}

// runOut runs a command and returns its combined output, failing the test
// when it does not exit 0.
func runOut(t *testing.T, dir string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %q: %v\n%s", name, args, err, out)
	}
	return string(out)
}
