package coralcaddy

import (
	"io"
	"net/http"
	"net/netip"
	"strings"
	"testing"

	"github.com/caddyserver/caddy/v2/caddytest"
)

// adminDo sends a request to the admin API and returns the status and
// body.
func adminDo(t *testing.T, method, path string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, "http://"+testAdmin+path, nil)
	if err != nil {
		t.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// TestHealthAndDrain (issue 22, defect 5 and the drain): /coral/health's
// status is the truth (503 while the node has not joined, 200 once it
// has), and /coral/drain takes the node out of service (it stops
// advertising its proxy; health 503; caddy_coral_draining 1) and back.
func TestHealthAndDrain(t *testing.T) {
	const port = 9374
	dir := t.TempDir()
	tester := caddytest.NewTester(t)
	// A bootstrap node that never answers: never joined.
	tester.InitServer(failedReloadConfig(port, netip.MustParseAddrPort("127.0.140.30:4174"),
		netip.MustParseAddrPort("127.0.140.31:4174"), dir, ""), "caddyfile")
	if code, body := adminDo(t, http.MethodGet, "/coral/health"); code != http.StatusServiceUnavailable || !strings.Contains(body, "not joined") {
		t.Errorf("health of a node that has not joined: %d %q, want 503 not joined", code, body)
	}

	tester.InitServer(reloadConfig(port, netip.MustParseAddrPort("127.0.140.30:4174"), dir, ""), "caddyfile")
	if code, body := adminDo(t, http.MethodGet, "/coral/health"); code != http.StatusOK || strings.TrimSpace(body) != "ok" {
		t.Fatalf("health of a joined node: %d %q", code, body)
	}
	if code, body := adminDo(t, http.MethodPost, "/coral/drain"); code != http.StatusOK || !strings.Contains(body, `"draining":true`) {
		t.Fatalf("POST /coral/drain: %d %s", code, body)
	}
	if code, body := adminDo(t, http.MethodGet, "/coral/health"); code != http.StatusServiceUnavailable || !strings.Contains(body, "draining") {
		t.Errorf("health while draining: %d %q", code, body)
	}
	if runningNode() == nil {
		t.Fatal("no coral node runs in this process (is " + testAdmin + " another process's Caddy?)")
	}
	if s := runningNode().Contact().Services; s != 0 {
		t.Errorf("the draining node advertises %v", s)
	}
	if v := expositionValue(adminGet(t, "/metrics"), "caddy_coral_draining "); v != "1" {
		t.Errorf("caddy_coral_draining = %q, want 1", v)
	}
	if !strings.Contains(adminGet(t, "/coral/status"), `"draining":true`) {
		t.Error("/coral/status does not show the drain")
	}
	if code, _ := adminDo(t, http.MethodDelete, "/coral/drain"); code != http.StatusOK {
		t.Fatalf("DELETE /coral/drain: %d", code)
	}
	if code, _ := adminDo(t, http.MethodGet, "/coral/health"); code != http.StatusOK {
		t.Errorf("health after the drain: %d", code)
	}
	if s := runningNode().Contact().Services; s == 0 {
		t.Error("the node does not advertise its proxy after the drain")
	}
}
