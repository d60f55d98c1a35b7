//go:build linux

package nodelab

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/eval/labresult"
)

// startLab starts D1, D2 and P1 (D3 with ready) and waits until both name
// servers answer the Coralized name with P1 and say they are ready.
func startLab(t *testing.T, ctx context.Context, withD3 bool) (d1, d2, d3, p1 *server, n1 *dnsNode, c1 *caddyNode) {
	t.Helper()
	coredns, caddy := binary(t, "coredns"), binary(t, "caddy")
	mk := func(name string, addr netip.Addr, bin string) *server {
		dir := filepath.Join(t.TempDir(), name)
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return &server{name: name, addr: addr, dir: dir, bin: bin}
	}
	n1 = &dnsNode{stateDir: true, ready: "continuously"}
	n2 := &dnsNode{boot: []netip.Addr{addrD1}, stateDir: true, ready: "continuously"}
	c1 = &caddyNode{}
	d1, d2, p1 = mk("d1", addrD1, coredns), mk("d2", addrD2, coredns), mk("p1", addrP1, caddy)
	d1.write = func(s *server) ([]string, []string) { return s.corefile(n1), nil }
	d2.write = func(s *server) ([]string, []string) { return s.corefile(n2), nil }
	p1.write = func(s *server) ([]string, []string) { return s.caddyfile(c1) }
	servers := []*server{d1, d2, p1}
	if withD3 {
		n3 := &dnsNode{boot: []netip.Addr{addrD1}, ready: ""}
		d3 = mk("d3", addrD3, coredns)
		d3.write = func(s *server) ([]string, []string) { return s.corefile(n3), nil }
		servers = append(servers, d3)
	}
	for _, s := range servers {
		s.start(t)
		t.Cleanup(func() {
			s.proc.Kill()
			if t.Failed() {
				t.Logf("--- %s log, last 30 lines:\n%s", s.name, s.proc.LogTail(30))
			}
		})
	}
	for _, d := range []*server{d1, d2} {
		if _, err := untilProxy(d.addr, addrP1, time.Now(), 60*time.Second); err != nil {
			t.Fatalf("%s: %v", d.name, err)
		}
		waitFor(t, d.name+" ready", 30*time.Second, func() error {
			if code, err := readyStatus(d.addr); err != nil || code != http.StatusOK {
				return fmt.Errorf("%d %v", code, err)
			}
			return nil
		})
	}
	return d1, d2, d3, p1, n1, c1
}

// restartResult is one measured restart.
type restartResult struct {
	Case string `json:"case"`
	// FirstA is the time from the process's start (or the reload's
	// signal) to the first answer of the seed holding the proxy; 0 when
	// there was none within Within.
	FirstAMillis float64 `json:"first_a_ms"`
	WithinMillis float64 `json:"within_ms"`
	// ReadyMillis is when /ready first said 200, for the CoreDNS cases.
	ReadyMillis float64 `json:"ready_ms,omitempty"`
	// ReadyWithoutA counts /ready answers of 200 while the Coralized name
	// had no A record.
	ReadyWithoutA int `json:"ready_without_a"`
	// Without counts the seed's answers without the proxy in the sweep
	// and a half after a reload of the proxy, of Sampled.
	Without int `json:"answers_without_proxy,omitempty"`
	Sampled int `json:"answers_sampled,omitempty"`
}

// TestRestartAnswersAtOnce (issue 37, finding 2): in a running fleet, the
// seed name server (no bootstrap), restarted as a process or restarted in
// place by a reload that changes a node setting, answers the Coralized
// name with A records within one sweep; so does it when the proxy is
// restarted either way; and /ready says 200 only once it does. The
// control, a seed restarted without state_dir, shows what the saved
// contacts are for. NODELAB_RESULTS names a JSON file for the figures.
func TestRestartAnswersAtOnce(t *testing.T) {
	res := labresult.Start("test/nodelab", "TestRestartAnswersAtOnce", labresult.Loopback, "NODELAB_RESULTS")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	d1, _, _, p1, n1, c1 := startLab(t, ctx, false)
	var results []restartResult
	within := 3 * checkEvery
	record := func(r restartResult, err error) {
		t.Helper()
		results = append(results, r)
		if err != nil {
			t.Errorf("%s: %v", r.Case, err)
		}
		t.Logf("%s: first A record after %.0f ms (ready after %.0f ms, %d ready answers without A)", r.Case, r.FirstAMillis, r.ReadyMillis, r.ReadyWithoutA)
	}

	// measureCoreDNS polls the seed's answer and /ready from since until
	// both say yes (or within ends for the answer).
	measureCoreDNS := func(name string, since time.Time, within time.Duration) (restartResult, error) {
		r := restartResult{Case: name, WithinMillis: ms(within)}
		deadline := since.Add(within)
		var err error
		for {
			if r.ReadyMillis == 0 {
				if code, _ := readyStatus(addrD1); code == http.StatusOK {
					if got, _ := proxiesIn(addrD1); !contains(got, addrP1) {
						r.ReadyWithoutA++
					} else {
						r.ReadyMillis = ms(time.Since(since))
					}
				}
			}
			if r.FirstAMillis == 0 {
				if got, _ := proxiesIn(addrD1); contains(got, addrP1) {
					r.FirstAMillis = ms(time.Since(since))
				}
			}
			if r.FirstAMillis > 0 && r.ReadyMillis > 0 {
				break
			}
			if time.Now().After(deadline) {
				if r.FirstAMillis == 0 {
					err = fmt.Errorf("no A record within %v", within)
				}
				break
			}
			time.Sleep(10 * time.Millisecond)
		}
		if r.ReadyWithoutA > 0 {
			err = fmt.Errorf("/ready said 200 %d times while the name had no A record", r.ReadyWithoutA)
		}
		return r, err
	}

	t.Run("seed process restart", func(t *testing.T) {
		d1.stop(t)
		start := time.Now()
		d1.start(t)
		record(measureCoreDNS("CoreDNS seed, process restart (state_dir)", start, within))
	})

	t.Run("seed process restart without state_dir", func(t *testing.T) {
		n1.stateDir = false
		d1.stop(t)
		start := time.Now()
		d1.start(t)
		r, _ := measureCoreDNS("CoreDNS seed, process restart without state_dir (control)", start, 15*time.Second)
		record(r, nil) // the control: what happens without saved contacts
		n1.stateDir = true
		d1.stop(t)
		d1.start(t)
		if _, err := untilProxy(addrD1, addrP1, time.Now(), 30*time.Second); err != nil {
			t.Fatal(err)
		}
	})

	t.Run("seed reload restarting the node in place", func(t *testing.T) {
		n1.levels = "50ms 20ms"
		d1.write(d1)
		at := reloadCoreDNS(t, d1)
		if !strings.Contains(d1.proc.Log(), "restarting the node in place") {
			t.Fatal("the reload did not restart the node in place")
		}
		record(measureCoreDNS("CoreDNS seed, reload restarting the node in place", at, within))
	})

	t.Run("proxy process restart", func(t *testing.T) {
		p1.stop(t)
		// Until the seed has dropped it (live_within), its old address
		// still comes back; the restart is measured from there.
		waitFor(t, "the seed drops the stopped proxy", 30*time.Second, func() error {
			if got, err := proxiesIn(addrD1); err != nil || contains(got, addrP1) {
				return fmt.Errorf("%v %v", got, err)
			}
			return nil
		})
		start := time.Now()
		p1.start(t)
		d, err := untilProxy(addrD1, addrP1, start, 30*time.Second)
		record(restartResult{Case: "Caddy proxy, process restart", FirstAMillis: ms(d), WithinMillis: ms(30 * time.Second)}, err)
	})

	t.Run("proxy reload restarting the node in place", func(t *testing.T) {
		c1.levels = "50ms 20ms"
		at := reloadCaddy(ctx, t, p1)
		d, err := untilProxy(addrD1, addrP1, at, within)
		// The seed must go on answering with the proxy: sample it for a
		// sweep and a half.
		r := restartResult{Case: "Caddy proxy, reload restarting the node in place", FirstAMillis: ms(d), WithinMillis: ms(within)}
		for end := time.Now().Add(3 * checkEvery / 2); time.Now().Before(end); time.Sleep(20 * time.Millisecond) {
			r.Sampled++
			if got, _ := proxiesIn(addrD1); !contains(got, addrP1) {
				r.Without++
			}
		}
		if r.Without > 0 && err == nil {
			err = fmt.Errorf("%d of %d answers without the proxy after its reload", r.Without, r.Sampled)
		}
		record(r, err)
	})

	if err := res.Write(map[string]any{"check_interval_ms": ms(checkEvery), "live_within": "5s", "results": results}); err != nil {
		t.Fatal(err)
	}
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
