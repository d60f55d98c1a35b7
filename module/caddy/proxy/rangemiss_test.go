package proxy

import (
	"bufio"
	"bytes"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// rangeOrigin serves one 8 MiB object at every path, with an ETag and a
// Last-Modified. With ranges it answers Range requests as net/http does
// (206); without, it always sends the whole 200. Whole responses stop
// after their first 64 KiB until release is called, so a test can hold a
// download in progress.
type rangeOrigin struct {
	srv      *httptest.Server
	body     []byte
	ranges   bool
	gate     chan struct{}
	once     sync.Once
	mu       sync.Mutex
	requests []string // the Range field of each request ("" for none)
}

const rangeObjectSize = 8 << 20

var rangeModTime = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

func newRangeOrigin(t *testing.T, ranges bool) *rangeOrigin {
	t.Helper()
	o := &rangeOrigin{ranges: ranges, gate: make(chan struct{})}
	o.body = make([]byte, rangeObjectSize)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range o.body {
		o.body[i] = byte(rng.Uint32())
	}
	o.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		o.mu.Lock()
		o.requests = append(o.requests, r.Header.Get("Range"))
		o.mu.Unlock()
		w.Header().Set("Cache-Control", "max-age=3600")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Header().Set("Etag", `"v1"`)
		w.Header().Set("Last-Modified", rangeModTime.Format(http.TimeFormat))
		if o.ranges && r.Header.Get("Range") != "" {
			http.ServeContent(w, r, "", rangeModTime, bytes.NewReader(o.body))
			return
		}
		w.Header().Set("Content-Length", strconv.Itoa(len(o.body)))
		w.Write(o.body[:64<<10])
		w.(http.Flusher).Flush()
		select {
		case <-o.gate:
		case <-r.Context().Done():
			return
		}
		w.Write(o.body[64<<10:])
	}))
	t.Cleanup(o.srv.Close)
	t.Cleanup(o.release)
	return o
}

func (o *rangeOrigin) release() { o.once.Do(func() { close(o.gate) }) }

func (o *rangeOrigin) coralHost() string {
	ap := netip.MustParseAddrPort(o.srv.Listener.Addr().String())
	return fmt.Sprintf("%s.%d.nyud.test", ap.Addr(), ap.Port())
}

func (o *rangeOrigin) rangeRequests() []string {
	o.mu.Lock()
	defer o.mu.Unlock()
	return append([]string(nil), o.requests...)
}

// rawGet sends a GET through the proxy and returns the status, header and
// every body byte that crossed the client's socket.
func (p *localProxy) rawGet(t *testing.T, host, path string, hdr ...string) (*http.Response, []byte) {
	t.Helper()
	c, err := net.Dial("tcp", p.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	c.SetDeadline(time.Now().Add(20 * time.Second))
	req := "GET " + path + " HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n"
	for i := 0; i+1 < len(hdr); i += 2 {
		req += hdr[i] + ": " + hdr[i+1] + "\r\n"
	}
	if _, err := io.WriteString(c, req+"\r\n"); err != nil {
		t.Fatal(err)
	}
	raw, err := io.ReadAll(c)
	if err != nil {
		t.Fatal(err)
	}
	head, body, ok := bytes.Cut(raw, []byte("\r\n\r\n"))
	if !ok {
		t.Fatalf("no response head in %q", raw)
	}
	resp, err := http.ReadResponse(bufio.NewReader(bytes.NewReader(append(head, "\r\n\r\n"...))), nil)
	if err != nil {
		t.Fatal(err)
	}
	return resp, body
}

// TestRangeOnMiss (issue 42): a Range request for an object not in the
// cache is answered 206 with the range alone (no more crosses the client's
// socket), whether the origin does ranges or not, and with an origin that
// does, while the whole object's download is still held up at the origin
// (the client does not wait for it); the whole object lands in the cache
// meanwhile, and later ranges are hits.
func TestRangeOnMiss(t *testing.T) {
	for _, ranges := range []bool{true, false} {
		t.Run(fmt.Sprintf("origin ranges %v", ranges), func(t *testing.T) {
			o := newRangeOrigin(t, ranges)
			if !ranges {
				// The proxy reads the range out of the whole body: it needs
				// the bytes up to the range's end from the origin.
				o.release()
			}
			p := startLocalProxy(t, 256<<20, nil)
			for i, tc := range []struct {
				rng         string
				first, last int
			}{
				{"bytes=0-1023", 0, 1023},
				{"bytes=4000000-4001023", 4000000, 4001023},
				{"bytes=-100", rangeObjectSize - 100, rangeObjectSize - 1},
				{"bytes=8388000-", 8388000, rangeObjectSize - 1},
			} {
				// Each on its own URL: cold, and the whole object's download
				// (stopped at 64 KiB by the origin) still in progress.
				path := "/obj" + strconv.Itoa(i)
				resp, body := p.rawGet(t, o.coralHost(), path, "Range", tc.rng)
				if resp.StatusCode != http.StatusPartialContent {
					t.Fatalf("%s: status %d, want 206", tc.rng, resp.StatusCode)
				}
				want := fmt.Sprintf("bytes %d-%d/%d", tc.first, tc.last, rangeObjectSize)
				if got := resp.Header.Get("Content-Range"); got != want {
					t.Errorf("%s: Content-Range %q, want %q", tc.rng, got, want)
				}
				if !bytes.Equal(body, o.body[tc.first:tc.last+1]) {
					t.Errorf("%s: %d bytes crossed the client socket, want exactly the %d of the range", tc.rng, len(body), tc.last-tc.first+1)
				}
				// A range joining the download in progress: 206 too.
				resp, body = p.rawGet(t, o.coralHost(), path, "Range", "bytes=100-199")
				if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, o.body[100:200]) {
					t.Errorf("a range joining the download: %d, %d bytes", resp.StatusCode, len(body))
				}
			}
			if asked := o.rangeRequests(); ranges && !slices.Contains(asked, "bytes=0-1023") {
				t.Errorf("the origin with ranges was asked %q, not the client's range", asked)
			}
			o.release()
			p.idle(t)
			resp, body := p.rawGet(t, o.coralHost(), "/obj1", "Range", "bytes=10-19")
			if resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, o.body[10:20]) || !strings.Contains(resp.Header.Get("Cache-Status"), "hit") {
				t.Errorf("a range of the object once cached: %d %q, %d bytes", resp.StatusCode, resp.Header.Get("Cache-Status"), len(body))
			}
			resp, body = p.rawGet(t, o.coralHost(), "/obj1")
			if resp.StatusCode != http.StatusOK || !bytes.Equal(body, o.body) {
				t.Errorf("the whole object once cached: %d, %d bytes", resp.StatusCode, len(body))
			}
		})
	}
}

// TestRangeOnMissIfRange: If-Range with the object's strong ETag or exact
// Last-Modified gets the range; with another validator, or a weak tag,
// the whole 200 (RFC 9110 §13.1.5), from origins with and without ranges.
func TestRangeOnMissIfRange(t *testing.T) {
	for _, ranges := range []bool{true, false} {
		t.Run(fmt.Sprintf("origin ranges %v", ranges), func(t *testing.T) {
			o := newRangeOrigin(t, ranges)
			o.release() // whole responses need not wait here
			p := startLocalProxy(t, 256<<20, nil)
			for i, tc := range []struct {
				ifRange string
				partial bool
			}{
				{`"v1"`, true},
				{rangeModTime.Format(http.TimeFormat), true},
				{`"v0"`, false},
				{`W/"v1"`, false},
				{rangeModTime.Add(-time.Hour).Format(http.TimeFormat), false},
			} {
				path := "/if" + strconv.Itoa(i)
				resp, body := p.rawGet(t, o.coralHost(), path, "Range", "bytes=0-99", "If-Range", tc.ifRange)
				switch {
				case tc.partial && (resp.StatusCode != http.StatusPartialContent || !bytes.Equal(body, o.body[:100])):
					t.Errorf("If-Range %s: %d, %d bytes; want 206 and the range", tc.ifRange, resp.StatusCode, len(body))
				case !tc.partial && (resp.StatusCode != http.StatusOK || !bytes.Equal(body, o.body)):
					t.Errorf("If-Range %s: %d, %d bytes; want 200 and the whole object", tc.ifRange, resp.StatusCode, len(body))
				}
			}
		})
	}
}

func TestParseSingleRange(t *testing.T) {
	for _, tc := range []struct {
		in   string
		ok   bool
		want byteRange
	}{
		{"bytes=0-1023", true, byteRange{first: 0, last: 1023}},
		{"bytes=5-", true, byteRange{first: 5, last: -1}},
		{"bytes=-7", true, byteRange{suffix: 7, last: -1}},
		{"bytes=0-1,5-6", false, byteRange{}},
		{"bytes=5-4", false, byteRange{}},
		{"bytes=-0", false, byteRange{}},
		{"bytes=+1-2", false, byteRange{}},
		{"items=0-1", false, byteRange{}},
		{"bytes=", false, byteRange{}},
	} {
		got, ok := parseSingleRange(tc.in)
		if ok != tc.ok || (ok && got != tc.want) {
			t.Errorf("parseSingleRange(%q) = %+v, %v; want %+v, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}
