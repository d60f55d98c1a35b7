package main

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/coralcdn/coral/eval/internal/evalrun"
)

// The large-object section (-large-size, 256 MiB by default): one object
// far larger than the small ones, served as a coral_proxy cache hit, by
// file_server from a file of the same bytes in the same Caddy, by nginx's
// proxy_cache when nginx runs, and by the -baseline Caddy's coral_proxy
// when there is one (coral-old). wrk is not the tool for it (a run of a
// few seconds completes a handful of responses, and wrk counts only
// those): clients in this process, -large-streams of them at once, each
// on its own keep-alive connection, ask for the object again and again
// for -large-duration and count every body byte that arrives within it,
// through a fixed buffer (nothing holds a body). MB/s is those bytes over
// the run's time. Rounds as the small objects' (-rounds), the targets'
// order rotated from round to round and the stream counts' order
// alternated; per round coral/file, nginx/file and new/old
// (coral/coral-old), and their medians.
//
// The object's bytes come from a seeded generator, written once to
// file_server's root and served by the origin from that file (Range
// honoured: coral_proxy may fetch a large object in slices), so no
// process holds the object in memory. Every response must be a 200 of
// the whole object and, for the caches, a hit; the checks before and
// after the runs hash whole bodies against the file's SHA-256. Caddy's
// resident memory is read before and after, and its peak (VmHWM): a
// server that buffered the object per client would show it there.

// largeIdle is the longest a read of the large object may wait for
// bytes in the checks: no bound on the whole transfer, which a loaded
// machine may slow down many times, only on a stall.
const largeIdle = 30 * time.Second

// largeWarmWithin bounds the wait for a cache's first hit of the large
// object after its miss (the cache commits it once the body is in); it
// only turns a cache that never stores it into an error.
const largeWarmWithin = 5 * time.Minute

// largeObject is the large object: its path on the origin and in
// file_server's root, its size, its file and its digest.
type largeObject struct {
	Path   string `json:"path"`
	Size   int64  `json:"object_bytes"`
	SHA256 string `json:"sha256"`
	file   string
}

// largeName is the large object's path: /256m for 256 MiB.
func largeName(n int64) string { return "/" + strconv.FormatInt(n>>20, 10) + "m" }

// writeLargeObject writes size pseudo-random bytes (ChaCha8 from a fixed
// seed: the same in every run) to dir, a MiB at a time, hashing them on
// the way.
func writeLargeObject(dir string, size int64) (*largeObject, error) {
	o := &largeObject{Path: largeName(size), Size: size}
	o.file = filepath.Join(dir, strings.TrimPrefix(o.Path, "/"))
	f, err := os.Create(o.file)
	if err != nil {
		return nil, err
	}
	rng := rand.NewChaCha8([32]byte{'c', 'o', 'r', 'a', 'l', '-', 'l', 'a', 'r', 'g', 'e'})
	h := sha256.New()
	w := bufio.NewWriterSize(io.MultiWriter(f, h), 1<<20)
	if _, err := io.CopyN(w, rng, size); err != nil {
		f.Close()
		return nil, err
	}
	if err := w.Flush(); err != nil {
		f.Close()
		return nil, err
	}
	if err := f.Close(); err != nil {
		return nil, err
	}
	o.SHA256 = hex.EncodeToString(h.Sum(nil))
	return o, os.Chtimes(o.file, lastModified, lastModified)
}

// serve answers the origin's request for the large object from its file,
// with the small objects' header fields; ranges are honoured.
func (o *largeObject) serve(w http.ResponseWriter, r *http.Request) {
	f, err := os.Open(o.file)
	if err != nil {
		http.Error(w, err.Error(), http.StatusInternalServerError)
		return
	}
	defer f.Close()
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	h.Set("Cache-Control", "public, max-age=86400")
	http.ServeContent(w, r, "", lastModified, f)
}

// largeTargets are the targets measured with the large object: coral and
// the file_server beside it, and nginx and coral-old when they run.
func (b *bench) largeTargets() []*target {
	var ts []*target
	for _, name := range []string{"coral", "file", "nginx", "coral-old"} {
		if t := b.target(name); t != nil {
			ts = append(ts, t)
		}
	}
	return ts
}

// checkLarge asks t for the large object once, streaming the body
// through a hash, and checks it as check does a small one.
func (b *bench) checkLarge(t *target, when string) (*sample, error) {
	o := b.origin.large
	r, err := getTo(t, o.Path, io.Discard, largeIdle)
	if err != nil {
		return nil, fmt.Errorf("%s %s: %w", t.name, o.Path, err)
	}
	s := &sample{When: when, Target: t.name, Size: int(o.Size), response: *r}
	s.Same = r.Status == http.StatusOK && int64(r.BodyBytes) == o.Size && r.BodySHA256 == o.SHA256
	s.Cache, s.Hit = cacheHit(t, r.Header)
	return s, nil
}

// warmLarge fills the caches with the large object (one miss each, its
// body read to the end) and waits for each to answer a hit with the
// object's bytes; file_server is checked once.
func (b *bench) warmLarge(ctx context.Context, lr *largeResult) error {
	for _, t := range b.largeTargets() {
		if t.server == "coral" || t.server == "nginx" {
			if _, err := getTo(t, b.origin.large.Path, io.Discard, largeIdle); err != nil {
				return fmt.Errorf("warming %s %s: %w", t.name, b.origin.large.Path, err)
			}
		}
		var s *sample
		err := evalrun.WaitFor(ctx, t.name+"'s hit of "+b.origin.large.Path, largeWarmWithin, b.alive, func() error {
			var err error
			if s, err = b.checkLarge(t, "before"); err != nil {
				return err
			}
			if !s.Hit {
				return fmt.Errorf("cache status %q", s.Cache)
			}
			return nil
		})
		if err != nil && (s == nil || ctx.Err() != nil || b.alive() != nil) {
			return err
		}
		// A miss that stays one is recorded for the checks to report.
		lr.Responses = append(lr.Responses, s)
	}
	return nil
}

// large runs the large-object section: warm-up, rounds, checks after.
func (b *bench) large(ctx context.Context, rep *report) error {
	o := b.origin.large
	if o == nil {
		return nil
	}
	p := b.p
	lr := &largeResult{Object: *o, Streams: p.LargeStreams, Rounds: p.Rounds, Duration: p.LargeDuration.String(), FileServerPath: o.file}
	rep.Large = lr
	fmt.Printf("\nLarge object: %s (%s, sha256 %.16s…), %v runs with %s concurrent streams per target (%s), %d rounds\n",
		o.Path, sizeLabel(int(o.Size)), o.SHA256, p.LargeDuration, strings.Trim(fmt.Sprint(p.LargeStreams), "[]"), targetNames(b.largeTargets()), p.Rounds)
	lr.CaddyRSSBefore = procStatusBytes(b.caddy.Pid(), "VmRSS:")
	if err := b.warmLarge(ctx, lr); err != nil {
		return err
	}
	for round := 1; round <= p.Rounds; round++ {
		streams := slices.Clone(p.LargeStreams)
		if round%2 == 0 {
			slices.Reverse(streams)
		}
		for _, n := range streams {
			// One wait for a quiet machine per step, so that its runs
			// follow each other closely.
			waited, busy, err := evalrun.WaitQuiet(ctx, p.Quiet, b.otherCPU)
			if err != nil {
				return err
			}
			for i, slot := range evalrun.Interleave(b.largeTargets(), round, 1) {
				r, err := b.streamRun(ctx, round, slot.Target, n, p.LargeDuration)
				if err != nil {
					return err
				}
				if i == 0 {
					r.QuietWait, r.BusyBefore = waited.Seconds(), busy
				}
				fmt.Printf("  round %d %d stream(s) %-9s %8.0f MB/s  %6.2f responses  server %5.2f s CPU/GB  origin requests %d  other CPU %.1f s\n",
					round, n, r.Target, r.MBps, float64(r.Complete)+r.Partial, r.CPUPerGB, r.OriginRequests, r.OtherCPU)
				lr.Runs = append(lr.Runs, r)
			}
		}
	}
	for _, t := range b.largeTargets() {
		s, err := b.checkLarge(t, "after")
		if err != nil {
			return err
		}
		lr.Responses = append(lr.Responses, s)
	}
	lr.CaddyRSSAfter = procStatusBytes(b.caddy.Pid(), "VmRSS:")
	lr.CaddyPeakRSS = procStatusBytes(b.caddy.Pid(), "VmHWM:")
	if b.base != nil {
		lr.BaselinePeakRSS = procStatusBytes(b.base.Pid(), "VmHWM:")
	}
	return nil
}

func targetNames(ts []*target) string {
	var names []string
	for _, t := range ts {
		names = append(names, t.name)
	}
	return strings.Join(names, ", ")
}

// streamResult is what one stream of a run read.
type streamResult struct {
	bytes    int64
	complete int64
	problems []string
	err      error
}

// streamRun is one run against t: n streams at once for d, and what the
// servers did meanwhile.
func (b *bench) streamRun(ctx context.Context, round int, t *target, n int, d time.Duration) (*largeRun, error) {
	if err := b.alive(); err != nil {
		return nil, err
	}
	r := &largeRun{Round: round, Streams: n, Target: t.name}
	o0 := b.origin.requests.Load()
	c0, w0 := b.cpu(), time.Now()
	deadline := w0.Add(d)
	results := make(chan streamResult, n)
	for range n {
		go func() { results <- b.stream(ctx, t, deadline) }()
	}
	var errs []error
	for range n {
		res := <-results
		r.Bytes += res.bytes
		r.Complete += res.complete
		r.Problems = append(r.Problems, res.problems...)
		if res.err != nil {
			errs = append(errs, res.err)
		}
	}
	c1 := b.cpu()
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	if err := errors.Join(errs...); err != nil {
		return nil, fmt.Errorf("%s, %d streams: %w", t.name, n, err)
	}
	if err := b.alive(); err != nil {
		return nil, err
	}
	r.RunTime = d.Seconds()
	r.MBps = float64(r.Bytes) / r.RunTime / 1e6
	r.Partial = float64(r.Bytes)/float64(b.origin.large.Size) - float64(r.Complete)
	r.OriginRequests = b.origin.requests.Load() - o0
	r.ServerCPU = b.serverCPU(t, c0, c1)
	if r.Bytes > 0 {
		r.CPUPerGB = r.ServerCPU / (float64(r.Bytes) / 1e9)
	}
	r.SelfCPU = c1.self - c0.self
	r.OtherCPU = max(0, (c1.busy-c0.busy)-(c1.servers()-c0.servers())-r.SelfCPU)
	return r, nil
}

// stream asks t for the large object again and again on one keep-alive
// connection until deadline, reading every body through one fixed buffer
// and counting its bytes; the response cut off by the deadline counts
// the bytes it delivered. A response that is not a 200 of the whole
// object, or for a cache not a hit, is a problem and ends the stream.
func (b *bench) stream(ctx context.Context, t *target, deadline time.Time) streamResult {
	var res streamResult
	o := b.origin.large
	conn, err := dial(t)
	if err != nil {
		res.err = err
		return res
	}
	defer conn.Close()
	_ = conn.SetDeadline(deadline)
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Now()) })
	defer stop()
	over := func(err error) bool { return errors.Is(err, os.ErrDeadlineExceeded) }
	req := fmt.Sprintf("GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", o.Path, t.hostHeader())
	br := bufio.NewReaderSize(conn, 64<<10)
	buf := make([]byte, 256<<10)
	for {
		if _, err := io.WriteString(conn, req); err != nil {
			if !over(err) {
				res.err = err
			}
			return res
		}
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			if !over(err) {
				res.err = err
			}
			return res
		}
		cache, hit := cacheHit(t, resp.Header)
		if resp.StatusCode != http.StatusOK || resp.ContentLength != o.Size || !hit {
			res.problems = append(res.problems, fmt.Sprintf("%s: status %d, Content-Length %d, cache status %q", t.name, resp.StatusCode, resp.ContentLength, cache))
			resp.Body.Close()
			return res
		}
		var got int64
		for {
			n, err := resp.Body.Read(buf)
			got += int64(n)
			if err == io.EOF {
				break
			}
			if err != nil {
				res.bytes += got
				if !over(err) {
					res.err = err
				}
				return res
			}
		}
		res.bytes += got
		if got != o.Size {
			res.problems = append(res.problems, fmt.Sprintf("%s: %d body bytes, want %d", t.name, got, o.Size))
			return res
		}
		res.complete++
	}
}

// summarizeLarge fills in the large section's medians and ratios per
// stream count, and adds its problems to the report's.
func summarizeLarge(rep *report) {
	lr := rep.Large
	if lr == nil {
		return
	}
	lr.Summary = nil
	for _, n := range lr.Streams {
		ls := &largeSumm{Streams: n, Targets: map[string]*largeTargetSumm{}}
		byRound := map[int]map[string]*largeRun{}
		for _, r := range lr.Runs {
			if r.Streams != n {
				continue
			}
			if byRound[r.Round] == nil {
				byRound[r.Round] = map[string]*largeRun{}
			}
			byRound[r.Round][r.Target] = r
			ts := ls.Targets[r.Target]
			if ts == nil {
				ts = &largeTargetSumm{}
				ls.Targets[r.Target] = ts
			}
			ts.MBps = append(ts.MBps, r.MBps)
			ts.cpu = append(ts.cpu, r.CPUPerGB)
		}
		for _, ts := range ls.Targets {
			ts.MedianMBps, ts.MedianCPUPerGB = evalrun.Median(ts.MBps), evalrun.Median(ts.cpu)
		}
		ratio := func(to *[]float64, runs map[string]*largeRun, a, b string) {
			if ra, rb := runs[a], runs[b]; ra != nil && rb != nil && rb.MBps > 0 {
				*to = append(*to, ra.MBps/rb.MBps)
			}
		}
		for round := 1; round <= lr.Rounds; round++ {
			ratio(&ls.CoralOverFile, byRound[round], "coral", "file")
			ratio(&ls.NginxOverFile, byRound[round], "nginx", "file")
			ratio(&ls.NewOverOld, byRound[round], "coral", "coral-old")
		}
		ls.MedianCoralOverFile = medianOrNil(ls.CoralOverFile)
		ls.MedianNginxOverFile = medianOrNil(ls.NginxOverFile)
		ls.MedianNewOverOld = medianOrNil(ls.NewOverOld)
		lr.Summary = append(lr.Summary, ls)
	}
	for _, r := range lr.Runs {
		var what []string
		if r.OriginRequests != 0 {
			what = append(what, fmt.Sprintf("the origin got %d requests", r.OriginRequests))
		}
		what = append(what, r.Problems...)
		if r.Bytes == 0 {
			what = append(what, "no byte arrived")
		}
		if len(what) > 0 {
			rep.Problems = append(rep.Problems, fmt.Sprintf("large-object run of %s with %d streams (round %d): %s", r.Target, r.Streams, r.Round, strings.Join(what, ", ")))
		}
	}
	for _, s := range lr.Responses {
		if !s.Hit || !s.Same {
			rep.Problems = append(rep.Problems, fmt.Sprintf("%s %s (%s): status %d, %d bytes, sha256 %.16s…, origin's bytes %v, cache header %q",
				s.Target, lr.Object.Path, s.When, s.Status, s.BodyBytes, s.BodySHA256, s.Same, s.Cache))
		}
	}
}

// medianOrNil is the median of v, nil when v is empty (the ratio's
// targets did not both run).
func medianOrNil(v []float64) *float64 {
	if len(v) == 0 {
		return nil
	}
	m := evalrun.Median(v)
	return &m
}

// printLarge prints the large section's runs' medians and ratios.
func printLarge(w io.Writer, lr *largeResult) {
	if lr == nil {
		return
	}
	fmt.Fprintf(w, "\nLarge object %s (%s): MB/s of body bytes over %s runs, medians over %d rounds; server CPU s per GB:\n", lr.Object.Path, sizeLabel(int(lr.Object.Size)), lr.Duration, lr.Rounds)
	tw := tabwriter.NewWriter(w, 2, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "streams\ttarget\tMB/s per round\tmedian MB/s\tCPU s/GB\t")
	for _, ls := range lr.Summary {
		for _, name := range []string{"coral", "coral-old", "file", "nginx"} {
			if ts := ls.Targets[name]; ts != nil {
				fmt.Fprintf(tw, "%d\t%s\t%s\t%.0f\t%.2f\t\n", ls.Streams, name, fmtFloats(ts.MBps, "%.0f"), ts.MedianMBps, ts.MedianCPUPerGB)
			}
		}
	}
	tw.Flush()
	for _, ls := range lr.Summary {
		fmt.Fprintf(w, "  %d stream(s): coral/file %s", ls.Streams, fmtFloats(ls.CoralOverFile, "%.3f"))
		if ls.MedianCoralOverFile != nil {
			fmt.Fprintf(w, ", median %.3f", *ls.MedianCoralOverFile)
		}
		if ls.MedianNginxOverFile != nil {
			fmt.Fprintf(w, "; nginx/file %s, median %.3f", fmtFloats(ls.NginxOverFile, "%.3f"), *ls.MedianNginxOverFile)
		}
		if ls.MedianNewOverOld != nil {
			fmt.Fprintf(w, "; new/old %s, median %.3f", fmtFloats(ls.NewOverOld, "%.3f"), *ls.MedianNewOverOld)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintf(w, "  Caddy's RSS %.1f MiB before, %.1f MiB after, peak %.1f MiB", float64(lr.CaddyRSSBefore)/(1<<20), float64(lr.CaddyRSSAfter)/(1<<20), float64(lr.CaddyPeakRSS)/(1<<20))
	if lr.BaselinePeakRSS > 0 {
		fmt.Fprintf(w, "; the baseline Caddy's peak %.1f MiB", float64(lr.BaselinePeakRSS)/(1<<20))
	}
	fmt.Fprintln(w)
}

// parseLargeSize reads -large-size: whole MiB, "256m" or "256" (MiB), 0
// for none.
func parseLargeSize(v string) (int64, error) {
	s, _ := strings.CutSuffix(strings.ToLower(strings.TrimSpace(v)), "m")
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || n > 4<<10 {
		return 0, fmt.Errorf("-large-size %q: want whole MiB from 0 (none) to 4096, as 256m", v)
	}
	return n << 20, nil
}

// largeSizeFlag is -large-size.
type largeSizeFlag int64

func (f *largeSizeFlag) String() string {
	if f == nil || *f == 0 {
		return "0"
	}
	return strconv.FormatInt(int64(*f)>>20, 10) + "m"
}

func (f *largeSizeFlag) Set(v string) error {
	n, err := parseLargeSize(v)
	*f = largeSizeFlag(n)
	return err
}

// streamsFlag is -large-streams: stream counts, space-separated.
type streamsFlag []int

func (f *streamsFlag) String() string {
	if f == nil {
		return ""
	}
	return strings.Trim(fmt.Sprint([]int(*f)), "[]")
}

func (f *streamsFlag) Set(v string) error {
	*f = nil
	for _, s := range strings.Fields(v) {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 || n > 64 {
			return fmt.Errorf("-large-streams: %q: want 1 to 64", s)
		}
		*f = append(*f, n)
	}
	if len(*f) == 0 {
		return errors.New("-large-streams: no stream count")
	}
	return nil
}
