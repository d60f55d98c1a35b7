package proxylab

import (
	"bytes"
	"fmt"
	"io"
	"io/fs"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
)

// Bounds on what the proxy reads from an origin, and on the disk that
// clients reading from the cache can make it hold, checked against
// bin/caddy.

// TestTransferCodedHeadBounded: an origin answers net/http's fetch with a
// Transfer-Encoding it refuses ("gzip, chunked"), and the proxy's own
// fetch of the same URL with a head that never ends. The proxy answers
// 502 once the head passes 64 KiB, long before origin_timeout, and its
// memory does not grow with what the origin sends. It used to read the
// head without a bound until origin_timeout: one such request grew the
// heap by about 2 GB in 15 s.
func TestTransferCodedHeadBounded(t *testing.T) {
	ln, err := net.Listen("tcp", netip.AddrPortFrom(originIP, 0).String())
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var endless atomic.Int64 // bytes of endless head sent
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go serveEndlessHead(c, &endless)
		}
	}()
	ap := netip.MustParseAddrPort(ln.Addr().String())
	host := fmt.Sprintf("%s.%d.%s", ap.Addr(), ap.Port(), zone)
	p := startOne(t, netip.MustParseAddr("127.0.79.41"), proxyOptions{extra: []string{"origin_timeout 20s"}})
	rss0, _, err := memory(p.pid())
	if err != nil {
		t.Fatal(err)
	}
	if err := resetPeak(p.pid()); err != nil {
		t.Logf("cannot reset VmHWM (%v): the peak below includes start-up", err)
	}
	c := newClient(t)
	c.Timeout = 15 * time.Second // well within origin_timeout, whatever the load
	resp, body, err := fetch(c, p, host, "/endless")
	_, hwm, merr := memory(p.pid())
	if merr != nil {
		t.Fatal(merr)
	}
	if err != nil {
		t.Fatalf("no answer within %v (origin_timeout 20s): %v; the origin sent %d bytes of head; RSS %d MiB before, peak %d MiB",
			c.Timeout, err, endless.Load(), rss0>>20, hwm>>20)
	}
	t.Logf("502 after the origin sent %d bytes of head; RSS %d MiB before, peak %d MiB", endless.Load(), rss0>>20, hwm>>20)
	if resp.StatusCode != http.StatusBadGateway {
		t.Errorf("%d %q, want 502", resp.StatusCode, errorText(resp, body))
	}
	// Generous: a bounded reader costs 64 KiB; an unbounded one grows by
	// about as much as the origin manages to send.
	if grew := hwm - rss0; grew > 64<<20 {
		t.Errorf("the proxy's memory peaked %d MiB above where it started", grew>>20)
	}
}

// serveEndlessHead answers a request on c: net/http's (keep-alive) with a
// head whose Transfer-Encoding it refuses, the proxy's own fetch
// (Connection: close) with a head that never ends.
func serveEndlessHead(c net.Conn, sent *atomic.Int64) {
	defer c.Close()
	var req []byte
	buf := make([]byte, 4096)
	for !bytes.Contains(req, []byte("\r\n\r\n")) {
		n, err := c.Read(buf)
		if err != nil {
			return
		}
		req = append(req, buf[:n]...)
	}
	if !bytes.Contains(bytes.ToLower(req), []byte("connection: close")) {
		io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n")
		return
	}
	if _, err := io.WriteString(c, "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n"); err != nil {
		return
	}
	line := []byte("X-Filler: " + strings.Repeat("a", 4000) + "\r\n")
	for sent.Load() < 8<<30 {
		n, err := c.Write(line)
		sent.Add(int64(n))
		if err != nil {
			return
		}
	}
}

// TestStalledReadersDiskBounded is the stalled readers: clients
// that request an object and then read nothing, while the object changes
// every second (max-age=1, so each request after that revalidates and
// stores a new version). Each client holds the version it started on
// open, unlinked once the next one commits. What the disk holds, the cache
// directory plus the unlinked files the proxy keeps open, must stay within
// cache_size (slack: the store's own small files). It used to grow by a
// whole version for every stalled client, past cache_size and on until
// the file system was full.
func TestStalledReadersDiskBounded(t *testing.T) {
	const (
		cacheSize = 32 << 20
		size      = 6 << 20 // per version: more than the socket buffers of a client that reads nothing
		clients   = 30
		slack     = 1 << 20
	)
	o := newOrigin(t)
	p := startOne(t, netip.MustParseAddr("127.0.79.42"), proxyOptions{extra: []string{
		"cache_size 32MiB", "max_object_size 8MiB", "min_ttl 0", "write_idle_timeout 2m",
		// All the stalled clients come from 127.0.0.1: the per-client
		// bound on download slots (8 of an origin's by default) would
		// refuse the ninth relayed download, and this test is about disk.
		"max_downloads 256 64 64",
	}})
	// The proxy runs in its directory; the lab's Caddyfile puts the cache
	// in "cache" there.
	cwd, err := os.Readlink(fmt.Sprintf("/proc/%d/cwd", p.pid()))
	if err != nil {
		t.Fatal(err)
	}
	cacheDir := filepath.Join(cwd, "cache")
	path := fmt.Sprintf("/changing.bin?size=%d&maxage=1", size)
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	defer func() {
		for _, c := range conns {
			c.Close()
		}
	}()
	var peak, peakDir, peakUnlinked int64
	measure := func() {
		dir, unlinked := diskUse(t, cacheDir, p.pid())
		if dir+unlinked > peak {
			peak, peakDir, peakUnlinked = dir+unlinked, dir, unlinked
		}
	}
	for i := range clients {
		c := stalledClient(t, p, o.coralHost(), path)
		mu.Lock()
		conns = append(conns, c)
		mu.Unlock()
		// Spread over about eight seconds: eight or so versions.
		for range 5 {
			measure()
			time.Sleep(50 * time.Millisecond)
		}
		if i%10 == 9 {
			t.Logf("%d stalled clients: peak so far %d MiB (%d in the directory, %d open unlinked)", i+1, peak>>20, peakDir>>20, peakUnlinked>>20)
		}
	}
	measure()
	st, err := p.status()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%d stalled clients, %d origin fetches: disk peaked at %d MiB (%d in the directory, %d in open unlinked files) for cache_size %d MiB; status: %+v",
		clients, o.count("/changing.bin"), peak>>20, peakDir>>20, peakUnlinked>>20, cacheSize>>20, st.Caches)
	if o.count("/changing.bin") < 3 {
		t.Errorf("the origin was asked %d times: the object did not change under the clients", o.count("/changing.bin"))
	}
	if peak > cacheSize+slack {
		t.Errorf("the cache took %d bytes on disk (%d in its directory, %d in unlinked files held open) for cache_size %d",
			peak, peakDir, peakUnlinked, cacheSize)
	}
	// Everyone else is still served, cached or not.
	c := newClient(t)
	if resp, body, err := fetch(c, p, o.coralHost(), "/other.bin?size=1000"); err != nil || resp.StatusCode != http.StatusOK || len(body) != 1000 {
		t.Errorf("another object while the clients stall: %v %v", err, resp)
	}
}

// stalledClient sends a GET for path and reads only the first bytes of the
// answer, with a receive buffer so small that the rest stays with the
// proxy.
func stalledClient(t *testing.T, p *proxy, host, path string) net.Conn {
	t.Helper()
	d := net.Dialer{Timeout: 5 * time.Second, Control: func(_, _ string, rc syscall.RawConn) error {
		return rc.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	c, err := d.Dial("tcp", netip.AddrPortFrom(p.ip, httpPort).String())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(c, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", path, host); err != nil {
		t.Fatal(err)
	}
	c.SetReadDeadline(time.Now().Add(30 * time.Second))
	if _, err := io.ReadFull(c, make([]byte, 256)); err != nil {
		t.Fatalf("a stalled client's first bytes: %v", err)
	}
	return c
}

// diskUse is what the cache takes on disk: the space allocated to the
// files under dir, and to the files process pid holds open under dir that
// have been unlinked. Each file counts once (by inode), however many
// clients read it, and when the store unlinks it between the two scans.
func diskUse(t *testing.T, dir string, pid int) (files, unlinked int64) {
	t.Helper()
	seen := map[[2]uint64]bool{}
	_ = filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() {
			return nil
		}
		var st syscall.Stat_t
		if syscall.Lstat(p, &st) == nil && !seen[[2]uint64{st.Dev, st.Ino}] {
			seen[[2]uint64{st.Dev, st.Ino}] = true
			files += st.Blocks * 512
		}
		return nil
	})
	fdDir := fmt.Sprintf("/proc/%d/fd", pid)
	ents, err := os.ReadDir(fdDir)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range ents {
		target, err := os.Readlink(filepath.Join(fdDir, e.Name()))
		if err != nil || !strings.HasPrefix(target, dir+"/") || !strings.HasSuffix(target, " (deleted)") {
			continue
		}
		var st syscall.Stat_t
		if syscall.Stat(filepath.Join(fdDir, e.Name()), &st) == nil && st.Nlink == 0 {
			if id := [2]uint64{st.Dev, st.Ino}; !seen[id] {
				seen[id] = true
				unlinked += st.Blocks * 512
			}
		}
	}
	return files, unlinked
}
