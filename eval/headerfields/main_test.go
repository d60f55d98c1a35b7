package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/coralcdn/coral/eval/internal/evaltest"
)

func TestParseFields(t *testing.T) {
	got, err := parseFields(" 3 8  9 10 ")
	if err != nil || len(got) != 4 || got[0] != 3 || got[3] != 10 {
		t.Fatalf("parseFields = %v, %v", got, err)
	}
	for _, bad := range []string{"", "0", "11", "x", "3 -1"} {
		if _, err := parseFields(bad); err == nil {
			t.Errorf("parseFields(%q): no error", bad)
		}
	}
}

func TestParseWrk(t *testing.T) {
	n, secs, err := parseWrk("Running 2s test @ http://127.0.0.1/\n  53614 requests in 2.00s, 60.05MB read\nRequests/sec:  26781.95\n")
	if err != nil || n != 53614 || secs != 2 {
		t.Fatalf("parseWrk = %d, %v, %v", n, secs, err)
	}
	if _, _, err := parseWrk("nothing"); err == nil {
		t.Error("no error for output without a count")
	}
}

// TestConfig: each site listens on its own port and sets the first n
// fields but Server, which Caddy sets itself.
func TestConfig(t *testing.T) {
	p := defaultParams()
	p.Fields = []int{3, 10}
	raw, err := config(p)
	if err != nil {
		t.Fatal(err)
	}
	var c struct {
		Apps struct {
			HTTP struct {
				Servers map[string]struct {
					Listen []string
					Routes []struct {
						Handle []struct {
							Handler string
							Headers map[string][]string
							Body    string
						}
					}
				}
			}
		}
	}
	if err := json.Unmarshal(raw, &c); err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]struct {
		listen string
		n      int
	}{"fields0": {"127.0.97.1:9300", 2}, "fields1": {"127.0.97.1:9301", 9}} {
		s := c.Apps.HTTP.Servers[name]
		if len(s.Listen) != 1 || s.Listen[0] != want.listen || len(s.Routes) != 1 || len(s.Routes[0].Handle) != 1 {
			t.Fatalf("%s: %+v", name, s)
		}
		h := s.Routes[0].Handle[0]
		if h.Handler != "static_response" || len(h.Headers) != want.n || len(h.Body) != bodySize || h.Headers["Server"] != nil {
			t.Errorf("%s: handler %s with %d header fields %v and a %d-byte body; want static_response, %d fields without Server, %d bytes", name, h.Handler, len(h.Headers), h.Headers, len(h.Body), want.n, bodySize)
		}
	}
}

// TestExperimentShort runs the experiment briefly with bin/caddy and wrk:
// every site answers with its fields (checked before the load), and every
// site's figures are there.
func TestExperimentShort(t *testing.T) {
	bin := evaltest.LabBinary(t, "caddy", "wrk")
	p := defaultParams()
	p.Caddy, p.Addr, p.Port = bin, "127.0.97.2", 9320
	p.Fields, p.Rounds, p.Duration = []int{3, 9}, 1, time.Second
	p.Out = t.TempDir()
	rep, err := experiment(context.Background(), p, "test")
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Sites) != 2 {
		t.Fatalf("%d sites, want 2", len(rep.Sites))
	}
	for _, s := range rep.Sites {
		if s.Requests <= 0 || s.RPS <= 0 || s.CPUPerRequest <= 0 || s.AgainstFirst <= 0 {
			t.Errorf("%d fields: %+v", s.Fields, s)
		}
	}
	if rep.Sites[0].AgainstFirst != 1 {
		t.Errorf("the first site against itself: %v", rep.Sites[0].AgainstFirst)
	}
	raw, err := os.ReadFile(filepath.Join(p.Out, "headerfields.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back report
	if err := json.Unmarshal(raw, &back); err != nil || len(back.Sites) != 2 || back.Sites[1].Fields != 9 {
		t.Fatalf("headerfields.json: %v, %+v", err, back)
	}
}
