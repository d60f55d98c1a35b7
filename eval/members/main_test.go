package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"
)

// TestMembersSmall runs every attack at one fraction on a small network:
// the defences must hold there too (the targets at 5 %), and the attacks
// must do harm without them, or the experiment measures nothing.
func TestMembersSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("runs 8 simulated networks")
	}
	out := t.TempDir()
	*flagN, *flagKeys, *flagDuration, *flagFractions, *flagOut = 60, 20, time.Minute, "0.05", out
	synctest.Test(t, func(t *testing.T) {
		if err := experiment(); err != nil {
			t.Fatal(err)
		}
	})
	b, err := os.ReadFile(filepath.Join(out, "members.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != 8 {
		t.Fatalf("%d results, want 4 attacks × before, after", len(rep.Results))
	}
	for k, ok := range rep.Targets {
		if ok != true {
			t.Errorf("target missed: %s", k)
		}
	}
	for _, r := range rep.Results {
		if r.Mode != "before" {
			continue
		}
		switch r.Attack {
		case "eclipse", "claims":
			if r.Available > 0.9 || r.HonestShare > 0.5 {
				t.Errorf("%s did no harm without the defences: %+v", r.Attack, r)
			}
		case "reflection":
			if r.Amplification <= 1 {
				t.Errorf("reflection did not amplify without the defences: %.2f", r.Amplification)
			}
		}
	}
	if st, err := os.Stat(filepath.Join(out, "members.png")); err != nil || st.Size() == 0 {
		t.Fatalf("members.png: %v", err)
	}
}
