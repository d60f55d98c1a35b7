package statuspage

import (
	"context"
	"encoding/json"
	"fmt"
	"image/png"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/headless"
	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
)

// The lab's addresses, all in 127.0.90.0/24. eval/httpbench uses
// 127.0.90.1–3 with fixed ports (8080, 8081, 2019, UDP 4000), so bin/caddy
// gets an address of its own and the origin a free port.
const (
	originIP  = "127.0.90.1"  // the in-process origin (any free port)
	nodeIP    = "127.0.90.10" // bin/caddy: DSHT node, proxy and status page
	dhtPort   = 4000
	httpPort  = 8090
	zone      = "nyud.test"
	recentN   = 10
	chromeMax = 3 * time.Minute // a first start can be slow on a busy machine
)

// need skips the test for a missing prerequisite, or fails it under
// CI=true, where everything must be there.
func need(t *testing.T, msg string) {
	t.Helper()
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + " (CI=true, so this is a failure, not a skip)")
	}
	t.Skip(msg)
}

// caddyBinary finds bin/caddy and checks that it has coral_status.
func caddyBinary(t *testing.T) string {
	t.Helper()
	bin, err := labconf.Binary("caddy")
	if err != nil {
		need(t, err.Error())
	}
	st, err := os.Stat(bin)
	if err != nil {
		t.Fatal(err)
	}
	root := filepath.Dir(filepath.Dir(bin))
	out, err := exec.Command(bin, "list-modules").Output()
	if err != nil {
		t.Fatalf("bin/caddy list-modules: %v", err)
	}
	if !strings.Contains(string(out), "http.handlers.coral_status\n") {
		need(t, "bin/caddy predates coral_status: run `make caddy`")
	}
	for _, f := range []string{"statuspage.go", "statuspage.html", "admin.go", "metrics.go"} {
		if fi, err := os.Stat(filepath.Join(root, "module", "caddy", f)); err == nil && fi.ModTime().After(st.ModTime()) {
			t.Logf("warning: module/caddy/%s is newer than bin/caddy; `make caddy` to test the current code", f)
		}
	}
	return bin
}

// chromiumBinary finds Debian's chromium (test/statuspage/install-deps.sh).
func chromiumBinary(t *testing.T) string {
	t.Helper()
	p, err := exec.LookPath("chromium")
	if err != nil {
		need(t, "chromium missing: run test/statuspage/install-deps.sh as root (make deps)")
	}
	return p
}

// startOrigin serves "object PATH" (fresh for 10 minutes) on originIP.
func startOrigin(t *testing.T) (port int) {
	t.Helper()
	ln, err := net.Listen("tcp", net.JoinHostPort(originIP, "0"))
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain")
		w.Header().Set("Cache-Control", "max-age=600")
		io.WriteString(w, "object "+r.URL.Path)
	}), ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return ln.Addr().(*net.TCPAddr).Port
}

// startCaddy runs bin/caddy with the status page on the node's own
// address and the proxy for every other host, both on nodeIP:httpPort.
func startCaddy(t *testing.T, bin string) *proc.Process {
	t.Helper()
	dir := t.TempDir()
	site := func(addr string, d labconf.Directive) labconf.Directive { return labconf.D(addr).With(d) }
	caddyfile := labconf.Caddy{
		SkipTrust: true,
		Grace:     "1s",
		Options:   []labconf.Directive{labconf.D("default_bind", nodeIP), labconf.D("http_port", httpPort)},
		Coral:     labconf.Node{Listen: netip.AddrPortFrom(netip.MustParseAddr(nodeIP), dhtPort)},
		Sites: []labconf.Directive{
			site(fmt.Sprintf("http://%s:%d", nodeIP, httpPort), labconf.D("coral_status").With(labconf.D("recent", recentN))),
			site(fmt.Sprintf(":%d", httpPort), labconf.Proxy{Zone: zone, CacheDir: filepath.Join(dir, "cache"),
				AllowOrigins: []string{originIP + "/32"}}.Directive()),
		},
	}.String()
	path := filepath.Join(dir, "Caddyfile")
	if err := labconf.WriteFile(path, caddyfile); err != nil {
		t.Fatal(err)
	}
	// Caddy's data and config directories stay in the temporary directory;
	// if the test binary dies, so does Caddy.
	p, err := proc.Start(labconf.CaddyArgv(bin, path), proc.Options{Name: "bin/caddy", Dir: dir,
		Env: labconf.CaddyEnv(dir), Log: filepath.Join(dir, "caddy.log")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = p.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("bin/caddy log:\n%s", p.Log())
		}
	})
	return p
}

// statusDoc is the part of coral_status's JSON this test reads.
type statusDoc struct {
	Node *struct {
		Address string `json:"address"`
	} `json:"node"`
	Caches []struct {
		Objects    int `json:"objects"`
		InProgress int `json:"in_progress"`
	} `json:"caches"`
	Requests struct {
		Kinds []struct {
			Kind  string `json:"kind"`
			Count uint64 `json:"count"`
		} `json:"kinds"`
	} `json:"requests"`
}

var client = &http.Client{Timeout: 10 * time.Second}

func statusJSON(base string) (statusDoc, error) {
	var doc statusDoc
	resp, err := client.Get(base + "/?format=json")
	if err != nil {
		return doc, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return doc, fmt.Errorf("status %d", resp.StatusCode)
	}
	return doc, json.NewDecoder(resp.Body).Decode(&doc)
}

// waitFor polls the status JSON until ok accepts it.
func waitFor(t *testing.T, p *proc.Process, base, what string, ok func(statusDoc) bool) statusDoc {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for {
		doc, err := statusJSON(base)
		if err == nil && ok(doc) {
			return doc
		}
		if !p.Running() {
			t.Fatalf("bin/caddy exited while waiting for %s", what)
		}
		if time.Now().After(deadline) {
			t.Fatalf("waiting for %s: last answer %+v, %v", what, doc, err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// chromium runs Chromium headless with a private profile and returns its
// standard output.
func chromium(t *testing.T, bin string, args ...string) []byte {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), chromeMax)
	defer cancel()
	start := time.Now()
	out, err := headless.Run(ctx, bin, t.TempDir(), args...)
	t.Logf("chromium %s: %v", args[0], time.Since(start).Round(time.Millisecond))
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func tail(s string, n int) string { return headless.Tail(s, n) }

// stat reads the text of the element with data-stat="name".
func stat(dom, name string) (string, bool) {
	m := regexp.MustCompile(`data-stat="` + regexp.QuoteMeta(name) + `"[^>]*>([^<]*)<`).FindStringSubmatch(dom)
	if m == nil {
		return "", false
	}
	return m[1], true
}

// TestStatusPageInChromium: after a few Coralized requests, the page that
// Chromium renders shows the node, the cache's objects and their URLs and
// the hits; its inline script runs under the page's CSP and refreshes the
// data; and a screenshot comes out as a PNG of the window's size.
func TestStatusPageInChromium(t *testing.T) {
	caddyBin := caddyBinary(t)
	chromeBin := chromiumBinary(t)
	originPort := startOrigin(t)
	p := startCaddy(t, caddyBin)
	base := fmt.Sprintf("http://%s:%d", nodeIP, httpPort)
	nodeAddr := fmt.Sprintf("%s:%d", nodeIP, dhtPort)
	waitFor(t, p, base, "the status page", func(d statusDoc) bool { return d.Node != nil })

	// Three objects through the proxy, then each once more from the cache.
	coralHost := fmt.Sprintf("%s.%d.%s", originIP, originPort, zone)
	paths := []string{"/alpha", "/beta", "/gamma"}
	fetch := func(path string) string {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Host = coralHost
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil || resp.StatusCode != http.StatusOK || string(b) != "object "+path {
			t.Fatalf("%s: %d %q %v", path, resp.StatusCode, b, err)
		}
		return resp.Header.Get("Cache-Status")
	}
	for _, path := range paths {
		fetch(path)
	}
	waitFor(t, p, base, "three cached objects", func(d statusDoc) bool {
		return len(d.Caches) == 1 && d.Caches[0].Objects == len(paths) && d.Caches[0].InProgress == 0
	})
	for _, path := range paths {
		if cs := fetch(path); !strings.Contains(cs, "; hit;") {
			t.Errorf("%s again: Cache-Status %q, want a hit", path, cs)
		}
	}

	dom := string(chromium(t, chromeBin, "--dump-dom", base+"/"))
	if !strings.Contains(dom, "</main>") {
		t.Fatalf("Chromium's DOM has no page:\n%s", tail(dom, 3000))
	}
	for _, c := range []struct{ name, want string }{
		{"node-address", nodeAddr},
		{"node-joined", "joined"},
		{"cache-objects", strconv.Itoa(len(paths))},
		{"cache-in-progress", "0"},
	} {
		if got, ok := stat(dom, c.name); !ok || got != c.want {
			t.Errorf("%s: %q (found %v), want %q", c.name, got, ok, c.want)
		}
	}
	for _, path := range paths {
		if url := fmt.Sprintf("http://%s:%d%s", originIP, originPort, path); !strings.Contains(dom, url) {
			t.Errorf("the page does not list %s", url)
		}
	}
	if hits, _ := stat(dom, "requests-local_hit"); hits == "" || hits == "0" {
		t.Errorf("local hits %q, want at least %d", hits, len(paths))
	}
	if n, _ := stat(dom, "requests-origin"); n == "" || n == "0" {
		t.Errorf("requests from the origin %q, want at least %d", n, len(paths))
	}
	// The inline script ran (the page's CSP let it): it shows its control.
	if !strings.Contains(dom, `<label id="auto-box">`) {
		t.Errorf("the inline script did not run: %s", regexp.MustCompile(`<label id="auto-box"[^>]*>`).FindString(dom))
	}

	// The script reloads the data every 5 s: after 7 s of virtual time,
	// it has swapped in a fresh copy of the page's data once.
	dom = string(chromium(t, chromeBin, "--virtual-time-budget=7000", "--dump-dom", base+"/"))
	if !strings.Contains(dom, `data-refreshed="1"`) {
		t.Errorf("no refresh within 7 s of virtual time: %s", regexp.MustCompile(`<body[^>]*>`).FindString(dom))
	}
	state := regexp.MustCompile(`<span id="refresh-state">([^<]*)<`).FindStringSubmatch(dom)
	if got, _ := stat(dom, "node-address"); got != nodeAddr || state == nil || state[1] != "" {
		t.Errorf("after the refresh: node address %q, refresh state %q", got, state)
	}

	// A screenshot: a PNG of the window's size.
	shot := filepath.Join(t.TempDir(), "status.png")
	chromium(t, chromeBin, "--screenshot="+shot, "--window-size=1200,900", base+"/")
	f, err := os.Open(shot)
	if err != nil {
		t.Fatalf("no screenshot: %v", err)
	}
	defer f.Close()
	cfg, err := png.DecodeConfig(f)
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	if cfg.Width != 1200 || cfg.Height != 900 {
		t.Errorf("screenshot %dx%d, want 1200x900", cfg.Width, cfg.Height)
	}
	if fi, err := f.Stat(); err == nil {
		t.Logf("screenshot: %dx%d, %d bytes", cfg.Width, cfg.Height, fi.Size())
	}
}
