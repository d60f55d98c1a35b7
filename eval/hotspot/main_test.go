package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
)

// TestHotspotSmall runs the whole experiment on a small network: the
// program works end to end and the comparison points the right way.
func TestHotspotSmall(t *testing.T) {
	out := t.TempDir()
	*flagN, *flagMinutes, *flagKeys, *flagOut, *flagPlain = 48, 2, 1, out, true
	*flagSeeds, *flagTopos = "1 2", "synthetic"
	*flagTrace = 2
	defer func() { *flagTrace = 0 }()
	synctest.Test(t, func(t *testing.T) {
		if err := experiment([]int{32, 48}); err != nil {
			t.Fatal(err)
		}
	})
	b, err := os.ReadFile(filepath.Join(out, "hotspot.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Coral == nil || rep.Plain == nil || len(rep.Sweep) != 2 {
		t.Fatalf("report incomplete: %s", b)
	}
	if rep.Coral.Pairs == 0 || rep.Coral.ClosestSteady <= 0 {
		t.Fatalf("no load measured: %+v", rep.Coral)
	}
	if len(rep.Repeats) != 2 || rep.Repeats[1].Seed != 2 || rep.Repeats[1].Topology != "synthetic" {
		t.Fatalf("repeats: %s", b)
	}
	for _, rp := range rep.Repeats {
		r := rp.Run
		if len(r.BusiestByKey) != 1 || r.BusiestByKey[0] < r.ClosestByKey[0] || r.BusiestByKey[0] != r.MaxSteady {
			t.Fatalf("seed %d: busiest per key %v, closest %v, max %v", rp.Seed, r.BusiestByKey, r.ClosestByKey, r.MaxSteady)
		}
	}
	if rep.SweepBusiestGrow <= 0 || rep.SweepLogGrow <= 1 {
		t.Fatalf("sweep growth not reported: busiest %v, log2 %v", rep.SweepBusiestGrow, rep.SweepLogGrow)
	}
	if rep.Plain.ClosestSteady < 3*rep.Coral.ClosestSteady {
		t.Fatalf("plain DHT's closest node %.0f/min is not well above Coral's %.0f/min", rep.Plain.ClosestSteady, rep.Coral.ClosestSteady)
	}
	for _, png := range []string{"hotspot.png", "hotspot-sweep.png", "hotspot-seeds.png"} {
		if st, err := os.Stat(filepath.Join(out, png)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", png, err)
		}
	}
}
