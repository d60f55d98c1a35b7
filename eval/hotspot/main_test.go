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
	if pv := rep.Provenance; pv == nil || pv.Program != "eval/hotspot" || pv.Finished == "" || rep.Workload != workPaper {
		t.Fatalf("provenance %+v, workload %q", pv, rep.Workload)
	}
	if b := rep.Busiest; b == nil || b.Keys != 2 || b.Max < b.Min || b.Max != max(rep.Repeats[0].Run.MaxSteady, rep.Repeats[1].Run.MaxSteady) {
		t.Fatalf("busiest summary %+v", rep.Busiest)
	}
	for _, rp := range rep.Repeats {
		top := rp.Run.TopByKey[0]
		if len(top) != topNodes || top[0].Load != rp.Run.BusiestByKey[0] || top[0].Rank != rp.Run.BusiestRank[0] || top[1].Load > top[0].Load {
			t.Fatalf("seed %d: top nodes %+v, busiest %v (rank %d)", rp.Seed, top, rp.Run.BusiestByKey, rp.Run.BusiestRank)
		}
	}
	if len(rep.Plains) != 1 || rep.PlainOverBusiest["synthetic"] <= 1 {
		t.Fatalf("plain runs %d, plain over busiest %v", len(rep.Plains), rep.PlainOverBusiest)
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

// TestHotspotZipf runs the Zipf workload on a small network: every key
// has values, the most popular key is drawn most, and the loads are
// counted per node and key.
func TestHotspotZipf(t *testing.T) {
	out := t.TempDir()
	saved := []any{*flagN, *flagMinutes, *flagOut, *flagName, *flagWork, *flagSeeds, *flagTopos, *flagZipfKeys, *flagPutters}
	defer func() {
		*flagN, *flagMinutes, *flagOut, *flagName, *flagWork = saved[0].(int), saved[1].(int), saved[2].(string), saved[3].(string), saved[4].(string)
		*flagSeeds, *flagTopos, *flagZipfKeys, *flagPutters = saved[5].(string), saved[6].(string), saved[7].(int), saved[8].(int)
	}()
	*flagN, *flagMinutes, *flagOut, *flagName, *flagWork = 40, 2, out, "hs-zipf", workZipf
	*flagSeeds, *flagTopos, *flagZipfKeys, *flagPutters = "1", "synthetic", 50, 2
	synctest.Test(t, func(t *testing.T) {
		if err := experiment(nil); err != nil {
			t.Fatal(err)
		}
	})
	b, err := os.ReadFile(filepath.Join(out, "hs-zipf.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Workload != workZipf || len(rep.Zipf) != 1 || rep.Coral != nil {
		t.Fatalf("report: workload %q, %d Zipf runs, paper run %v", rep.Workload, len(rep.Zipf), rep.Coral != nil)
	}
	r := rep.Zipf[0]
	if r.Gets == 0 || r.Puts == 0 || r.GetFails*10 > r.Gets || len(r.Loads) != 40 || r.Loads[0] != r.NodeLoad.Max {
		t.Fatalf("run: %d gets (%d failed), %d puts, loads %v, max %v", r.Gets, r.GetFails, r.Puts, r.Loads, r.NodeLoad.Max)
	}
	if len(r.Hottest) != 3 || r.Hottest[0].Share <= r.Hottest[2].Share || r.MaxGetPair <= 0 || r.Hottest[0].BusiestGets+r.Hottest[0].BusiestPuts <= 0 {
		t.Fatalf("hottest keys %+v, max get pair %v", r.Hottest, r.MaxGetPair)
	}
	if st, err := os.Stat(filepath.Join(out, "hs-zipf.png")); err != nil || st.Size() == 0 {
		t.Fatalf("hs-zipf.png: %v", err)
	}
}
