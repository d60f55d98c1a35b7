package operator

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
)

// binary finds bin/NAME: without it the test skips, or fails under
// CI=true.
func binary(t *testing.T, name string) string {
	t.Helper()
	bin, err := labconf.Binary(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err.Error() + " (CI=true, so this is a failure, not a skip)")
		}
		t.Skip(err)
	}
	return bin
}

// start starts argv in dir, its output in dir/NAME.log, stopped at the
// end of the test; the log is shown when the test failed.
func start(t *testing.T, name, dir string, argv ...string) *proc.Process {
	t.Helper()
	p, err := proc.Start(argv, proc.Options{Name: name, Dir: dir, Env: labconf.CaddyEnv(dir),
		Log: filepath.Join(dir, name+".log")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		p.Stop(10 * time.Second)
		if t.Failed() {
			t.Logf("--- %s (exit %v), last lines:\n%s", name, p.ExitError(), p.LogTail(40))
		}
	})
	return p
}

// startCaddy writes text as dir/Caddyfile and runs bin/caddy on it.
func startCaddy(t *testing.T, name, dir, text string) *proc.Process {
	t.Helper()
	bin := binary(t, "caddy")
	path := filepath.Join(dir, "Caddyfile")
	if err := labconf.WriteFile(path, text); err != nil {
		t.Fatal(err)
	}
	return start(t, name, dir, labconf.CaddyArgv(bin, path)...)
}

// startCoreDNS writes text as dir/Corefile and runs bin/coredns on it.
func startCoreDNS(t *testing.T, name, dir, text string) *proc.Process {
	t.Helper()
	bin := binary(t, "coredns")
	path := filepath.Join(dir, "Corefile")
	if err := labconf.WriteFile(path, text); err != nil {
		t.Fatal(err)
	}
	return start(t, name, dir, bin, "-conf", path)
}

// waitFor polls f every 50 ms until it returns nil or timeout passes, and
// fails the test with its last error then. The process p must stay up
// meanwhile.
func waitFor(t *testing.T, p *proc.Process, timeout time.Duration, what string, f func() error) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for {
		err := f()
		if err == nil {
			return
		}
		if p != nil {
			if exit := p.Exited(); exit != nil {
				t.Fatalf("%s: %v", what, exit)
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v: %v", what, timeout, err)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// waitExit waits for p to exit on its own and returns its log; the test
// fails if it is still running after timeout.
func waitExit(t *testing.T, p *proc.Process, timeout time.Duration) string {
	t.Helper()
	select {
	case <-p.Done():
		return p.Log()
	case <-time.After(timeout):
		t.Fatalf("%s still runs after %v; want it to refuse to start\n%s", p.Name, timeout, p.LogTail(30))
		return ""
	}
}

var client = &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}

// get fetches url with Host host (if set) and returns the status and body.
func get(url, host string) (int, string, error) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		return 0, "", err
	}
	if host != "" {
		req.Host = host
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

// metric returns the value of one series (its name and labels exactly as
// the exposition writes them, e.g. `caddy_coral_reload_success`) in the
// metrics at url, or an error when it is not there.
func metric(url, host, series string) (string, error) {
	status, body, err := get(url, host)
	if err != nil {
		return "", err
	}
	if status != http.StatusOK {
		return "", fmt.Errorf("%s: %d", url, status)
	}
	for _, line := range strings.Split(body, "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			return v, nil
		}
	}
	return "", fmt.Errorf("no %s in %s", series, url)
}
