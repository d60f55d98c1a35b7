package coralcaddy

import (
	"bufio"
	"bytes"
	"io"
	"net"
	"net/http"
	"strconv"
	"syscall"
	"testing"
	"time"
)

// BenchmarkNetHTTPHeaderFields is net/http alone, without Caddy or
// coral_proxy, answering a 1 KiB GET over a keep-alive loopback connection
// with a response whose header map holds n fields: those of a coral_proxy
// hit of the benchmark's origin, the first n of them (Server is the one
// Caddy sets on every response). It is the cost a hit's header fields put
// on the host server whoever sets them, and it is not linear: Go keeps a
// map of up to 8 entries in one small group and moves a larger one to a
// table, and net/http copies the handler's map when the head is written
// (Header.Clone) before it sorts and writes the fields. Going from 8
// fields to 9 adds allocations and about as much time per response as
// going from 3 to 8 (module/caddy/README.md, "The cost of a hit's header
// fields"). A cache's hit carries 10 at the least; Caddy's bare respond
// carries 3.
func BenchmarkNetHTTPHeaderFields(b *testing.B) {
	fields := [][2]string{
		{"Server", "Caddy"},
		{"Content-Type", "application/octet-stream"},
		{"Content-Length", "1024"},
		{"Cache-Control", "public, max-age=86400"},
		{"Last-Modified", "Thu, 26 Nov 2026 20:00:00 GMT"},
		{"Date", "Thu, 26 Nov 2026 21:00:00 GMT"},
		{"Cache-Status", `coral; hit; detail="local"`},
		{"Age", "0"},
		{"Via", "1.1 coral"},
		{"Accept-Ranges", "bytes"},
	}
	body := bytes.Repeat([]byte("x"), 1024)
	// head: what net/http does with the map alone, in the order it does
	// it for a response: the handler's fields set into a map made without
	// a size, the map cloned when the head is written, the fields net/http
	// looks up, and the head sorted and written.
	for _, n := range []int{3, 8, 9, 10} {
		b.Run("head/"+strconv.Itoa(n), func(b *testing.B) {
			values := make([][]string, n)
			for i := range n {
				values[i] = []string{fields[i][1]}
			}
			bw := bufio.NewWriter(io.Discard)
			b.ReportAllocs()
			for b.Loop() {
				hdr := make(http.Header)
				for i := range n {
					hdr[fields[i][0]] = values[i]
				}
				sent := hdr.Clone()
				for _, k := range []string{"Content-Length", "Transfer-Encoding", "Connection", "Content-Type", "Date"} {
					_ = sent.Get(k)
				}
				if err := sent.Write(bw); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
	// conn: the whole response from a net/http server over loopback.
	for _, n := range []int{3, 8, 9, 10} {
		b.Run("conn/"+strconv.Itoa(n), func(b *testing.B) {
			values := make([][]string, n)
			for i := range n {
				values[i] = []string{fields[i][1]}
			}
			h := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
				hdr := w.Header()
				for i := range n {
					hdr[fields[i][0]] = values[i] // as a hit shares its stored slices
				}
				w.Write(body)
			})
			ln, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				b.Fatal(err)
			}
			srv := &http.Server{Handler: h}
			go srv.Serve(ln)
			defer srv.Close()
			conn, err := net.Dial("tcp", ln.Addr().String())
			if err != nil {
				b.Fatal(err)
			}
			defer conn.Close()
			req := []byte("GET /1k HTTP/1.1\r\nHost: bench\r\n\r\n")
			br := bufio.NewReader(conn)
			// The head is what it should be: the n fields, and net/http's
			// own Date unless the handler set one.
			if _, err := conn.Write(req); err != nil {
				b.Fatal(err)
			}
			resp, err := http.ReadResponse(br, nil)
			if err != nil {
				b.Fatal(err)
			}
			got, err := io.ReadAll(resp.Body)
			if err != nil {
				b.Fatal(err)
			}
			want := n
			if n < 6 {
				want++ // Date
			}
			if len(resp.Header) != want || !bytes.Equal(got, body) {
				b.Fatalf("%d fields and %d octets; want %d and %d: %v", len(resp.Header), len(got), want, len(body), resp.Header)
			}
			// Then the client only skips the head, the same work for every
			// n, so that what changes with n is the server's.
			head := make([]byte, 0, 512)
			b.ReportAllocs()
			cpu0 := processCPU()
			for b.Loop() {
				if _, err := conn.Write(req); err != nil {
					b.Fatal(err)
				}
				head = head[:0]
				for !bytes.HasSuffix(head, []byte("\r\n\r\n")) {
					line, err := br.ReadSlice('\n')
					if err != nil {
						b.Fatal(err)
					}
					head = append(head, line...)
				}
				if _, err := br.Discard(len(body)); err != nil {
					b.Fatal(err)
				}
			}
			// CPU time, client and server: steadier than the time per
			// round trip, which includes waiting on loopback.
			b.ReportMetric(float64(processCPU()-cpu0)/float64(b.N), "cpu-ns/op")
		})
	}
}

// processCPU is the CPU time this process has used.
func processCPU() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
