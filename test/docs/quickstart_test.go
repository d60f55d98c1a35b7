package docs

import (
	"context"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"
)

// TestQuickStartDemo runs the README's quick start the one way a test
// can: `make demo` runs until Ctrl-C, so this runs `make demo
// DEMO_SMOKE=1`, the same demo, which runs each command it would print for
// a reader once, checks what it shows, and exits 0 or 1. Needs root, as
// the README says (Unbound, the demo's addresses).
func TestQuickStartDemo(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("the quick start needs root; CI=true, so this is a failure")
		}
		t.Skip("the quick start needs root")
	}
	binary(t, "caddy")
	binary(t, "coredns")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "make", "demo", "DEMO_SMOKE=1")
	cmd.Dir = repoRoot(t)
	cmd.Env = readerEnv(t, t.TempDir())
	start := time.Now()
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("make demo DEMO_SMOKE=1: %v\n%s", err, out)
	}
	t.Logf("make demo DEMO_SMOKE=1 passed in %v", time.Since(start).Round(time.Second))
	if !strings.Contains(string(out), "dig") || !strings.Contains(string(out), "curl") {
		t.Errorf("the demo shows no dig or curl commands:\n%s", out)
	}
}
