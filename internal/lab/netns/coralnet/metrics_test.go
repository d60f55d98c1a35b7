//go:build linux

package coralnet

import (
	"strings"
	"testing"
)

func TestParseMetrics(t *testing.T) {
	text := `# HELP caddy_coral_peer_fetches_total Fetches from peer proxies.
# TYPE caddy_coral_peer_fetches_total counter
caddy_coral_peer_fetches_total{outcome="ok"} 12
caddy_coral_peer_fetches_total{outcome="timeout"} 2
caddy_coral_peer_fetches_total_extra{outcome="ok"} 99
caddy_coral_peer_fetches_total{outcome="error"} 1e1
caddy_coral_peer_fetches_total{outcome="bad"} 
coredns_coral_live_proxies 4
`
	got, err := ParseMetrics(strings.NewReader(text), "caddy_coral_peer_fetches_total")
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]float64{`outcome="ok"`: 12, `outcome="timeout"`: 2, `outcome="error"`: 10}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: %v, want %v", k, got[k], v)
		}
	}
	live, _ := ParseMetrics(strings.NewReader(text), "coredns_coral_live_proxies")
	if live[""] != 4 {
		t.Errorf("unlabelled sample: %v", live)
	}
}

func FuzzParseMetrics(f *testing.F) {
	f.Add("caddy_coral_peer_fetches_total{outcome=\"ok\"} 12\n", "caddy_coral_peer_fetches_total")
	f.Add("x{} \nx 1 1700000000\nx{a=\"}\"} 2\n", "x")
	f.Fuzz(func(t *testing.T, text, name string) {
		m, _ := ParseMetrics(strings.NewReader(text), name)
		if name == "" {
			return
		}
		for labels := range m {
			if strings.Contains(labels, "\n") {
				t.Fatalf("labels %q span lines", labels)
			}
		}
	})
}
