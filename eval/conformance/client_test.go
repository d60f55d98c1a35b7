package main

import (
	"bytes"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// recorder is an HTTP server on a loopback address of the brief's range
// that remembers each request's method, path and Host.
type recorder struct {
	mu   sync.Mutex
	seen []string
	url  string
}

func startRecorder(t *testing.T, addr string, h func(w http.ResponseWriter)) *recorder {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	rec := &recorder{url: "http://" + ln.Addr().String()}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rec.mu.Lock()
		rec.seen = append(rec.seen, r.Method+" "+r.URL.Path+" host="+r.Host)
		rec.mu.Unlock()
		h(w)
	})}
	go srv.Serve(ln)
	t.Cleanup(func() { srv.Close() })
	return rec
}

func (r *recorder) requests() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.seen, "\n")
}

// node/client.mjs, in front of a script that calls fetch as the suite's
// client does: control requests reach the origin and never the cache,
// test requests reach the cache with CONFORMANCE_HOST as Host, and the
// response is read as Node's own fetch reads it (two Cache-Control lines
// joined with ", ", as the suite's origin expects them back).
func TestClientHelperRoutesAndSetsHost(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node binary (Debian package nodejs)")
	}
	origin := startRecorder(t, "127.0.160.10:0", func(w http.ResponseWriter) { w.Write([]byte("[]")) })
	cache := startRecorder(t, "127.0.160.11:0", func(w http.ResponseWriter) {
		w.Header().Add("Cache-Control", "max-age=3600")
		w.Header().Add("Cache-Control", "s-maxage=1")
		w.Write([]byte("body"))
	})
	helper, err := nodeHelpers.ReadFile("node/client.mjs")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "client.mjs"), helper, 0o644); err != nil {
		t.Fatal(err)
	}
	script := `
const base = process.env.BASE
await fetch(base + '/config/u1', { method: 'PUT', headers: [['content-type', 'application/json']], body: '[]' })
const r = await fetch(base + '/test/u1', { cache: 'no-store', headers: [['Test-ID', 'x'], ['Req-Num', '1']] })
await r.text()
await fetch(base + '/state/u1')
console.log(r.headers.get('cache-control'))
`
	cmd := exec.Command(node, "--no-warnings", "--import", filepath.Join(dir, "client.mjs"), "--input-type=module", "-e", script)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), "BASE="+cache.url, "CONFORMANCE_ORIGIN="+origin.url, "CONFORMANCE_HOST=127.0.160.10.8000.nyud.test")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	if got, want := strings.TrimSpace(string(out)), "max-age=3600, s-maxage=1"; got != want {
		t.Errorf("Cache-Control as the client reads it: %q, want %q", got, want)
	}
	if got, want := cache.requests(), "GET /test/u1 host=127.0.160.10.8000.nyud.test"; got != want {
		t.Errorf("the cache saw:\n%s\nwant:\n%s", got, want)
	}
	originHost := strings.TrimPrefix(origin.url, "http://")
	wantOrigin := strings.Join([]string{"GET /state/conformance-harness host=" + originHost,
		"PUT /config/u1 host=" + originHost, "GET /state/u1 host=" + originHost}, "\n")
	if got := origin.requests(); got != wantOrigin {
		t.Errorf("the origin saw:\n%s\nwant:\n%s", got, wantOrigin)
	}
}

// node/origin.mjs binds a listen call that names only a port, as the
// suite's origin makes (server.listen(port), the port a string from npm's
// settings), to CONFORMANCE_LISTEN_HOST instead of every address.
func TestOriginHelperBindsLoopback(t *testing.T) {
	node, err := exec.LookPath("node")
	if err != nil {
		t.Skip("no node binary (Debian package nodejs)")
	}
	helper, err := nodeHelpers.ReadFile("node/origin.mjs")
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "origin.mjs"), helper, 0o644); err != nil {
		t.Fatal(err)
	}
	script := `
import http from 'node:http'
const s = http.createServer()
s.listen('0', () => { console.log(s.address().address); s.close() })
`
	cmd := exec.Command(node, "--import", filepath.Join(dir, "origin.mjs"), "--input-type=module", "-e", script)
	cmd.Env = append(os.Environ(), "CONFORMANCE_LISTEN_HOST=127.0.160.12")
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("node: %v\n%s", err, stderr.String())
	}
	if got := strings.TrimSpace(string(out)); got != "127.0.160.12" {
		t.Errorf("the origin listens on %q, want 127.0.160.12", got)
	}
}
