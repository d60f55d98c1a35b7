package proxylab

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"testing"
	"time"
)

// TestStalledReaderGivesUpOriginSlot (issue 19, stalled readers) against
// the real bin/caddy: a response the cache does not take (here larger than
// max_object_size; in eval/hostile, a version refused because readers held
// its room) is relayed at its client's pace and holds an origin download
// slot meanwhile. A client that asked for it and never read kept that slot
// until write_idle_timeout (30 s), so the origin's next object waited
// download_wait and got 503. Now the next request takes the slot over once
// the relay's client has read nothing for 2 s, and the stalled relay is
// cut.
func TestStalledReaderGivesUpOriginSlot(t *testing.T) {
	o := newOrigin(t)
	p := startOne(t, netip.MustParseAddr("127.0.110.10"), proxyOptions{extra: []string{
		"max_downloads 64 1 1", "download_wait 10s",
	}})
	host := o.coralHost()

	// The stalled reader: a 1 GB object (beyond max_object_size, so
	// relayed), a small receive buffer, and no read.
	d := &net.Dialer{Timeout: 5 * time.Second, LocalAddr: &net.TCPAddr{IP: net.ParseIP("127.0.110.20")}}
	c, err := d.Dial("tcp", p.base()[len("http://"):])
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	if err := c.(*net.TCPConn).SetReadBuffer(4096); err != nil {
		t.Fatal(err)
	}
	if _, err := fmt.Fprintf(c, "GET /huge.bin?size=1000000000 HTTP/1.1\r\nHost: %s\r\n\r\n", host); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the huge object requested from the origin", 10*time.Second, []*proxy{p}, func() error {
		if o.counter("/huge.bin").Load() == 0 {
			return fmt.Errorf("not yet")
		}
		return nil
	})

	// Another client wants another object of the same origin: the one
	// slot is the stalled relay's.
	start := time.Now()
	resp, body, err := fetch(clientFrom(t, "127.0.110.21"), p, host, "/small.bin?size=1000")
	took := time.Since(start).Round(time.Millisecond)
	if err != nil {
		t.Fatalf("the next object of the origin: %v after %s", err, took)
	}
	if resp.StatusCode != http.StatusOK || len(body) != 1000 {
		t.Fatalf("the next object of the origin while a client that never reads holds its one slot: %d (%d bytes) after %s, want 200",
			resp.StatusCode, len(body), took)
	}
	if took > 6*time.Second {
		t.Errorf("served after %s: want about the 2 s a relay's client may stall while others wait", took)
	}
	t.Logf("the next object was served after %s", took)
}
