package operator

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	encbin "encoding/binary"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
)

// fullDiskObject is the body the full-disk origin serves at path: 8 to
// 64 KiB of bytes derived from the path, so the client can check every
// byte of every response it gets.
func fullDiskObject(path string) []byte {
	sum := sha256.Sum256([]byte(path))
	r := rand.New(rand.NewPCG(encbin.LittleEndian.Uint64(sum[:8]), encbin.LittleEndian.Uint64(sum[8:16])))
	b := make([]byte, 8<<10+r.IntN(56<<10))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// tmpfsHolder mounts a tmpfs of size at dir in a mount namespace of its
// own, kept by a process that sleeps until the test ends; processes run
// through its argv prefix see the tmpfs (nsenter into that namespace), and
// the test reads it through /proc/PID/root. It skips when not root (CI
// runs as root: there it fails instead).
func tmpfsHolder(t *testing.T, dir, size string) (prefix []string, view string) {
	t.Helper()
	why := ""
	if os.Geteuid() != 0 {
		why = "not root: a tmpfs needs a mount namespace of its own"
	}
	for _, b := range []string{"unshare", "nsenter", "mount", "sh"} {
		if _, err := exec.LookPath(b); err != nil && why == "" {
			why = b + " not found (Debian package util-linux)"
		}
	}
	if why != "" {
		if os.Getenv("CI") == "true" {
			t.Fatal(why + " (CI=true, so this is a failure, not a skip)")
		}
		t.Skip(why)
	}
	ready := filepath.Join(t.TempDir(), "mounted")
	holder, err := proc.Start([]string{"unshare", "--mount", "--propagation", "private", "sh", "-c",
		`mount -t tmpfs -o size="$2" coral-test "$1" && touch "$3" && exec sleep 100000`, "sh", dir, size, ready},
		proc.Options{Name: "tmpfs", Dir: filepath.Dir(dir), Log: filepath.Join(filepath.Dir(dir), "tmpfs.log")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { holder.Stop(5 * time.Second) })
	waitFor(t, holder, 10*time.Second, "the tmpfs", func() error {
		_, err := os.Stat(ready)
		return err
	})
	pid := strconv.Itoa(holder.Pid())
	return []string{"nsenter", "--target", pid, "--mount", "--"}, "/proc/" + pid + "/root" + dir
}

// TestFullDiskNeverTruncates (issue 36 (2)): cache_dir on a 4 MiB tmpfs
// with cache_size 1GiB, far more than the disk. 1,000 misses of distinct
// objects of 8 to 64 KiB (30 MiB in all), two clients at once, fill the
// disk over and over: every response is a 200 with the whole body, byte
// for byte (none truncated, none cut off), the cache evicts down to what
// the disk holds and counts the failed writes
// (caddy_coral_disk_write_errors_total, caddy_coral_cache_disk_limit_bytes),
// what it stored is served as hits, and so again after a restart on the
// same full disk.
func TestFullDiskNeverTruncates(t *testing.T) {
	const (
		objects = 1000
		tmpfs   = 4 << 20
	)
	node := caddyNode{ap("127.0.146.81:2019"), ap("127.0.146.81:4000"), ap("127.0.146.81:8090")}
	originAddr := "127.0.146.82:8080"
	dir := t.TempDir()
	cacheDir := filepath.Join(dir, "cache")
	if err := os.Mkdir(cacheDir, 0o700); err != nil {
		t.Fatal(err)
	}
	nsenter, view := tmpfsHolder(t, cacheDir, strconv.Itoa(tmpfs))

	ln, err := net.Listen("tcp", originAddr)
	if err != nil {
		t.Fatal(err)
	}
	origin := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body := fullDiskObject(r.URL.Path)
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Content-Type", "application/octet-stream")
		if strings.HasSuffix(r.URL.Path, "/chunked") {
			// No Content-Length: a size the cache learns only at the end.
			w.(http.Flusher).Flush()
		} else {
			w.Header().Set("Content-Length", strconv.Itoa(len(body)))
		}
		w.Write(body)
	})}
	go origin.Serve(ln)
	t.Cleanup(func() { origin.Close() })

	text := node.caddyfile(dir, labconf.D("cache_size", "1GiB"), labconf.D("allow_origins", "127.0.146.82"), labconf.D("rate_limit", "off"))
	bin := binary(t, "caddy")
	cfg := filepath.Join(dir, "Caddyfile")
	if err := labconf.WriteFile(cfg, text); err != nil {
		t.Fatal(err)
	}
	argv := append(append([]string{}, nsenter...), labconf.CaddyArgv(bin, cfg)...)
	a := start(t, "caddy", dir, argv...)
	waitFor(t, a, 30*time.Second, "the proxy", node.adminUp)

	host := "127.0.146.82.8080.nyud.test"
	path := func(i int) string {
		p := "/o/" + strconv.Itoa(i)
		if i%5 == 4 {
			p += "/chunked"
		}
		return p
	}
	// fetch gets one object and reports what is wrong with the response,
	// "" if nothing.
	fetch := func(p string) (problem, cacheStatus string) {
		status, body, cs, cl, err := getFull(node.http.String(), host, p)
		want := fullDiskObject(p)
		switch {
		case err != nil:
			return fmt.Sprintf("%s: %v after %d of %d bytes (status %d)", p, err, len(body), len(want), status), cs
		case status != http.StatusOK:
			return fmt.Sprintf("%s: status %d", p, status), cs
		case !bytes.Equal(body, want):
			return fmt.Sprintf("%s: %d bytes (Content-Length %q), not the %d-byte object", p, len(body), cl, len(want)), cs
		}
		return "", cs
	}

	var (
		mu       sync.Mutex
		problems []string
		next     int
	)
	var wg sync.WaitGroup
	for range 2 {
		wg.Go(func() {
			for {
				mu.Lock()
				i := next
				next++
				mu.Unlock()
				if i >= objects {
					return
				}
				if problem, _ := fetch(path(i)); problem != "" {
					mu.Lock()
					problems = append(problems, problem)
					mu.Unlock()
				}
			}
		})
	}
	wg.Wait()
	if len(problems) > 0 {
		t.Errorf("%d of %d misses on a full disk were not the whole object; the first: %s", len(problems), objects, strings.Join(problems[:min(5, len(problems))], "; "))
	}

	metrics := "http://" + node.admin.String() + "/metrics"
	errs := metricValue(t, metrics, node.admin.String(), "caddy_coral_disk_write_errors_total")
	limit := metricValue(t, metrics, node.admin.String(), "caddy_coral_cache_disk_limit_bytes")
	cached := metricValue(t, metrics, node.admin.String(), "caddy_coral_cache_bytes")
	t.Logf("after %d misses through a %d-byte tmpfs: %v failed writes, bound %v bytes, %v bytes cached", objects, tmpfs, errs, limit, cached)
	if errs == 0 {
		t.Errorf("caddy_coral_disk_write_errors_total = 0: the disk never filled, so this test proves nothing")
	}
	if limit <= 0 || limit > tmpfs {
		t.Errorf("caddy_coral_cache_disk_limit_bytes = %v, want the tmpfs's room (0 < bound <= %d)", limit, tmpfs)
	}
	if cached <= 0 || cached > tmpfs {
		t.Errorf("caddy_coral_cache_bytes = %v: want objects cached, within the tmpfs", cached)
	}
	// What the files take really is what the disk holds, and nothing is
	// left half-written in tmp/.
	if used := dirBytes(t, filepath.Join(view, "objects")); used > tmpfs {
		t.Errorf("objects/ takes %d bytes on a %d-byte tmpfs", used, tmpfs)
	}

	// The objects fetched last are cached: hits, whole.
	hitsAfter := func(when string) {
		t.Helper()
		hits := 0
		for i := objects - 20; i < objects; i++ {
			problem, cs := fetch(path(i))
			if problem != "" {
				t.Errorf("%s: %s", when, problem)
			}
			if strings.Contains(cs, "hit") {
				hits++
			}
		}
		if hits == 0 {
			t.Errorf("%s: none of the 20 objects fetched last was a hit", when)
		}
		t.Logf("%s: %d of the last 20 objects were hits", when, hits)
	}
	hitsAfter("after the misses")

	// A restart on the same full disk: it opens, and serves what it kept.
	a.Stop(10 * time.Second)
	a = start(t, "caddy-restarted", dir, argv...)
	waitFor(t, a, 30*time.Second, "the restarted proxy", node.adminUp)
	hitsAfter("after a restart")
	for i := range 50 { // and misses still work
		if problem, _ := fetch(path(objects + i)); problem != "" {
			t.Errorf("a miss after the restart: %s", problem)
		}
	}

	// Another file takes every byte the cache frees (a log filling the
	// same disk): evicting no longer makes room, writes fail midway, and
	// the downloads relay what the disk will not keep. Three clients ask
	// for each object at once, so some join a download that fails. All of
	// them still get the whole object.
	before := metricValue(t, metrics, node.admin.String(), "caddy_coral_disk_write_errors_total")
	stop := hogDisk(t, filepath.Join(view, "hog"))
	problems = nil
	for i := range 100 {
		p := path(2*objects + i)
		var wg sync.WaitGroup
		for range 3 {
			wg.Go(func() {
				if problem, _ := fetch(p); problem != "" {
					mu.Lock()
					problems = append(problems, problem)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
	}
	stop()
	if len(problems) > 0 {
		t.Errorf("%d of 300 requests on a disk another file keeps full were not the whole object; the first: %s", len(problems), strings.Join(problems[:min(5, len(problems))], "; "))
	}
	after := metricValue(t, metrics, node.admin.String(), "caddy_coral_disk_write_errors_total")
	_, status, _ := get("http://"+node.admin.String()+"/coral/status", node.admin.String())
	relays := ""
	if i := strings.Index(status, `"relays":`); i >= 0 {
		relays = strings.SplitN(status[i+len(`"relays":`):], ",", 2)[0]
	}
	t.Logf("with the disk kept full: %v more failed writes, %s objects relayed uncached", after-before, relays)
	if after == before {
		t.Errorf("no failed write while another file kept the disk full: the relay path was not exercised")
	}
}

// hogDisk fills the file system of path with one file, and keeps taking
// whatever room appears there, until the returned function is called.
func hogDisk(t *testing.T, path string) (stop func()) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	var wg sync.WaitGroup
	chunk := make([]byte, 4<<10)
	fill := func() {
		for {
			if _, err := f.Write(chunk); err != nil {
				return
			}
		}
	}
	fill()
	wg.Go(func() {
		for {
			select {
			case <-done:
				return
			default:
			}
			fill()
			runtime.Gosched()
		}
	})
	return func() {
		close(done)
		wg.Wait()
		f.Close()
		os.Remove(path)
	}
}

// getFull fetches path from addr with Host host on a connection of its
// own and returns what arrived, with the read error if the body was cut.
func getFull(addr, host, path string) (status int, body []byte, cacheStatus, contentLength string, err error) {
	c, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		return 0, nil, "", "", err
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(30 * time.Second))
	fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\nConnection: close\r\n\r\n", path, host)
	resp, err := http.ReadResponse(bufio.NewReader(c), nil)
	if err != nil {
		return 0, nil, "", "", err
	}
	defer resp.Body.Close()
	body, err = io.ReadAll(resp.Body)
	return resp.StatusCode, body, resp.Header.Get("Cache-Status"), resp.Header.Get("Content-Length"), err
}

// metricValue reads one series as a number.
func metricValue(t *testing.T, url, host, series string) float64 {
	t.Helper()
	v, err := metric(url, host, series)
	if err != nil {
		t.Fatal(err)
	}
	f, err := strconv.ParseFloat(v, 64)
	if err != nil {
		t.Fatalf("%s: %q: %v", series, v, err)
	}
	return f
}

// dirBytes is what the files under dir take on disk.
func dirBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var n int64
	err := filepath.Walk(dir, func(p string, fi os.FileInfo, err error) error {
		if err != nil {
			return err
		}
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && fi.Mode().IsRegular() {
			n += st.Blocks * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return n
}
