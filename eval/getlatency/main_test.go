package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"
)

// TestGetLatencySmall runs the whole experiment on a small network: both
// networks serve gets and the report and figure are written.
func TestGetLatencySmall(t *testing.T) {
	p := defaultParams()
	p.N, p.Keys, p.GetsPerNode, p.Spread, p.Warmup, p.Out = 60, 4, 3, time.Minute, 10*time.Minute, t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		if _, err := experiment(p); err != nil {
			t.Fatal(err)
		}
	})
	b, err := os.ReadFile(filepath.Join(p.Out, "getlatency.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	for _, r := range []*netResult{rep.Single, rep.Multi} {
		if r == nil || r.Gets != 60*3 || r.Failed == r.Gets || len(r.LatPercentiles) != 101 {
			t.Fatalf("network result incomplete: %s", b)
		}
	}
	if rep.Single.Levels != 1 || rep.Multi.Levels != 3 || len(rep.Multi.Clusters) != 2 {
		t.Fatalf("levels: single %d, multi %d with %d cluster levels", rep.Single.Levels, rep.Multi.Levels, len(rep.Multi.Clusters))
	}
	if st, err := os.Stat(filepath.Join(p.Out, "getlatency.png")); err != nil || st.Size() == 0 {
		t.Fatalf("getlatency.png: %v", err)
	}
}
