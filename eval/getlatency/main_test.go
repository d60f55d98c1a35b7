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
	if pv := rep.Provenance; pv == nil || pv.Program != "eval/getlatency" || pv.Finished == "" || rep.Workload != workPaper {
		t.Fatalf("provenance %+v, workload %q", pv, rep.Workload)
	}
}

// TestZipfWorkload: few putters per key, gets drawn by popularity, never
// for a key the getter put.
func TestZipfWorkload(t *testing.T) {
	p := defaultParams()
	p.Workload, p.Keys, p.Putters, p.GetsPerNode = workZipf, 200, 3, 50
	w := newWorkload(p, 100)
	counts := make([]int, p.Keys)
	for k, ps := range w.putters {
		if len(ps) != 3 {
			t.Fatalf("key %d: %d putters", k, len(ps))
		}
	}
	for i, gs := range w.gets {
		for _, g := range gs {
			counts[g.key]++
			for _, pi := range w.putters[g.key] {
				if pi == i {
					t.Fatalf("node %d gets key %d, which it put", i, g.key)
				}
			}
		}
	}
	if counts[0] < 5*counts[50] || counts[0] < 200 {
		t.Errorf("gets of key 0: %d, of key 50: %d; want key 0 far more popular", counts[0], counts[50])
	}
}

func TestGetLatencyZipfSmall(t *testing.T) {
	p := defaultParams()
	p.N, p.Keys, p.GetsPerNode, p.Spread, p.Warmup, p.Out = 60, 40, 3, time.Minute, 10*time.Minute, t.TempDir()
	p.Workload, p.Name, p.Topology = workZipf, "gl-zipf", "synthetic"
	synctest.Test(t, func(t *testing.T) {
		if _, err := experiment(p); err != nil {
			t.Fatal(err)
		}
	})
	b, err := os.ReadFile(filepath.Join(p.Out, "gl-zipf.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Workload != workZipf || rep.Putters != 3 || rep.Multi == nil || rep.Multi.Gets != 60*3 || rep.Multi.Puts != 40*3 {
		t.Fatalf("report: %s", b)
	}
}
