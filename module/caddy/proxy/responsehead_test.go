package proxy

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"math/rand/v2"

	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// streamingOrigin accepts connections, reads one request head, and hands
// it and the connection to serve.
func streamingOrigin(t *testing.T, serve func(c net.Conn, request string)) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				buf := make([]byte, 4096)
				var req []byte
				for !bytes.Contains(req, []byte("\r\n\r\n")) {
					n, err := c.Read(buf)
					if err != nil {
						return
					}
					req = append(req, buf[:n]...)
				}
				serve(c, string(req))
			}()
		}
	}()
	ap := netip.MustParseAddrPort(ln.Addr().String())
	return fmt.Sprintf("%s.%d.nyud.test", ap.Addr(), ap.Port())
}

// TestTransferCodedEndlessHead: an origin whose Transfer-Encoding net/http
// refuses, and which sends the proxy's own fetch of it (Connection: close)
// a head that never ends, gets a 502 as soon as the head passes
// maxHeadBytes. The proxy used to read that head without a bound until
// origin_timeout (with none configured, for ever), its heap growing with
// every line.
func TestTransferCodedEndlessHead(t *testing.T) {
	sent := make(chan int64, 1)
	host := streamingOrigin(t, func(c net.Conn, req string) {
		if !strings.Contains(req, "Connection: close") {
			// To net/http's transport: a head it refuses.
			io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
			return
		}
		var n int64
		defer func() { sent <- n }()
		w := func(s string) bool {
			k, err := io.WriteString(c, s)
			n += int64(k)
			return err == nil
		}
		if !w("HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n") {
			return
		}
		line := "X-Filler: " + strings.Repeat("a", 1000) + "\r\n"
		for n < 1<<30 && w(line) {
		}
	})
	p := startLocalProxy(t, 0, func(c *Config, _ *diskcache.Options) { c.OriginTimeout = time.Minute })
	// No wall-clock bound on the proxy's work but this: well before
	// origin_timeout, whatever the machine's load.
	p.srv.Client().Timeout = 30 * time.Second
	resp, _ := p.get(t, host, "/endless")
	if resp.StatusCode != http.StatusBadGateway {
		t.Fatalf("endless head: %d, want 502", resp.StatusCode)
	}
	// The origin wrote until the proxy closed the connection: what the
	// socket buffers hold besides is a few MiB at most, never the 1 GiB
	// it would write to a reader without a bound.
	if n := <-sent; n >= 1<<30 {
		t.Errorf("the origin wrote %d bytes before the proxy gave up", n)
	}
}

// TestReadHeadBounds: readHead, the proxy's own head reader, refuses
// heads beyond each bound with errHeadTooLarge, malformed ones with
// errMalformedHead, and gives up at its deadline; a head within the
// bounds comes back whole, interim responses skipped.
func TestReadHeadBounds(t *testing.T) {
	field := func(i int) string { return fmt.Sprintf("X-F%d: v\r\n", i) }
	many := func(n int) string {
		var b strings.Builder
		for i := range n {
			b.WriteString(field(i))
		}
		return b.String()
	}
	for _, tc := range []struct {
		name, head string
		endless    bool // then filler lines for ever
		want       error
	}{
		{"endless fields", "HTTP/1.1 200 OK\r\n", true, errHeadTooLarge},
		{"long line", "HTTP/1.1 200 OK\r\nX-Long: " + strings.Repeat("a", maxHeadLine) + "\r\n\r\n", false, errHeadTooLarge},
		{"too many fields", "HTTP/1.1 200 OK\r\n" + many(maxHeadFields+1) + "\r\n", false, errHeadTooLarge},
		{"too many interim", strings.Repeat("HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n", maxInterimResponses+1) + "HTTP/1.1 200 OK\r\n\r\n", false, errHeadTooLarge},
		{"interim heads add up", strings.Repeat("HTTP/1.1 103 Early Hints\r\n"+strings.Repeat("X-Hint: "+strings.Repeat("h", 300)+"\r\n", 40)+"\r\n", 8) + "HTTP/1.1 200 OK\r\n\r\n", false, errHeadTooLarge},
		{"obs-fold", "HTTP/1.1 200 OK\r\nX-A: a\r\n folded\r\n\r\n", false, errMalformedHead},
		{"space before colon", "HTTP/1.1 200 OK\r\nX-A : a\r\n\r\n", false, errMalformedHead},
		{"control in value", "HTTP/1.1 200 OK\r\nX-A: a\x00b\r\n\r\n", false, errMalformedHead},
		{"not HTTP/1", "HTTP/2.0 200 OK\r\n\r\n", false, errMalformedHead},
		{"bad status", "HTTP/1.1 2000 OK\r\n\r\n", false, errMalformedHead},
	} {
		t.Run(tc.name, func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			go func() {
				defer server.Close()
				if _, err := io.WriteString(server, tc.head); err != nil || !tc.endless {
					return
				}
				for {
					if _, err := io.WriteString(server, "X-Filler: "+strings.Repeat("b", 100)+"\r\n"); err != nil {
						return
					}
				}
			}()
			_, _, _, _, err := readHead(client, time.Minute)
			if !errors.Is(err, tc.want) {
				t.Fatalf("err %v, want %v", err, tc.want)
			}
		})
	}
	t.Run("within bounds", func(t *testing.T) {
		client, server := net.Pipe()
		defer client.Close()
		head := "HTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" +
			"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\nX-Many: " +
			strings.Repeat("c", maxHeadLine-100) + "\r\n" + many(maxHeadFields-4) + "\nbody"
		go func() {
			defer server.Close()
			io.WriteString(server, head)
		}()
		resp, codings, br, src, err := readHead(client, time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != 200 || strings.Join(codings, ",") != "gzip,chunked" || resp.Header.Get("Content-Length") != "" || len(resp.Header.Get("X-Many")) != maxHeadLine-100 {
			t.Errorf("%d %q %v", resp.StatusCode, codings, resp.Header)
		}
		body, _ := io.ReadAll(br)
		if string(body) != "body" || src.n != int64(len(head)) {
			t.Errorf("body %q, %d bytes counted, want %d", body, src.n, len(head))
		}
	})
	t.Run("deadline", func(t *testing.T) {
		synctest.Test(t, func(t *testing.T) {
			client, server := net.Pipe()
			defer client.Close()
			defer server.Close()
			go io.WriteString(server, "HTTP/1.1 200 OK\r\nX-A: a\r\n")
			start := time.Now()
			_, _, _, _, err := readHead(client, 15*time.Second)
			var ne net.Error
			if !errors.As(err, &ne) || !ne.Timeout() {
				t.Fatalf("err %v, want a timeout", err)
			}
			if d := time.Since(start); d != 15*time.Second {
				t.Errorf("gave up after %v, want 15s", d)
			}
		})
	})
}

// TestTransferCodingDecodeBounds: a transfer-coded body is cut off once it
// decodes to more than maxTransferCodingRatio times the bytes received
// (plus transferCodingAllowance), and once it decodes past
// max_object_size, also when it is relayed uncached; neither is stored,
// and no client gets either whole with a clean end.
// The proxy used to decode a gzip bomb whole (4 MiB from 4 KiB here) and
// cache it.
func TestTransferCodingDecodeBounds(t *testing.T) {
	gz := func(b []byte) string {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		zw.Write(b)
		zw.Close()
		return buf.String()
	}
	bomb := gz(make([]byte, 4<<20))
	// Little to compress: a body that stays within the ratio.
	noisy := make([]byte, 3<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range noisy {
		noisy[i] = byte(rng.Uint32())
	}
	noisyGz := gz(noisy)
	o := newRawOrigin(t)
	o.reply["/bomb"] = "Cache-Control: max-age=600\r\nTransfer-Encoding: gzip\r\nConnection: close\r\n\r\n" + bomb
	o.reply["/large"] = "Cache-Control: max-age=600\r\nTransfer-Encoding: gzip\r\nConnection: close\r\n\r\n" + noisyGz
	// The bomb within max_object_size (8 MiB by default here), the
	// noisy body beyond it.
	p := startLocalProxy(t, 0, nil)
	small := startLocalProxy(t, 0, func(c *Config, so *diskcache.Options) { so.MaxObjectBytes = 2 << 20 })
	getAll := func(p *localProxy, path string) (int, int64, error) {
		req, _ := http.NewRequestWithContext(context.Background(), http.MethodGet, p.srv.URL+path, nil)
		req.Host = o.coralHost()
		resp, err := p.srv.Client().Do(req)
		if err != nil {
			return 0, 0, err
		}
		defer resp.Body.Close()
		n, err := io.Copy(io.Discard, resp.Body)
		return resp.StatusCode, n, err
	}
	limit := int64(maxTransferCodingRatio*(len(bomb)+4096) + transferCodingAllowance + 64<<10)
	for i := range 2 {
		status, n, err := getAll(p, "/bomb")
		// Cut off: a 502 when it happened before the client's reader
		// opened the object, else a body that ends in an error.
		if (status == http.StatusOK && err == nil) || n >= 4<<20 || n > limit {
			t.Errorf("bomb, request %d: %d, %d bytes decoded from %d, err %v; want it cut off within %d", i, status, n, len(bomb), err, limit)
		}
		p.idle(t)
	}
	// The first request stores it until max_object_size cuts it; the
	// second is relayed uncached (tooLarge), and the decoder cuts it.
	for i := range 2 {
		status, n, err := getAll(small, "/large")
		if (status == http.StatusOK && err == nil) || n >= int64(len(noisy)) || n > 2<<20+64<<10 {
			t.Errorf("large, request %d: %d, %d of %d bytes, err %v; want it cut off at max_object_size", i, status, n, len(noisy), err)
		}
		small.idle(t)
	}
	for path, p := range map[string]*localProxy{"/bomb": p, "/large": small} {
		tg, _ := parseTarget(o.coralHost(), "nyud.test", path, "")
		if _, ok := p.store.Peek(tg.Key()); ok {
			t.Errorf("%s stored", path)
		}
	}
}
