//go:build linux

package demonet

import (
	"context"
	"encoding/json"
	"net/http"
	"os"
	"os/exec"
	"regexp"
	"strings"
	"testing"
	"time"

	dn "github.com/coralcdn/coral/internal/lab/demonet"
	"github.com/coralcdn/coral/internal/lab/headless"
)

// TestBrowser: Chromium loads the demo site through a proxy of the
// network (the page and its three images, by their Coralized URL), and
// then that node's status page renders with the live data: the node, the
// objects the browser just fetched, and the request counts that grew with
// the page load.
func TestBrowser(t *testing.T) {
	n := network(t)
	chrome, err := exec.LookPath("chromium")
	if err != nil {
		msg := "chromium missing (make deps installs it)"
		if os.Getenv("CI") == "true" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	var nd *dn.Node
	for _, c := range n.Nodes {
		if c.Caddy.Running() && c.StatusURL != "" {
			nd = c
			break
		}
	}
	if nd == nil {
		t.Fatal("no running node with a status page")
	}
	before := statusPage(t, nd)

	// The site through the proxy: the Coralized name maps to the node's
	// address (what DNS would answer; the DNS path is TestResolveAndFetch's).
	id := runID(t)
	page := n.URL(dn.PathIndex + "?b=" + id)
	dom := runChromium(t, chrome, "--host-resolver-rules=MAP *."+dn.AliasZone+" "+nd.Addr.String(), "--dump-dom", page)
	if got := len(regexp.MustCompile(`<img `).FindAllString(dom, -1)); got != 3 {
		t.Fatalf("the page Chromium rendered has %d images, want 3:\n%s", got, tail(dom, 2000))
	}
	after := statusPage(t, nd)
	if grew := after.Requests.Total - before.Requests.Total; grew < 4 {
		t.Errorf("the node's requests grew by %d during the page load, want at least 4 (the page and its images)", grew)
	}
	urls := map[string]bool{}
	for _, o := range after.RecentObjects {
		urls[o.URL] = true
	}
	// The status page shows URLs without their query strings (show_queries
	// is off), so the page is listed as "/?…".
	for _, p := range []string{dn.PathIndex + "?…", dn.PathPNG1, dn.PathPNG2, dn.PathJPEG} {
		if !urls["http://"+n.OriginHost+p] {
			t.Errorf("%s is not among the node's most recently used objects (%d listed)", p, len(after.RecentObjects))
		}
	}

	// The status page itself, rendered.
	status := runChromium(t, chrome, "--dump-dom", nd.StatusURL)
	for _, want := range []string{nd.Addr.String(), "http://" + n.OriginHost + dn.PathIndex + "?…"} {
		if !strings.Contains(status, want) {
			t.Errorf("the rendered status page does not show %q", want)
		}
	}
	if strings.Contains(status, id) {
		t.Errorf("the rendered status page shows the query string %q", "b="+id)
	}
	if !strings.Contains(status, "</main>") {
		t.Errorf("the status page did not render:\n%s", tail(status, 2000))
	}
}

// statusDoc is the part of the status page's JSON this test reads.
type statusDoc struct {
	Requests struct {
		Total uint64 `json:"total"`
	} `json:"requests"`
	RecentObjects []struct {
		URL string `json:"url"`
	} `json:"recent_objects"`
}

func statusPage(t *testing.T, nd *dn.Node) statusDoc {
	t.Helper()
	resp, err := http.Get(nd.StatusURL + "?format=json")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var d statusDoc
	if err := json.NewDecoder(resp.Body).Decode(&d); err != nil {
		t.Fatalf("status page JSON: %v", err)
	}
	return d
}

// runChromium runs headless Chromium with a private profile and returns
// what it printed.
func runChromium(t *testing.T, bin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	out, err := headless.Run(ctx, bin, t.TempDir(), args...)
	if err != nil {
		t.Fatal(err)
	}
	return string(out)
}

func tail(s string, n int) string { return headless.Tail(s, n) }
