// Package evaltest is what the end-to-end tests of the eval commands share.
package evaltest

import (
	"os"
	"os/exec"
	"path/filepath"
	"testing"
)

// LabBinary is for a test in eval/PROG that runs the repository's
// bin/NAME and the given tools from PATH. It skips the test under -short,
// and when bin/NAME has not been built (make NAME) or a tool is missing
// (make deps installs them); under CI=true, where make test builds and
// installs them all first, a missing one fails the test instead of
// passing it unseen. Otherwise it returns bin/NAME's absolute path.
func LabBinary(t testing.TB, name string, tools ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: starts bin/%s and %v", name, tools)
	}
	missing := t.Skipf
	if os.Getenv("CI") == "true" {
		missing = t.Fatalf
	}
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		missing("no bin/%s (make %s)", name, name)
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			missing("no %s (make deps)", tool)
		}
	}
	return bin
}
