package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
)

// TestLookupSmall runs the whole experiment on a small network.
func TestLookupSmall(t *testing.T) {
	out := t.TempDir()
	*flagN, *flagKeys, *flagOut = 60, 40, out
	synctest.Test(t, func(t *testing.T) {
		if err := experiment(); err != nil {
			t.Fatal(err)
		}
	})
	b, err := os.ReadFile(filepath.Join(out, "lookup.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if rep.Static.Ops != 40 || rep.Static.Success < 0.99 {
		t.Fatalf("static gets: %+v", rep.Static)
	}
	if len(rep.Churn) != 3 || rep.Churn[2].Killed != 6 {
		t.Fatalf("churn runs: %s", b)
	}
	if st, err := os.Stat(filepath.Join(out, "lookup.png")); err != nil || st.Size() == 0 {
		t.Fatalf("lookup.png: %v", err)
	}
}
