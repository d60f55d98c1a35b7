package proxylab

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// The origin: an in-process HTTP server on originIP that serves
// deterministic content for any path, counts requests per path and records
// their headers. How it answers is set per request in the query string,
// which the proxy forwards (and which is part of the cache key):
//
//	size=N       body length in bytes (default 64 KiB); Content-Length is set
//	rate=N       send at most N bytes per second (default unthrottled)
//	hold=N       after N bytes, wait until the test calls release(path)
//	maxage=N     Cache-Control: max-age=N (default 3600)
//	nocc=1       no Cache-Control at all (the proxy's default_ttl decides)
//	setcookie=1  add a Set-Cookie header
//	chunked=1    no Content-Length: the body is sent chunked
//
// The body depends on the path only (see content), so a test knows what
// every byte must be.
type origin struct {
	srv  *http.Server
	addr netip.AddrPort

	mu       sync.Mutex
	counts   map[string]*atomic.Int64
	headers  map[string][]http.Header
	uris     []string // every request's target as received, in order
	gates    map[string]chan struct{}
	stopOnce sync.Once
}

var originIP = netip.MustParseAddr("127.0.70.1")

// newOrigin starts an origin on originIP and an ephemeral port; it stops
// when the test ends.
func newOrigin(t *testing.T) *origin {
	t.Helper()
	ln, err := net.Listen("tcp", netip.AddrPortFrom(originIP, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	o := &origin{
		addr:    netip.MustParseAddrPort(ln.Addr().String()),
		counts:  map[string]*atomic.Int64{},
		headers: map[string][]http.Header{},
		gates:   map[string]chan struct{}{},
	}
	o.srv = &http.Server{Handler: http.HandlerFunc(o.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = o.srv.Serve(ln) }()
	t.Cleanup(o.stop)
	return o
}

// coralHost is the Coralized name of the origin: a numeric label before the
// zone is the port.
func (o *origin) coralHost() string {
	return fmt.Sprintf("%s.%d.%s", o.addr.Addr(), o.addr.Port(), zone)
}

// stop closes the listener and every connection; later requests are
// refused. Held responses are released (and fail on their closed
// connections).
func (o *origin) stop() {
	o.stopOnce.Do(func() {
		_ = o.srv.Close()
		o.mu.Lock()
		defer o.mu.Unlock()
		for p, g := range o.gates {
			select {
			case <-g:
			default:
				close(g)
			}
			delete(o.gates, p)
		}
	})
}

// count is how many requests for path the origin has received.
func (o *origin) count(path string) int64 {
	return o.counter(path).Load()
}

func (o *origin) counter(path string) *atomic.Int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	c, ok := o.counts[path]
	if !ok {
		c = new(atomic.Int64)
		o.counts[path] = c
	}
	return c
}

// total is the number of requests of any path.
func (o *origin) total() int64 {
	o.mu.Lock()
	defer o.mu.Unlock()
	var n int64
	for _, c := range o.counts {
		n += c.Load()
	}
	return n
}

// requestHeaders returns the headers of every request for path so far.
// requestURIs returns the target of every request so far, as received.
func (o *origin) requestURIs() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.uris...)
}

func (o *origin) requestHeaders(path string) []http.Header {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]http.Header(nil), o.headers[path]...)
}

func (o *origin) gate(path string) chan struct{} {
	o.mu.Lock()
	defer o.mu.Unlock()
	g, ok := o.gates[path]
	if !ok {
		g = make(chan struct{})
		o.gates[path] = g
	}
	return g
}

// release lets held responses for path go on (and later ones not stop).
func (o *origin) release(path string) {
	g := o.gate(path)
	select {
	case <-g:
	default:
		close(g)
	}
}

func (o *origin) serve(w http.ResponseWriter, r *http.Request) {
	o.counter(r.URL.Path).Add(1)
	o.mu.Lock()
	o.headers[r.URL.Path] = append(o.headers[r.URL.Path], r.Header.Clone())
	o.uris = append(o.uris, r.RequestURI)
	o.mu.Unlock()

	q := r.URL.Query()
	num := func(name string, def int64) int64 {
		v := q.Get(name)
		if v == "" {
			return def
		}
		n, err := strconv.ParseInt(v, 10, 64)
		if err != nil || n < 0 {
			return def
		}
		return n
	}
	size, rate, hold, maxAge := num("size", 64<<10), num("rate", 0), num("hold", -1), num("maxage", 3600)
	h := w.Header()
	h.Set("Content-Type", "application/octet-stream")
	if q.Get("chunked") == "" {
		h.Set("Content-Length", strconv.FormatInt(size, 10))
	}
	if q.Get("nocc") == "" {
		h.Set("Cache-Control", fmt.Sprintf("max-age=%d", maxAge))
	}
	if q.Get("setcookie") != "" {
		h.Set("Set-Cookie", "origin-session=s3cr3t; Path=/")
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return
	}
	rc := http.NewResponseController(w)
	_ = rc.Flush()

	c := newContent(r.URL.Path, size)
	chunk := int64(64 << 10)
	if rate > 0 {
		chunk = min(chunk, max(rate/50, 1024)) // ~50 writes a second
	}
	buf := make([]byte, chunk)
	start := time.Now()
	var sent int64
	held := hold < 0
	for sent < size {
		n := min(chunk, size-sent)
		if !held && sent+n > hold {
			n = hold - sent
		}
		if n > 0 {
			c.fill(buf[:n], sent)
			if _, err := w.Write(buf[:n]); err != nil {
				return
			}
			sent += n
			if rate > 0 || !held {
				_ = rc.Flush()
			}
		}
		if !held && sent == hold {
			held = true
			select {
			case <-o.gate(r.URL.Path):
			case <-r.Context().Done():
				return
			}
		}
		if rate > 0 {
			// Pace: the bytes sent so far may not have taken less than
			// sent/rate seconds.
			if d := time.Duration(float64(sent)/float64(rate)*float64(time.Second)) - time.Since(start); d > 0 {
				time.Sleep(d)
			}
		}
	}
}

// content is the deterministic body of a path: 64 KiB blocks of bytes from
// a generator seeded by the path, each block's first 8 bytes replaced by its
// index XOR the seed, so a misplaced, repeated or foreign block is caught as
// well as a wrong byte. Filling is a copy and an 8-byte patch per block,
// cheap enough for a gigabyte under the race detector.
type content struct {
	seed uint64
	base []byte // one block
	size int64
}

const blockSize = 64 << 10

var bases sync.Map // seed → []byte

func newContent(path string, size int64) content {
	f := fnv.New64a()
	f.Write([]byte(path))
	seed := f.Sum64()
	if b, ok := bases.Load(seed); ok {
		return content{seed: seed, base: b.([]byte), size: size}
	}
	b := make([]byte, blockSize)
	x := seed | 1
	for i := 0; i < blockSize; i += 8 {
		// xorshift64*
		x ^= x >> 12
		x ^= x << 25
		x ^= x >> 27
		binary.LittleEndian.PutUint64(b[i:], x*0x2545F4914F6CDD1D)
	}
	v, _ := bases.LoadOrStore(seed, b)
	return content{seed: seed, base: v.([]byte), size: size}
}

// fill writes the body bytes at [off, off+len(p)) into p.
func (c content) fill(p []byte, off int64) {
	for len(p) > 0 {
		blk, in := off/blockSize, int(off%blockSize)
		n := copy(p, c.base[in:])
		if in < 8 {
			var hdr [8]byte
			binary.LittleEndian.PutUint64(hdr[:], uint64(blk)^c.seed)
			copy(p[:min(n, 8-in)], hdr[in:])
		}
		p, off = p[n:], off+int64(n)
	}
}

// bytes is the whole body, for small objects.
func (c content) bytes() []byte {
	b := make([]byte, c.size)
	c.fill(b, 0)
	return b
}

// verifier is an io.Writer that checks a body as it streams by, against
// the content, without keeping it.
type verifier struct {
	c        content
	n        int64 // bytes seen
	firstBad int64 // offset of the first wrong byte; -1 if none
	scratch  []byte
}

func newVerifier(c content) *verifier {
	return &verifier{c: c, firstBad: -1}
}

func (v *verifier) Write(p []byte) (int, error) {
	if v.n+int64(len(p)) > v.c.size {
		if v.firstBad < 0 {
			v.firstBad = v.c.size
		}
		v.n += int64(len(p))
		return len(p), nil
	}
	if cap(v.scratch) < len(p) {
		v.scratch = make([]byte, len(p))
	}
	want := v.scratch[:len(p)]
	v.c.fill(want, v.n)
	if v.firstBad < 0 && !bytes.Equal(p, want) {
		for i := range p {
			if p[i] != want[i] {
				v.firstBad = v.n + int64(i)
				break
			}
		}
	}
	v.n += int64(len(p))
	return len(p), nil
}

// check reports whether the body seen so far is a correct prefix, or with
// complete, the whole body.
func (v *verifier) check(complete bool) error {
	switch {
	case v.firstBad >= 0:
		return fmt.Errorf("wrong byte at offset %d (of %d seen, %d expected)", v.firstBad, v.n, v.c.size)
	case complete && v.n != v.c.size:
		return fmt.Errorf("%d bytes, want %d", v.n, v.c.size)
	}
	return nil
}
