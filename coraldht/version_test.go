package coraldht

import (
	"testing"
	"testing/synctest"
)

// TestVersionRule: what a version-1 receiver does with what a later
// revision may send (PROTOCOL.md, Versions). An unknown message type, an
// unknown version or unknown flag bits are dropped without a reply and
// counted as malformed, and the node goes on serving; fields appended
// after a known body are ignored and the request answered.
func TestVersionRule(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newAuthEnv(t)
		unknownType := wireEncode(t, e.message(msgPing, false))
		unknownType[wireOffType] = byte(msgTypeEnd)
		newerVersion := wireEncode(t, e.message(msgPing, false))
		newerVersion[wireOffVersion] = wireVersion + 1
		newFlag := wireEncode(t, e.message(msgPing, false))
		newFlag[wireOffType+1] |= 0x80
		e.expectDropped(func(d *DropCounts) { d.Malformed += 3 }, testKey.seal(unknownType), testKey.seal(newerVersion), testKey.seal(newFlag))
		e.expectReply(e.ping())

		m := e.message(msgFindNode, false)
		m.Target = KeyFor("x")
		appended := append(wireEncode(t, m), 0x01, 0x02, 0xff)
		if r := e.expectReply(testKey.seal(appended)); r.Status != statusOK || len(r.Nodes) == 0 {
			t.Fatalf("find_node with appended fields: status %d, %d contacts", r.Status, len(r.Nodes))
		}
	})
}
