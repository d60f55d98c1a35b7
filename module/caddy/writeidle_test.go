package coralcaddy

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"syscall"
	"testing"
	"time"
)

// TestStalledClientDropped: a client that requests a cached object and
// then reads nothing is dropped after write_idle_timeout, and its cache
// Reader closed, so the version it holds open can leave the disk. Without
// a write deadline it held the Reader (and the file) for as long as it
// kept the connection open.
func TestStalledClientDropped(t *testing.T) {
	body := bytes.Repeat([]byte("stalled "), 2<<20) // 16 MiB: more than the socket buffers hold
	origin := newCountingOrigin(t, func(_ *countingOrigin, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Header().Set("Content-Type", "application/octet-stream")
		w.Write(body)
	})
	// write_idle_timeout also bounds the first GET below, whose client
	// reads all 16 MiB: at 300 ms a loaded machine that left that
	// client unscheduled for as long had it dropped ("body: unexpected
	// EOF", 2 runs in 10 at load average 21). How soon the stalled
	// client is dropped is not what is tested.
	const writeIdle = 3 * time.Second
	_, base := startProxy(t, "cache_size 256MiB", "max_object_size 64MiB", "write_idle_timeout "+writeIdle.String())
	store := newestHandler(t).store
	if resp, got := get(t, base, origin.coralHost(), "/big"); resp.StatusCode != http.StatusOK || len(got) != len(body) {
		t.Fatalf("%d, %d bytes", resp.StatusCode, len(got))
	}
	waitWritten(t, store)
	d := net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
		return c.Control(func(fd uintptr) { _ = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096) })
	}}
	c, err := d.Dial("tcp", strings.TrimPrefix(base, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if _, err := io.WriteString(c, "GET /big HTTP/1.1\r\nHost: "+origin.coralHost()+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	// Read the first bytes only, so the response is known to be under
	// way, then nothing.
	if _, err := io.ReadFull(c, make([]byte, 512)); err != nil {
		t.Fatal(err)
	}
	// No bound on how soon: only that it happens, well within this.
	deadline := time.Now().Add(60 * time.Second)
	for store.Stats().Readers != 0 {
		if time.Now().After(deadline) {
			t.Fatalf("a client that reads nothing still holds %d cache readers after 60 s (write_idle_timeout %s)", store.Stats().Readers, writeIdle)
		}
		time.Sleep(20 * time.Millisecond)
	}
	// The connection was closed: what is left to read ends.
	c.SetReadDeadline(time.Now().Add(60 * time.Second))
	n, err := io.Copy(io.Discard, c)
	if err != nil && !isReset(err) || n >= int64(len(body)) {
		t.Errorf("after the drop: %d more bytes, %v; want the connection closed short of the body", n, err)
	}
}

// isReset reports whether err is the peer resetting the connection.
func isReset(err error) bool { return errors.Is(err, syscall.ECONNRESET) }
