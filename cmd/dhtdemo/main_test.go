package main

import (
	"fmt"
	"net"
	"testing"
)

// freePort finds a UDP port free on every address the demo will use.
func freePort(t *testing.T, nodes int) int {
	t.Helper()
	for port := 47000; port < 48000; port++ {
		ok := true
		var conns []net.PacketConn
		for i := range nodes {
			c, err := net.ListenPacket("udp", fmt.Sprintf("127.0.0.%d:%d", i+2, port))
			if err != nil {
				ok = false
				break
			}
			conns = append(conns, c)
		}
		for _, c := range conns {
			c.Close()
		}
		if ok {
			return port
		}
	}
	t.Fatal("no free port")
	return 0
}

// TestDemo runs the demo on real sockets; run itself fails unless the
// put, get and put+get steps behave (exactly one origin fetch).
func TestDemo(t *testing.T) {
	if err := run(6, freePort(t, 6)); err != nil {
		t.Fatal(err)
	}
}

func TestDemoRejectsBadSize(t *testing.T) {
	if err := run(1, 4000); err == nil {
		t.Fatal("one node accepted")
	}
}
