package host

import (
	"net/netip"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

// TestReleaseOfFailedNewestRestores: a configuration that changed the node
// settings and then failed (its holder, the newest, is released while the
// old one stays) gives the node back the old configuration's settings.
func TestReleaseOfFailedNewestRestores(t *testing.T) {
	listen := netip.MustParseAddrPort("127.0.140.1:4000")
	old := acquire(t, Options{Listen: listen})
	defer old.Release()
	changed := acquire(t, Options{Listen: listen, Levels: []time.Duration{40 * time.Millisecond}})
	if n := len(old.Node().Levels()); n != 2 {
		t.Fatalf("the newest settings did not start: %d levels", n)
	}
	if changed.Release() {
		t.Fatal("releasing one of two holders closed the node")
	}
	if n := len(old.Node().Levels()); n != 3 {
		t.Errorf("after the failed configuration let go the node has %d levels, want 3 (the old settings)", n)
	}
	if closed(old.Node()) || running(listen) != old.Instance() {
		t.Error("the node does not run for the remaining holder")
	}
}

// TestReleaseOfStaleHolderKeeps: after a successful reload the old
// configuration lets go; the node keeps the new settings, and a newest
// holder that shares the settings of one remaining restarts nothing.
func TestReleaseOfStaleHolderKeeps(t *testing.T) {
	listen := netip.MustParseAddrPort("127.0.140.2:4000")
	o := Options{Listen: listen}
	old := acquire(t, o)
	o.Levels = []time.Duration{40 * time.Millisecond}
	cur := acquire(t, o)
	defer cur.Release()
	inst := cur.Instance()
	old.Release()
	if cur.Instance() != inst {
		t.Error("releasing the old configuration restarted the node")
	}
	same := acquire(t, o)
	same.Release()
	if cur.Instance() != inst {
		t.Error("releasing a newest holder with the running settings restarted the node")
	}
}

// TestDraining: a draining node runs without its services, on the same
// socket and with the same identity; a reload with the same settings
// keeps it draining, and undoing the drain brings the services back.
func TestDraining(t *testing.T) {
	listen := netip.MustParseAddrPort("127.0.140.3:4000")
	o := Options{Listen: listen, Services: coraldht.ServiceHTTP}
	h := acquire(t, o)
	defer h.Release()
	id := h.Node().ID()
	if err := h.SetDraining(true); err != nil {
		t.Fatal(err)
	}
	if !h.Draining() || h.Node().Contact().Services != 0 || h.Node().ID() != id {
		t.Fatalf("draining: %v, services %v", h.Draining(), h.Node().Contact().Services)
	}
	again := acquire(t, o)
	if again.Node().Contact().Services != 0 {
		t.Error("a reload with the same settings ended the drain")
	}
	again.Release()
	if err := h.SetDraining(false); err != nil {
		t.Fatal(err)
	}
	if h.Draining() || h.Node().Contact().Services != coraldht.ServiceHTTP {
		t.Errorf("after the drain: %v, services %v", h.Draining(), h.Node().Contact().Services)
	}
}

// TestCheckBindsNothing: Check reads the key and validates, and binds
// nothing.
func TestCheckBindsNothing(t *testing.T) {
	listen := netip.MustParseAddrPort("127.0.140.4:4000")
	if err := Check(Options{Listen: listen, KeyFile: writeKey(t)}); err != nil {
		t.Fatal(err)
	}
	if running(listen) != nil {
		t.Error("Check started a node")
	}
	if err := Check(Options{Listen: listen, KeyFile: "/nonexistent/network.key"}); err == nil {
		t.Error("a missing key file passed the check")
	}
}
