package main

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"
)

// record is one client request.
type record struct {
	ID          string  `json:"id"`
	Client      int     `json:"client"` // -1: the start burst
	At          float64 `json:"t"`      // seconds since the start burst, when sent
	Proxy       int     `json:"proxy"`
	File        int     `json:"file"`
	Status      int     `json:"status"`
	Bytes       int     `json:"bytes"`
	OK          bool    `json:"ok"` // 200 and exactly the origin's bytes
	LatencyMS   float64 `json:"latency_ms"`
	TTFBMS      float64 `json:"ttfb_ms"` // until the response header
	Source      string  `json:"source"`  // local, collapsed, peer-l<level>, origin, other, none
	Via         string  `json:"via,omitempty"`
	CacheStatus string  `json:"cache_status,omitempty"`
	Err         string  `json:"error,omitempty"`
}

// classify reads a response's Cache-Status (coral_proxy's form: "coral;
// hit; detail=\"local\"", "coral; fwd=uri-miss; detail=\"peer-l2\"",
// "coral; fwd=uri-miss; collapsed; detail=\"origin\"", ...) into the
// source the table counts, and for collapsed requests where the download
// they joined gets its bytes.
func classify(cs string) (source, via string) {
	rest, ok := strings.CutPrefix(strings.TrimSpace(cs), "coral;")
	if !ok {
		return "none", ""
	}
	var hit, collapsed, miss, uncached bool
	detail := ""
	for _, part := range strings.Split(rest, ";") {
		part = strings.TrimSpace(part)
		switch {
		case part == "hit":
			hit = true
		case part == "collapsed":
			collapsed = true
		case part == "fwd=uri-miss":
			miss = true
		case part == "stored=false":
			uncached = true
		case strings.HasPrefix(part, "detail="):
			detail = strings.Trim(strings.TrimPrefix(part, "detail="), `"`)
		}
	}
	switch {
	case hit && detail == "local":
		return "local", ""
	case uncached:
		return "other", detail
	case collapsed:
		return "collapsed", detail
	case miss && (detail == "origin" || strings.HasPrefix(detail, "peer-l")):
		return detail, ""
	}
	return "other", detail
}

// sourceAddr is client c's source address: 127.0.101.1 to .250, then
// 127.0.102.1, ...; the start burst uses 127.0.109.(10+proxy).
func sourceAddr(c int) netip.Addr {
	if c < 0 {
		panic("sourceAddr: the burst has its own")
	}
	return netip.AddrFrom4([4]byte{127, 0, byte(101 + c/250), byte(1 + c%250)})
}

func burstAddr(proxy int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 0, 109, byte(10 + proxy)})
}

// load runs the start burst and the crowd.
type load struct {
	p       params
	proxies []*proxy
	files   [][]byte
	// errorBody is the origin's answer to the error URL.
	errorBody []byte
	host      string // the Coralized Host
	t0        time.Time
	// onRelease is called with t0 just before the start burst's barrier
	// opens.
	onRelease func(t0 time.Time)
	seq       atomic.Int64
	mu        sync.Mutex
	records   []*record
}

// targets are what the start burst asks every proxy for: every file, or
// the error URL alone (-error-crowd).
func (ld *load) targets() []int {
	if ld.p.ErrorCrowd {
		return []int{errorFile}
	}
	out := make([]int, len(ld.files))
	for i := range out {
		out[i] = i
	}
	return out
}

func (ld *load) add(r *record) {
	ld.mu.Lock()
	ld.records = append(ld.records, r)
	ld.mu.Unlock()
}

// check fills in a record's verdict from what came back.
func (ld *load) check(r *record, status int, cs string, body []byte, err error) {
	r.Status, r.Bytes, r.CacheStatus = status, len(body), cs
	r.Source, r.Via = classify(cs)
	wantStatus := http.StatusOK
	var want []byte
	if r.File == errorFile {
		wantStatus, want = http.StatusNotFound, ld.errorBody
	} else {
		want = ld.files[r.File]
	}
	r.OK = err == nil && status == wantStatus && bytes.Equal(body, want)
	switch {
	case err != nil:
		r.Err = err.Error()
	case status != wantStatus:
		r.Err = fmt.Sprintf("status %d: %.200s", status, strings.TrimSpace(string(body)))
	case !r.OK:
		r.Err = fmt.Sprintf("wrong body: %d bytes, want %d, first difference at %d", len(body), len(want), firstDiff(body, want))
	}
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}

// burstResult is what the start burst did.
type burstResult struct {
	Requests int `json:"requests"`
	// SpreadMS is from the first request handed to the kernel to the last
	// (connections opened beforehand, one writer released by a barrier);
	// BarrierMS from the release to the last.
	SpreadMS  float64 `json:"send_spread_ms"`
	BarrierMS float64 `json:"release_to_last_send_ms"`
}

// burst asks every proxy for every file at the same moment: each request
// on a connection of its own, opened beforehand, the requests prepared,
// then written one after the other by one goroutine when a barrier opens
// (144 goroutines woken at once on a busy 2-core machine spread their
// writes over more than 10 ms). t0 is the release. burst returns once the
// requests are written; wait waits for the responses and records them.
func (ld *load) burst(ctx context.Context) (res *burstResult, wait func(), err error) {
	type job struct {
		x    *proxy
		file int
		conn net.Conn
		raw  []byte
		rec  *record
		sent time.Time
		err  error
		done chan struct{} // written (or failed)
	}
	var jobs []*job
	closeAll := func() {
		for _, j := range jobs {
			j.conn.Close()
		}
	}
	// File-major order: every proxy gets its first request early.
	for _, f := range ld.targets() {
		for _, x := range ld.proxies {
			d := net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: burstAddr(x.i).AsSlice()}}
			c, err := d.DialContext(ctx, "tcp", fmt.Sprintf("%v:%d", x.addr, ld.p.Port))
			if err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("start burst: %w", err)
			}
			k := len(jobs)
			j := &job{x: x, file: f, conn: c, done: make(chan struct{}),
				rec: &record{ID: fmt.Sprintf("b%d", k), Client: -1, Proxy: x.i, File: f}}
			j.raw = fmt.Appendf(nil, "GET %s HTTP/1.1\r\nHost: %s\r\n%s: %s\r\nConnection: close\r\n\r\n", filePath(f), ld.host, reqHeader, j.rec.ID)
			_ = c.SetDeadline(time.Now().Add(ld.p.Timeout + 10*time.Second))
			jobs = append(jobs, j)
		}
	}
	// Ctrl-C: the readers must not wait for their deadlines.
	stopAbort := context.AfterFunc(ctx, closeAll)
	// Readers, waiting for their request to be written.
	var readers sync.WaitGroup
	for _, j := range jobs {
		readers.Go(func() {
			<-j.done
			if j.err != nil {
				ld.check(j.rec, 0, "", nil, j.err)
				return
			}
			br := bufio.NewReader(j.conn)
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				j.rec.LatencyMS = ms(time.Since(j.sent))
				ld.check(j.rec, 0, "", nil, err)
				return
			}
			j.rec.TTFBMS = ms(time.Since(j.sent))
			body, err := io.ReadAll(resp.Body)
			resp.Body.Close()
			j.rec.LatencyMS = ms(time.Since(j.sent))
			ld.check(j.rec, resp.StatusCode, resp.Header.Get("Cache-Status"), body, err)
		})
	}
	// One writer: a second one, woken on the other CPU, can start many
	// milliseconds late on a busy machine. Its thread runs at the highest
	// priority (when allowed: root), so the proxies waking up to the first
	// requests do not preempt it before the last is out.
	release := make(chan struct{})
	parked := make(chan struct{})
	written := make(chan struct{})
	go func() {
		// The thread gets its priority back before it is unlocked. It must
		// not end with the goroutine: the proxies it may have started die
		// with it (Pdeathsig).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		tid := syscall.Gettid()
		// The raw value the kernel returns is 20 - nice.
		if raw, err := syscall.Getpriority(syscall.PRIO_PROCESS, tid); err == nil && syscall.Setpriority(syscall.PRIO_PROCESS, tid, -20) == nil {
			defer func() { _ = syscall.Setpriority(syscall.PRIO_PROCESS, tid, 20-raw) }()
		}
		close(parked)
		<-release
		for _, j := range jobs {
			_, j.err = j.conn.Write(j.raw)
			j.sent = time.Now()
			close(j.done)
		}
		close(written)
	}()
	<-parked
	time.Sleep(20 * time.Millisecond) // let the writer park on the barrier
	ld.t0 = time.Now()
	if ld.onRelease != nil {
		ld.onRelease(ld.t0)
	}
	close(release)
	<-written
	res = &burstResult{Requests: len(jobs)}
	first, last := jobs[0].sent, jobs[0].sent
	for _, j := range jobs {
		j.rec.At = j.sent.Sub(ld.t0).Seconds()
		first, last = minTime(first, j.sent), maxTime(last, j.sent)
	}
	res.SpreadMS, res.BarrierMS = ms(last.Sub(first)), ms(last.Sub(ld.t0))
	wait = func() {
		readers.Wait()
		stopAbort()
		closeAll()
		for _, j := range jobs {
			ld.add(j.rec)
		}
	}
	return res, wait, nil
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// start marks t0 without a burst.
func (ld *load) start() {
	ld.t0 = time.Now()
	if ld.onRelease != nil {
		ld.onRelease(ld.t0)
	}
}

// crowd runs the clients until the duration (from t0) is over, and waits
// for the page loads under way.
func (ld *load) crowd(ctx context.Context) {
	pages := ld.p.Files / ld.p.PageFiles
	end := ld.t0.Add(ld.p.Duration)
	var wg sync.WaitGroup
	for c := range ld.p.Clients {
		rng := rand.New(rand.NewPCG(ld.p.Seed, uint64(c)))
		page := rng.IntN(pages)
		delay := time.Duration(rng.Int64N(int64(max(ld.p.Spread, 1))))
		tr := &http.Transport{
			DialContext:         (&net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: sourceAddr(c).AsSlice()}}).DialContext,
			MaxIdleConnsPerHost: ld.p.PageFiles,
			IdleConnTimeout:     30 * time.Second,
			DisableCompression:  true,
		}
		client := &http.Client{Transport: tr, Timeout: ld.p.Timeout}
		wg.Go(func() {
			defer tr.CloseIdleConnections()
			next := ld.t0.Add(delay)
			for {
				if !sleepUntil(ctx, next) || !time.Now().Before(end) {
					return
				}
				x := ld.proxies[rng.IntN(len(ld.proxies))]
				if ld.p.ErrorCrowd {
					ld.get(ctx, client, c, x, errorFile)
				} else {
					var pw sync.WaitGroup
					for k := range ld.p.PageFiles {
						f := page*ld.p.PageFiles + k
						pw.Go(func() { ld.get(ctx, client, c, x, f) })
					}
					pw.Wait()
				}
				think := time.Duration(float64(ld.p.Think) * (0.5 + rng.Float64()))
				next = time.Now().Add(think)
			}
		})
	}
	wg.Wait()
}

// get is one client request through proxy x.
func (ld *load) get(ctx context.Context, client *http.Client, c int, x *proxy, f int) {
	r := &record{ID: fmt.Sprintf("c%d", ld.seq.Add(1)), Client: c, Proxy: x.i, File: f}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, x.url(ld.p.Port, filePath(f)), nil)
	if err != nil {
		ld.check(r, 0, "", nil, err)
		ld.add(r)
		return
	}
	req.Host = ld.host
	req.Header.Set(reqHeader, r.ID)
	start := time.Now()
	r.At = start.Sub(ld.t0).Seconds()
	resp, err := client.Do(req)
	if err != nil {
		r.LatencyMS = ms(time.Since(start))
		ld.check(r, 0, "", nil, err)
		ld.add(r)
		return
	}
	r.TTFBMS = ms(time.Since(start))
	body, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	r.LatencyMS = ms(time.Since(start))
	ld.check(r, resp.StatusCode, resp.Header.Get("Cache-Status"), body, err)
	ld.add(r)
}

// sleepUntil waits until t; false if ctx ended first.
func sleepUntil(ctx context.Context, t time.Time) bool {
	d := time.Until(t)
	if d <= 0 {
		return ctx.Err() == nil
	}
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-tm.C:
		return true
	}
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }
