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
	p.Name, p.Window, p.Topology = "e2e-small", time.Minute, "synthetic"
	synctest.Test(t, func(t *testing.T) {
		if _, err := experiment(p); err != nil {
			t.Fatal(err)
		}
	})
	b, err := os.ReadFile(filepath.Join(p.Out, "e2e-small.json"))
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
	if pv := rep.Provenance; pv == nil || pv.Program != "eval/endtoend" || pv.Topology != "synthetic" || pv.Finished == "" {
		t.Errorf("provenance: %+v", pv)
	}
	for _, r := range rep.Results {
		// 30 s of starts and 2 minutes of requests: 3 windows of a minute.
		served := 0
		for _, n := range r.Sources {
			served += n
		}
		if len(r.Windows) != 3 || len(r.Cumulative) != 3 || r.Cumulative[2].Requests != served || served == 0 {
			t.Errorf("%s, %s: windows %+v, cumulative %+v", r.Config, r.Variant, r.Windows, r.Cumulative)
		}
	}
	if len(rep.Ratios) != len(variants)*3 || rep.Ratios[1].Of != configs[0] || rep.Ratios[1].Over != configs[2] || rep.Ratios[1].Whole != rep.Ratio {
		t.Errorf("ratios: %+v (single over traceroute %v)", rep.Ratios, rep.Ratio)
	}
	if st := rep.StartupTraces["multi-level"]; st.Traces != p.N || st.Kinds[kindGateway] == 0 {
		t.Errorf("start-up traces of the multi-level network: %+v", st)
	}
	if tr.Traces["complete"]+tr.Traces["timed out: silent router"] == 0 {
		t.Errorf("traceroute configuration: no trace counted: %v", tr.Traces)
	}
	for _, f := range []string{"e2e-small.png", "e2e-small-region.png"} {
		if st, err := os.Stat(filepath.Join(p.Out, f)); err != nil || st.Size() == 0 {
			t.Fatalf("%s: %v", f, err)
		}
	}
}
