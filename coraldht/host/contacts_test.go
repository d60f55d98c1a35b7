package host

import (
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

// knows reports whether inst's level-0 table holds addr.
func knows(inst *Instance, addr netip.AddrPort) bool {
	return slices.ContainsFunc(inst.Node().RoutingTable(0), func(ni coraldht.NodeInfo) bool { return ni.Addr == addr })
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within 10 s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// TestSavedContactsAcrossProcessRestart (issue 37, finding 2): a node
// without bootstrap addresses (the seed of a network) whose process
// restarts with a state directory pings the contacts it saved and has its
// peers back in its table by the time it is warm; without a state
// directory it knows nobody until somebody finds it.
func TestSavedContactsAcrossProcessRestart(t *testing.T) {
	dir := t.TempDir()
	seed := netip.MustParseAddrPort("127.0.41.1:4000")
	peerAddr := netip.MustParseAddrPort("127.0.41.2:4000")
	o := Options{Listen: seed, StateDir: dir}
	hs := acquire(t, o)
	hp := acquire(t, Options{Listen: peerAddr, Bootstrap: []netip.AddrPort{seed}})
	defer hp.Release()
	waitUntil(t, "the seed knows its peer", func() bool { return knows(hs.Instance(), peerAddr) })
	if !hs.Release() {
		t.Fatal("the seed's last release did not stop it")
	}
	saved, err := loadContacts(dir, seed, time.Now())
	if err != nil || len(saved) != 1 || saved[0].Addr != peerAddr {
		t.Fatalf("saved contacts %v, %v; want the peer", saved, err)
	}

	// The process restarts: a new Acquire of the same address.
	start := time.Now()
	hs = acquire(t, o)
	select {
	case <-hs.Instance().Warm():
	case <-time.After(warmTimeout + time.Second):
		t.Fatal("not warm after the first round of pings")
	}
	if !knows(hs.Instance(), peerAddr) || !hs.Instance().Joined() {
		t.Fatalf("warm after %v without its saved peer in its table (joined %v)", time.Since(start), hs.Instance().Joined())
	}
	t.Logf("the restarted seed knew its peer again after %v", time.Since(start))
	hs.Release()

	// Without a state directory, nothing carries over.
	if err := os.RemoveAll(dir); err != nil {
		t.Fatal(err)
	}
	hs = acquire(t, Options{Listen: seed})
	defer hs.Release()
	<-hs.Instance().Warm()
	if knows(hs.Instance(), peerAddr) {
		t.Error("a seed without saved contacts knew its peer at once")
	}
}

// TestRestartInPlaceKeepsContacts: a restart in place (new settings)
// hands the old run's contacts to the new one, without any state
// directory.
func TestRestartInPlaceKeepsContacts(t *testing.T) {
	listen := netip.MustParseAddrPort("127.0.41.3:4000")
	peerAddr := netip.MustParseAddrPort("127.0.41.4:4000")
	h1 := acquire(t, Options{Listen: listen})
	defer h1.Release()
	hp := acquire(t, Options{Listen: peerAddr, Bootstrap: []netip.AddrPort{listen}})
	defer hp.Release()
	waitUntil(t, "the node knows its peer", func() bool { return knows(h1.Instance(), peerAddr) })
	old := h1.Instance()
	h2 := acquire(t, Options{Listen: listen, Levels: []time.Duration{70 * time.Millisecond}})
	defer h2.Release()
	if h2.Instance() == old {
		t.Fatal("no restart")
	}
	<-h2.Instance().Warm()
	if !knows(h2.Instance(), peerAddr) {
		t.Error("the restarted node does not know its peer once warm")
	}
}

// TestLoadContactsHostile: a file that is not JSON, is another node's, or
// holds stale or impossible contacts, gives no contact to ping.
func TestLoadContactsHostile(t *testing.T) {
	dir := t.TempDir()
	listen := netip.MustParseAddrPort("192.0.2.1:4000")
	now := time.Now()
	if cs, err := loadContacts(dir, listen, now); cs != nil || err != nil {
		t.Errorf("no file: %v, %v", cs, err)
	}
	if err := os.WriteFile(contactsPath(dir, listen), []byte("{not json"), 0o600); err != nil {
		t.Fatal(err)
	}
	if cs, err := loadContacts(dir, listen, now); cs != nil || err == nil {
		t.Errorf("not JSON: %v, %v; want an error", cs, err)
	}
	if err := saveContacts(dir, netip.MustParseAddrPort("192.0.2.9:4000"), nil); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(contactsPath(dir, netip.MustParseAddrPort("192.0.2.9:4000")), contactsPath(dir, listen)); err != nil {
		t.Fatal(err)
	}
	if cs, err := loadContacts(dir, listen, now); cs != nil || err == nil {
		t.Errorf("another node's file: %v, %v; want an error", cs, err)
	}
	good := netip.MustParseAddrPort("192.0.2.2:4000")
	cs := []savedContact{
		{Addr: good, LastHeard: now.Add(-time.Hour)},
		{Addr: netip.MustParseAddrPort("192.0.2.3:4000"), LastHeard: now.Add(-savedMaxAge - time.Hour)},
		{Addr: netip.MustParseAddrPort("0.0.0.0:4000"), LastHeard: now},
		{Addr: netip.MustParseAddrPort("192.0.2.4:0"), LastHeard: now},
		{Addr: listen, LastHeard: now},
	}
	for range maxSaved {
		cs = append(cs, savedContact{Addr: good, LastHeard: now})
	}
	if err := saveContacts(dir, listen, cs); err != nil {
		t.Fatal(err)
	}
	got, err := loadContacts(dir, listen, now)
	if err != nil || len(got) != maxSaved || got[0].Addr != good {
		t.Errorf("loaded %d contacts, first %v, %v; want %d, the good one", len(got), got[0], err, maxSaved)
	}
	for _, c := range got {
		if c.Addr != good {
			t.Errorf("loaded %v", c)
		}
	}
	if st, err := os.Stat(contactsPath(dir, listen)); err != nil || st.Mode().Perm()&0o077 != 0 {
		t.Errorf("file mode %v, %v; want no access for others", st.Mode(), err)
	}
}
