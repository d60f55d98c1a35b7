//go:build linux

package main

import (
	"crypto/sha256"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// object is one file on the origin.
type object struct {
	Path    string
	Body    []byte
	SHA256  [32]byte
	Chunked bool // served without Content-Length, in chunks
}

// objectSizes cycle over the objects: small pages to pieces of video.
var objectSizes = []int{2 << 10, 30 << 10, 150 << 10, 600 << 10}

// makeObjects builds n objects with distinct fixed pseudo-random bodies;
// each body starts with its own path, so no two are alike.
func makeObjects(n int) []*object {
	out := make([]*object, n)
	for i := range n {
		path := fmt.Sprintf("/obj/%03d", i)
		size := objectSizes[i%len(objectSizes)]
		body := make([]byte, 0, size+64)
		body = append(body, "object "+path+"\n"...)
		seed := sha256.Sum256([]byte(path))
		for ctr := 0; len(body) < size; ctr++ {
			block := sha256.Sum256(append(seed[:], byte(ctr), byte(ctr>>8), byte(ctr>>16)))
			body = append(body, block[:]...)
		}
		body = body[:size]
		out[i] = &object{Path: path, Body: body, SHA256: sha256.Sum256(body), Chunked: i%2 == 1}
	}
	return out
}

// origin serves the objects and counts every request for each.
type origin struct {
	objects map[string]*object
	index   map[string]int
	start   time.Time

	mu      sync.Mutex
	fetches []originFetch
}

type originFetch struct {
	At     float64 `json:"t"` // seconds since start
	Object int     `json:"object"`
	From   string  `json:"from"` // the proxy's address
}

func newOrigin(objs []*object, start time.Time) *origin {
	o := &origin{objects: map[string]*object{}, index: map[string]int{}, start: start}
	for i, obj := range objs {
		o.objects[obj.Path] = obj
		o.index[obj.Path] = i
	}
	return o
}

func (o *origin) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	obj, ok := o.objects[r.URL.Path]
	if !ok {
		http.NotFound(w, r)
		return
	}
	o.mu.Lock()
	from, _, _ := net.SplitHostPort(r.RemoteAddr)
	o.fetches = append(o.fetches, originFetch{At: time.Since(o.start).Seconds(), Object: o.index[r.URL.Path], From: from})
	o.mu.Unlock()
	w.Header().Set("Cache-Control", "public, max-age=86400")
	w.Header().Set("Content-Type", "application/octet-stream")
	if !obj.Chunked {
		w.Header().Set("Content-Length", strconv.Itoa(len(obj.Body)))
		_, _ = w.Write(obj.Body)
		return
	}
	// Chunked: write in pieces, flushing each.
	f, _ := w.(http.Flusher)
	for off := 0; off < len(obj.Body); off += 16 << 10 {
		_, _ = w.Write(obj.Body[off:min(off+16<<10, len(obj.Body))])
		if f != nil {
			f.Flush()
		}
	}
}

// fetchesSince returns the origin's fetches at or after t seconds.
func (o *origin) fetchesSince(from, to float64) []originFetch {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []originFetch
	for _, f := range o.fetches {
		if f.At >= from && f.At < to {
			out = append(out, f)
		}
	}
	return out
}

// fetchedFirst reports whether each of the first n objects was fetched
// at least once.
func (o *origin) fetchedFirst(n int) bool {
	o.mu.Lock()
	defer o.mu.Unlock()
	seen := map[int]bool{}
	for _, f := range o.fetches {
		if f.Object < n {
			seen[f.Object] = true
		}
	}
	return len(seen) == n
}
