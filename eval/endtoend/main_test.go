package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"testing/synctest"
	"time"
)

// TestEndToEndSmall runs the whole experiment on a small network: every
// configuration and variant serves its requests, the traceroute
// configuration hands clients beside a proxy that proxy, and the report
// and figures are written.
func TestEndToEndSmall(t *testing.T) {
	p := defaultParams()
	p.N, p.Warmup, p.Duration, p.Jitter, p.Out = 30, 10*time.Minute, 2*time.Minute, 30*time.Second, t.TempDir()
	synctest.Test(t, func(t *testing.T) {
		if _, err := experiment(p); err != nil {
			t.Fatal(err)
		}
	})
	b, err := os.ReadFile(filepath.Join(p.Out, "endtoend.json"))
	if err != nil {
		t.Fatal(err)
	}
	var rep report
	if err := json.Unmarshal(b, &rep); err != nil {
		t.Fatal(err)
	}
	if len(rep.Results) != len(configs)*len(variants) {
		t.Fatalf("%d results, want %d", len(rep.Results), len(configs)*len(variants))
	}
	for _, r := range rep.Results {
		if r.Requests == 0 || r.Failed*10 > r.Requests || r.AllP50 <= 0 || r.Sources[fromOrigin] == 0 {
			t.Errorf("%s, %s: %d requests, %d failed, p50 %v, sources %v", r.Config, r.Variant, r.Requests, r.Failed, r.AllP50, r.Sources)
		}
	}
	tr := find(&rep, configs[2], variants[0])
	if tr.SameSiteShare < 0.8 {
		t.Errorf("traceroute, clients beside a proxy: %.0f%% at the client's site, want most", 100*tr.SameSiteShare)
	}
	for _, f := range []string{"endtoend.png", "endtoend-region.png"} {
		if st, err := os.Stat(filepath.Join(p.Out, f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
}
