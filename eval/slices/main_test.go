package main

import (
	"bytes"
	"context"
	"os"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
)

// TestShort runs the experiment small (a 12 MiB file in 1 MiB slices, an
// 8 MiB range object, two clients per proxy) against bin/caddy, and holds
// it to the acceptance lines: every client gets every byte, the origin
// sends the file about once (each slice once: the table's ratio, with
// what its socket buffers held past slice 0 when the first fetch stopped
// there), and each cold range gets 206 with at most 1 MiB crossing the
// client's socket.
func TestShort(t *testing.T) {
	bin, err := labconf.Binary("caddy")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Second)
	defer cancel()
	res, err := run(ctx, params{Caddy: bin, Net: "127.0.94", Size: 12 << 20, RangeObject: 8 << 20, Slice: 1 << 20, Clients: 2})
	if err != nil {
		t.Fatal(err)
	}
	var out bytes.Buffer
	printTable(&out, res)
	t.Log("\n" + out.String())
	for _, c := range res.Crowd.Clients {
		if !c.Correct {
			t.Errorf("a client of proxy %d: status %d, %d bytes, error %q", c.Proxy, c.Status, c.Bytes, c.Error)
		}
	}
	if res.Crowd.RangesAskedTwice > 0 {
		t.Errorf("%d slices fetched from the origin more than once: %q", res.Crowd.RangesAskedTwice, res.Crowd.Asked)
	}
	// The file is 12 slices: the socket buffers past slice 0 weigh more
	// here than on 1 GiB (where the experiment holds it to 1.05).
	if res.Crowd.OriginBytes > res.Params.Size+8<<20 {
		t.Errorf("the origin sent %d bytes for a %d-byte file", res.Crowd.OriginBytes, res.Params.Size)
	}
	for _, r := range res.Ranges {
		if r.Status != 206 || !r.Correct || r.SocketBytes > 1<<20 {
			t.Errorf("%s: %d, %d bytes over the socket, correct %v", r.Case, r.Status, r.SocketBytes, r.Correct)
		}
	}
}
