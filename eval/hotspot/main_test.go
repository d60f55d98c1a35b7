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
	if rep.Plain.ClosestSteady < 3*rep.Coral.ClosestSteady {
		t.Fatalf("plain DHT's closest node %.0f/min is not well above Coral's %.0f/min", rep.Plain.ClosestSteady, rep.Coral.ClosestSteady)
	}
	for _, png := range []string{"hotspot.png", "hotspot-sweep.png"} {
		if st, err := os.Stat(filepath.Join(out, png)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", png, err)
		}
	}
}
