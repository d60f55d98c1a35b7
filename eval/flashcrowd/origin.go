package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"time"
)

// lastModified is the origin's Last-Modified for every file.
var lastModified = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// reqHeader carries a request's id from client to proxy, and on from the
// proxy to its peers and the origin (coral_proxy forwards end-to-end
// fields), so that each origin fetch names the client request behind it.
const reqHeader = "X-Flashcrowd-Request"

// line is the origin's upstream link: a token bucket shared by every
// response, filled at rate bytes per second up to burst bytes. Senders
// reserve their bytes before writing them; a reservation that overdraws the
// bucket waits until the bucket has refilled to zero, and the next one waits
// behind it, so all senders together never exceed the rate (after the first
// burst) and concurrent responses share it chunk by chunk.
type line struct {
	mu     sync.Mutex
	rate   float64 // bytes per second
	burst  float64
	tokens float64
	last   time.Time
	now    func() time.Time
}

func newLine(bytesPerSec, burst float64) *line {
	return &line{rate: bytesPerSec, burst: burst, tokens: burst, now: time.Now, last: time.Now()}
}

// reserve takes n bytes from the bucket and returns how long the sender
// must wait before sending them.
func (l *line) reserve(n int) time.Duration {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if el := now.Sub(l.last).Seconds(); el > 0 {
		l.tokens = min(l.burst, l.tokens+el*l.rate)
		l.last = now
	}
	l.tokens -= float64(n)
	if l.tokens >= 0 {
		return 0
	}
	return time.Duration(-l.tokens / l.rate * float64(time.Second))
}

// send writes b through the line in chunks, flushing each.
func (l *line) send(ctx context.Context, w http.ResponseWriter, b []byte, chunk int) (int, error) {
	fl, _ := w.(http.Flusher)
	sent := 0
	for sent < len(b) {
		n := min(chunk, len(b)-sent)
		if wait := l.reserve(n); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-ctx.Done():
				t.Stop()
				return sent, ctx.Err()
			case <-t.C:
			}
		}
		m, err := w.Write(b[sent : sent+n])
		sent += m
		if err != nil {
			return sent, err
		}
		if fl != nil {
			fl.Flush()
		}
	}
	return sent, nil
}

// lineChunk is what one reservation sends: about one TCP segment on a DSL
// line, so concurrent responses interleave finely.
const lineChunk = 1460

// originFetch is one request the origin received.
type originFetch struct {
	At        float64 `json:"t"` // seconds since the start burst (negative: before it)
	Path      string  `json:"path"`
	File      int     `json:"file"` // 0-based; -1: not a file
	Method    string  `json:"method"`
	Request   string  `json:"request,omitempty"` // the client request behind it (reqHeader)
	XFF       string  `json:"x_forwarded_for,omitempty"`
	UserAgent string  `json:"user_agent,omitempty"`
	Remote    string  `json:"remote"`
	Cond      bool    `json:"conditional,omitempty"` // If-None-Match or If-Modified-Since
	Bytes     int     `json:"bytes"`                 // body bytes sent
	Seconds   float64 `json:"seconds"`               // header to last byte
	Err       string  `json:"error,omitempty"`
}

// origin serves the files through the line and logs every request.
type origin struct {
	addr   netip.AddrPort
	files  [][]byte
	line   *line
	srv    *http.Server
	mu     sync.Mutex
	t0     time.Time
	log    []*originFetch
	perKey map[int]int // requests per file, and for errorFile
	// errorBody is what the error URL answers.
	errorBody []byte
}

// fileBody is file i's content: fixed pseudo-random bytes.
func fileBody(i, size int) []byte {
	rng := rand.New(rand.NewChaCha8([32]byte{'c', 'o', 'r', 'a', 'l', ' ', 'f', 'l', 'a', 's', 'h', byte(i)}))
	b := make([]byte, size)
	for j := 0; j < size; j += 8 {
		v := rng.Uint64()
		for k := 0; k < 8 && j+k < size; k++ {
			b[j+k] = byte(v >> (8 * k))
		}
	}
	return b
}

// The error URL (-error-crowd): the origin answers it with a bare 404, as
// net/http's NotFound does, without freshness information.
const (
	errorPath = "/missing"
	errorFile = -2 // its index where a file's would be
)

// filePath is file i's path on the origin: /f01, /f02, ...; errorPath
// for errorFile.
func filePath(i int) string {
	if i == errorFile {
		return errorPath
	}
	return fmt.Sprintf("/f%02d", i+1)
}

// fileIndex is the inverse of filePath, -1 for any other path.
func fileIndex(path string, files int) int {
	if path == errorPath {
		return errorFile
	}
	s, ok := strings.CutPrefix(path, "/f")
	if !ok || len(s) < 2 {
		return -1
	}
	n, err := strconv.Atoi(s)
	if err != nil || n < 1 || n > files || filePath(n-1) != path {
		return -1
	}
	return n - 1
}

func newOrigin(addr netip.AddrPort, files, size, kbit int) *origin {
	o := &origin{addr: addr, perKey: map[int]int{}, t0: time.Now(), errorBody: []byte("404 page not found\n")}
	for i := range files {
		o.files = append(o.files, fileBody(i, size))
	}
	o.line = newLine(float64(kbit)*1000/8, lineChunk)
	return o
}

func (o *origin) start() error {
	ln, err := net.Listen("tcp", o.addr.String())
	if err != nil {
		return err
	}
	o.srv = &http.Server{Handler: o, ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = o.srv.Serve(ln) }()
	return nil
}

func (o *origin) close() {
	if o.srv != nil {
		_ = o.srv.Close()
	}
}

// setT0 marks the start burst: times are counted from here.
func (o *origin) setT0(t time.Time) {
	o.mu.Lock()
	o.t0 = t
	o.mu.Unlock()
}

func (o *origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	i := fileIndex(r.URL.Path, len(o.files))
	f := &originFetch{Path: r.URL.Path, File: i, Method: r.Method, Request: r.Header.Get(reqHeader),
		XFF: r.Header.Get("X-Forwarded-For"), UserAgent: r.Header.Get("User-Agent"), Remote: r.RemoteAddr,
		Cond: r.Header.Get("If-None-Match") != "" || r.Header.Get("If-Modified-Since") != ""}
	o.mu.Lock()
	f.At = start.Sub(o.t0).Seconds()
	o.log = append(o.log, f)
	if i >= 0 || i == errorFile {
		o.perKey[i]++
	}
	o.mu.Unlock()
	defer func() {
		o.mu.Lock()
		f.Seconds = time.Since(start).Seconds()
		o.mu.Unlock()
	}()
	if i < 0 {
		// A bare 404, as http.NotFound writes it (the same body for the
		// error URL and any other path).
		h := w.Header()
		h.Set("Content-Type", "text/plain; charset=utf-8")
		h.Set("X-Content-Type-Options", "nosniff")
		w.WriteHeader(http.StatusNotFound)
		n, _ := w.Write(o.errorBody)
		o.mu.Lock()
		f.Bytes = n
		o.mu.Unlock()
		return
	}
	body := o.files[i]
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Cache-Control", "public, max-age=86400")
	h.Set("Last-Modified", lastModified.Format(http.TimeFormat))
	h.Set("ETag", fmt.Sprintf(`"f%02d"`, i+1))
	h.Set("Content-Length", strconv.Itoa(len(body)))
	// The header goes out at once (it is small); the body through the line.
	w.WriteHeader(http.StatusOK)
	if fl, ok := w.(http.Flusher); ok {
		fl.Flush()
	}
	if r.Method == http.MethodHead {
		return
	}
	n, err := o.line.send(r.Context(), w, body, lineChunk)
	o.mu.Lock()
	f.Bytes = n
	if err != nil {
		f.Err = err.Error()
	}
	o.mu.Unlock()
}

// fetches returns a copy of the request log, the requests per file and
// those for the error URL.
func (o *origin) fetches() ([]originFetch, []int, int) {
	o.mu.Lock()
	defer o.mu.Unlock()
	out := make([]originFetch, len(o.log))
	for i, f := range o.log {
		out[i] = *f
	}
	per := make([]int, len(o.files))
	for i := range per {
		per[i] = o.perKey[i]
	}
	return out, per, o.perKey[errorFile]
}
