package coraldht

import (
	"testing"
	"testing/synctest"

	"github.com/coralcdn/coral/coraldht/internal/wire"
)

// TestVersionRule: what a version-1 receiver does with what a later
// revision may send (PROTOCOL.md, Versions). An unknown message type, an
// unknown version or unknown flag bits are dropped without a reply and
// counted as malformed, and the node goes on serving; extensions of a
// later revision (after the body, PROTOCOL.md, Extensions) are kept
// unread and the request answered; bytes after the body that are no
// extension area are malformed.
func TestVersionRule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newAuthEnv(t)
		unknownType := wireEncode(t, e.message(wire.Ping, false))
		unknownType[wireOffVersion+1] = byte(wire.TypeEnd)
		newerVersion := wireEncode(t, e.message(wire.Ping, false))
		newerVersion[wireOffVersion] = 2
		newFlag := wireEncode(t, e.message(wire.Ping, false))
		newFlag[wireOffVersion+2] |= 0x80
		e.expectDropped(func(d *DropCounts) { d.Malformed += 3 }, testKey.seal(unknownType), testKey.seal(newerVersion), testKey.seal(newFlag))
		e.expectReply(e.ping())

		m := e.message(wire.FindNode, false)
		m.Target = KeyFor("x")
		m.Unknown = []byte{0x07, 0x00, 0x02, 0xff, 0xfe}
		if r := e.expectReply(testKey.seal(wireEncode(t, m))); r.Status != wire.StatusOK || len(r.Nodes) == 0 {
			t.Fatalf("find_node with a later revision's extension: status %d, %d contacts", r.Status, len(r.Nodes))
		}
		junk := e.message(wire.Ping, false)
		junk.Ext = false
		e.expectDropped(func(d *DropCounts) { d.Malformed++ }, testKey.seal(append(wireEncode(t, junk), 0x01, 0x02, 0xff)))
	})
}
