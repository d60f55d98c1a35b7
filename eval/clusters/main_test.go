package main

import (
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"
)

// TestClustersSmall runs the whole experiment on a small network: nodes
// that start alone end in clusters, late joiners find their site-mates'
// cluster within a period, and the report and maps are written.
func TestClustersSmall(t *testing.T) {
	out := t.TempDir()
	p := params{N: 96, PerSite: 3, Seed: 3, Periods: 3, Stable: time.Hour, Interval: 5 * time.Minute, Joiners: 4, Out: out, Plot: true}
	synctest.Test(t, func(t *testing.T) {
		if _, err := experiment(p, io.Discard); err != nil {
			t.Fatal(err)
		}
	})
	b, err := os.ReadFile(filepath.Join(out, "clusters.json"))
	if err != nil {
		t.Fatal(err)
	}
	var got report
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	if len(got.Periods) != 3 || len(got.Final) != 2 || len(got.Greedy) != 2 || got.N != 92 {
		t.Fatalf("report incomplete: %s", b)
	}
	for _, q := range got.Final {
		if q.NonSingletonOfThose < 0.8 {
			t.Errorf("level %d: only %.0f %% of the nodes with a neighbour are not alone", q.Level, 100*q.NonSingletonOfThose)
		}
	}
	if got.Joiners.Joiners != 4 || got.Joiners.InSiteL2 != 4 {
		t.Errorf("late joiners: %+v", got.Joiners)
	}
	for _, png := range []string{"clusters-level1.png", "clusters-level2.png"} {
		if st, err := os.Stat(filepath.Join(out, png)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", png, err)
		}
	}
}
