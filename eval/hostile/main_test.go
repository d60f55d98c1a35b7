package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coralcdn/coral/eval/internal/evaltest"
	"github.com/coralcdn/coral/internal/lab/hostilelab"
)

// TestOutCreatesDir (issue 37): `go run ./eval/hostile -out DIR` writes
// hostile.json into DIR, making it (and its parents) when it is not there
// yet, instead of running every class and then failing to write. One class
// for a moment against the real bin/caddy.
func TestOutCreatesDir(t *testing.T) {
	bin := evaltest.LabBinary(t, "caddy")
	out := filepath.Join(t.TempDir(), "new", "results")
	broken, err := run(context.Background(), binaries{caddy: bin}, 1, 300*time.Millisecond, "headers", hostilelab.DefaultCacheSize, "127.0.93", out, false)
	if err != nil {
		t.Fatalf("run: %v", err)
	}
	b, err := os.ReadFile(filepath.Join(out, "hostile.json"))
	if err != nil {
		t.Fatalf("no hostile.json in the new directory: %v", err)
	}
	var rep struct {
		Broken int `json:"classes_broken"`
	}
	if err := json.Unmarshal(b, &rep); err != nil || rep.Broken != broken {
		t.Errorf("hostile.json: %v, broken %d (run said %d)", err, rep.Broken, broken)
	}
}
