package coraldht

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
)

// Messages for the tests that feed a node datagrams. The codec's own tests
// (internal/wire) cover every field; these only need to be valid.

// Byte offsets in the fixed header, as PROTOCOL.md lays it out.
const (
	wireOffVersion   = 2
	wireOffTimestamp = 13
)

var (
	wireStamp    = time.Date(2025, 3, 1, 12, 0, 0, 123456789, time.UTC).UnixNano()
	wireKey      = KeyFor("http://example.com/index.html")
	wireTarget   = KeyFor("intermediate target")
	wireV4Sender = Contact{ID: NodeIDFor(netip.MustParseAddrPort("192.0.2.10:4000")),
		Addr: netip.MustParseAddrPort("192.0.2.10:4000"), Services: ServiceDNS | ServiceHTTP}
)

// wireClusters returns a cluster list at the given levels.
func wireClusters(levels ...int) []ClusterInfo {
	var cs []ClusterInfo
	for _, l := range levels {
		c := ClusterInfo{Level: l, Created: time.Unix(1_700_000_000, 0)}
		if l > 0 {
			c.ID = KeyFor("cluster " + string(rune('0'+l)))
		}
		cs = append(cs, c)
	}
	return cs
}

func wireEncode(t testing.TB, m *wire.Message) []byte {
	t.Helper()
	b, err := wire.Encode(nil, m)
	if err != nil {
		t.Fatalf("encode %+v: %v", m, err)
	}
	return b
}

// wirePing is a ping request from wireV4Sender.
func wirePing() *wire.Message {
	return &wire.Message{Type: wire.Ping, ReqID: 0x0102030405060708, Timestamp: wireStamp,
		Sender: wireV4Sender, Clusters: wireClusters(0, 1, 2)}
}

// fuzzSeeds returns valid encodings of a request and a reply of every
// message type, at level 0 where a node serves them.
func fuzzSeeds(t testing.TB) [][]byte {
	var out [][]byte
	for typ := wire.Ping; typ < wire.TypeEnd; typ++ {
		req := &wire.Message{Type: typ, ReqID: 77, Timestamp: wireStamp, Sender: wireV4Sender,
			Clusters: wireClusters(0), Level: 0, Flags: wire.FlagWantValues, Key: wireKey, Target: wireTarget,
			TTL: 60000, Value: []byte("198.51.100.7:8080"), Kind: 1, Payload: []byte("x")}
		if typ == wire.Ping {
			req.Clusters = wireClusters(0, 1, 2)
		}
		out = append(out, wireEncode(t, req))
		reply := &wire.Message{Type: typ, Response: true, ReqID: 78, Timestamp: wireStamp, Sender: wireV4Sender,
			Clusters: wireClusters(0), Status: wire.StatusOK, Result: wire.StoreStored, Count: 1,
			Values: []wire.Value{{TTL: 1000, Data: []byte("v")}}, Nodes: []Contact{wireV4Sender},
			AppResult: wire.AppOK, Payload: []byte("y")}
		out = append(out, wireEncode(t, reply))
	}
	return out
}

// TestProtocolDocDefaults checks the node defaults PROTOCOL.md quotes; the
// codec's numbers are checked against it in internal/wire.
func TestProtocolDocDefaults(t *testing.T) {
	raw, err := os.ReadFile("PROTOCOL.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []string{
		fmt.Sprintf("`MaxClockSkew` (default %v s)", DefaultConfig().MaxClockSkew.Seconds()),
		fmt.Sprintf("`ReorderWindow` (default %v s)", DefaultConfig().ReorderWindow.Seconds()),
	} {
		if !strings.Contains(string(raw), c) {
			t.Errorf("PROTOCOL.md does not say %q", c)
		}
	}
}
