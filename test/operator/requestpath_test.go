package operator

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
)

// startOrigin serves an object of a little over 8 KiB at every path,
// cacheable for an hour, counting requests.
func startOrigin(t *testing.T, addr string) *atomic.Int64 {
	t.Helper()
	var hits atomic.Int64
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		// As Python's http.server answers (the origin): one
		// response a connection, closed after it.
		w.Header().Set("Connection", "close")
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Content-Type", "application/octet-stream")
		io.WriteString(w, r.URL.Path+"\n"+strings.Repeat("x", 24<<10)) // 24 KiB and a bit
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return &hits
}

// getAndClose sends one request on a new connection, reads the whole
// response and closes the connection at once, as curl does.
func getAndClose(addr, host, path string) (status int, body []byte, cacheStatus string, err error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, nil, "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(10 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: operator-test\r\n\r\n", path, host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, nil, "", err
	}
	body, err = io.ReadAll(resp.Body)
	return resp.StatusCode, body, resp.Header.Get("Cache-Status"), err
}

// TestCaddyCountsEveryRequest (issue 37 (1)): with Caddy's metrics option
// and an access log, N misses and N hits by curl, which closes its
// connection as soon as it has the body, are all counted by Caddy
// itself: caddy_http_requests_total and the duration histogram, and one
// access log line each, with a real duration.
func TestCaddyCountsEveryRequest(t *testing.T) {
	const n = 8
	node := caddyNode{ap("127.0.146.61:2019"), ap("127.0.146.61:4000"), ap("127.0.146.61:8090")}
	dir := t.TempDir()
	// The origin: Caddy's own file server (as the operator had
	// Python's), n files of 20 KB and more.
	www := filepath.Join(dir, "www")
	if err := os.Mkdir(www, 0o755); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		b := make([]byte, 20000+1000*i)
		rand.Read(b)
		if err := os.WriteFile(filepath.Join(www, "f"+strconv.Itoa(i)), b, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	origin := start(t, "origin", dir, binary(t, "caddy"), "file-server", "--root", www, "--listen", "127.0.146.62:8080")
	waitFor(t, origin, 30*time.Second, "the origin", func() error {
		_, _, err := get("http://127.0.146.62:8080/f0", "")
		return err
	})
	accessLog := filepath.Join(dir, "access.log")
	text := strings.Replace(node.caddyfile(dir, labconf.D("allow_origins", "127.0.146.62")),
		"\tbind "+node.http.Addr().String()+"\n",
		"\tbind "+node.http.Addr().String()+"\n\tlog {\n\t\toutput file "+accessLog+"\n\t\tformat json\n\t}\n", 1)
	text = strings.Replace(text, "\tpersist_config off\n", "\tpersist_config off\n\tmetrics\n", 1)
	a := startCaddy(t, "caddy", dir, text)
	waitFor(t, a, 30*time.Second, "the proxy", node.adminUp)

	// curl, as the operator used it: it closes the connection as
	// soon as it has the body.
	host := "127.0.146.62.8080.nyud.test"
	for round, want := range []string{"miss", "hit"} {
		for i := range n {
			out, err := exec.Command("curl", "-sS", "-o", "/dev/null", "-w", "%{http_code} %header{cache-status}",
				"-H", "Host: "+host, "http://"+node.http.String()+"/f"+strconv.Itoa(i)).CombinedOutput()
			if err != nil || !strings.HasPrefix(string(out), "200 ") {
				t.Fatalf("round %d object %d: %v %s", round, i, err, out)
			}
			if !strings.Contains(string(out), want) {
				t.Logf("object %d: %s (want %s)", i, out, want)
			}
		}
	}

	// What Caddy counted: every request, once.
	metrics := "http://" + node.admin.String() + "/metrics"
	var total, durations float64
	waitFor(t, a, 10*time.Second, "Caddy's counts", func() error {
		_, body, err := get(metrics, node.admin.String())
		if err != nil {
			return err
		}
		total, durations = sumSeries(body, "caddy_http_requests_total"), sumSeries(body, "caddy_http_request_duration_seconds_count")
		if total < 2*n || durations < 2*n {
			return fmt.Errorf("caddy_http_requests_total %v, duration count %v, want %d", total, durations, 2*n)
		}
		return nil
	})
	lines, zero := 0, 0
	data, _ := os.ReadFile(accessLog)
	for _, l := range bytes.Split(bytes.TrimSpace(data), []byte("\n")) {
		var e struct {
			Status   int     `json:"status"`
			Duration float64 `json:"duration"`
		}
		if json.Unmarshal(l, &e) == nil && e.Status == 200 {
			lines++
			if e.Duration <= 0 {
				zero++
			}
		}
	}
	if lines != 2*n || zero != 0 {
		t.Errorf("the access log has %d lines of 200 (want %d), %d of them with duration 0", lines, 2*n, zero)
	}
}

// sumSeries sums the samples of one metric (all its label sets).
func sumSeries(text, name string) float64 {
	var sum float64
	for _, line := range strings.Split(text, "\n") {
		if strings.HasPrefix(line, name+"{") || strings.HasPrefix(line, name+" ") {
			if v, err := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64); err == nil {
				sum += v
			}
		}
	}
	return sum
}

// TestCoralProxyPassesOn (issue 37 (4)): in a site with coral_proxy and
// reverse_proxy, a request for a host that is not Coralized goes on to
// reverse_proxy (the next handler), while a Coralized one is served by
// coral_proxy.
func TestCoralProxyPassesOn(t *testing.T) {
	node := caddyNode{ap("127.0.146.71:2019"), ap("127.0.146.71:4000"), ap("127.0.146.71:8090")}
	backend := "127.0.146.72:8080"
	startOrigin(t, backend)
	dir := t.TempDir()
	text := strings.Replace(node.caddyfile(dir, labconf.D("allow_origins", "127.0.146.72")),
		"\tcoral_proxy nyud.test {", "\treverse_proxy "+backend+"\n\tcoral_proxy nyud.test {", 1)
	a := startCaddy(t, "caddy", dir, text)
	waitFor(t, a, 30*time.Second, "the proxy", node.adminUp)

	status, body, cs, err := getAndClose(node.http.String(), "www.plain.test", "/obj/1")
	if err != nil || status != 200 || cs != "" || len(body) == 0 {
		t.Errorf("a host that is not Coralized: %d, Cache-Status %q, %d bytes, %v; want reverse_proxy's 200", status, cs, len(body), err)
	}
	status, _, cs, err = getAndClose(node.http.String(), "127.0.146.72.8080.nyud.test", "/obj/1")
	if err != nil || status != 200 || !strings.Contains(cs, "coral") {
		t.Errorf("a Coralized host: %d, Cache-Status %q, %v; want coral_proxy's 200", status, cs, err)
	}
}

// TestCoralLogsNamed (issue 37 (5)): the coral app's own lines (its DSHT
// node's) carry the app's logger name, as every Caddy module's do, so
// that a log's include and exclude select them.
func TestCoralLogsNamed(t *testing.T) {
	node := caddyNode{ap("127.0.146.81:2019"), ap("127.0.146.81:4000"), ap("127.0.146.81:8090")}
	dir := t.TempDir()
	a := startCaddy(t, "caddy", dir, node.caddyfile(dir))
	waitFor(t, a, 30*time.Second, "the proxy", node.adminUp)
	var line string
	waitFor(t, a, 10*time.Second, "the node's start in the log", func() error {
		data, _ := os.ReadFile(filepath.Join(dir, "caddy.log"))
		for _, l := range strings.Split(string(data), "\n") {
			if strings.Contains(l, `"msg":"node started"`) {
				line = l
				return nil
			}
		}
		return fmt.Errorf("no node started line yet")
	})
	var e struct {
		Logger string `json:"logger"`
	}
	if err := json.Unmarshal([]byte(line), &e); err != nil || e.Logger != "coral" {
		t.Errorf("the node's line %s: logger %q (%v), want \"coral\"", line, e.Logger, err)
	}
}
