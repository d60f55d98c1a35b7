//go:build linux

package nodelab

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"testing"
	"time"
)

// TestDrainMakesReady503 (issue 36, finding 4): with the ready plugin as
// the repository's Corefiles ship it (`monitor continuously`), a node that
// drains says 503 on /ready, and 200 again when the drain ends. With
// CoreDNS's default (`monitor until-ready`) the ready plugin stops asking
// once every plugin was ready, so a drain does not show: the behaviour
// the plugin README documents, and why the shipped Corefiles say
// continuously.
func TestDrainMakesReady503(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	_, d2, d3, _, _, _ := startLab(t, ctx, true)
	waitFor(t, "d3 ready", 30*time.Second, func() error {
		if code, err := readyStatus(d3.addr); err != nil || code != http.StatusOK {
			return fmt.Errorf("%d %v", code, err)
		}
		return nil
	})
	for _, d := range []*server{d2, d3} {
		if err := os.WriteFile(filepath.Join(d.dir, "drain"), nil, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, "d2 (monitor continuously) says 503 while draining", 10*time.Second, func() error {
		if code, err := readyStatus(d2.addr); err != nil || code != http.StatusServiceUnavailable {
			return fmt.Errorf("%d %v", code, err)
		}
		return nil
	})
	if code, err := readyStatus(d3.addr); err != nil || code != http.StatusOK {
		t.Errorf("d3 (CoreDNS's default, until-ready) while draining: %d %v; the README says it stays 200", code, err)
	}
	if err := os.Remove(filepath.Join(d2.dir, "drain")); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "d2 ready again after the drain", 30*time.Second, func() error {
		if code, err := readyStatus(d2.addr); err != nil || code != http.StatusOK {
			return fmt.Errorf("%d %v", code, err)
		}
		return nil
	})
}
