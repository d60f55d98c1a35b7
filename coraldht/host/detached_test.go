package host

import (
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coraldht/memnet"
)

// TestDetached: an Instance around a hand-built node reads as one host
// started (node, address, start, joined), is not among the running ones,
// and never reports itself stopped.
func TestDetached(t *testing.T) {
	addr := netip.MustParseAddrPort("127.0.187.1:4000")
	tr, err := memnet.New(memnet.Config{}).Listen(addr)
	if err != nil {
		t.Fatal(err)
	}
	node, err := coraldht.NewNode(coraldht.DefaultConfig(), tr)
	if err != nil {
		t.Fatal(err)
	}
	defer node.Close()
	start := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	joined := Detached(node, start, true)
	if joined.Node() != node || joined.Listen() != addr || !joined.Started().Equal(start) || !joined.Joined() {
		t.Errorf("joined: node %p (want %p), listen %v, started %v, joined %v", joined.Node(), node, joined.Listen(), joined.Started(), joined.Joined())
	}
	select {
	case <-joined.WhenJoined():
	default:
		t.Error("WhenJoined is open for a joined instance")
	}
	waiting := Detached(node, time.Time{}, false)
	if waiting.Joined() || !waiting.Started().IsZero() {
		t.Errorf("not joined: joined %v, started %v", waiting.Joined(), waiting.Started())
	}
	select {
	case <-waiting.WhenJoined():
		t.Error("WhenJoined is closed for an instance that has not joined")
	case <-waiting.Stopped():
		t.Error("a detached instance reports itself stopped")
	default:
	}
	if slices.Contains(Running(), joined) || slices.Contains(Running(), waiting) {
		t.Error("a detached instance is listed as running")
	}
}
