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
// when bin/NAME has not been built (make NAME) and when a tool is missing
// (make deps installs them), and otherwise returns bin/NAME's absolute
// path.
func LabBinary(t testing.TB, name string, tools ...string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("-short: starts bin/%s and %v", name, tools)
	}
	bin, err := filepath.Abs(filepath.Join("..", "..", "bin", name))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(bin); err != nil {
		t.Skipf("no bin/%s (make %s)", name, name)
	}
	for _, tool := range tools {
		if _, err := exec.LookPath(tool); err != nil {
			t.Skipf("no %s (make deps)", tool)
		}
	}
	return bin
}
