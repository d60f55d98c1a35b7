package host

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
)

func writeKey(t *testing.T) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), "network.key")
	if err := coraldht.WriteKeyFile(p); err != nil {
		t.Fatal(err)
	}
	return p
}

func acquire(t *testing.T, o Options) *Handle {
	t.Helper()
	h, err := Acquire(o)
	if err != nil {
		t.Fatal(err)
	}
	return h
}

// closed reports whether n is closed, without waiting for the network.
func closed(n *coraldht.Node) bool {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := n.Ping(ctx, netip.MustParseAddrPort("127.0.40.254:9"))
	return errors.Is(err, coraldht.ErrClosed)
}

// warnings sends each warning logged to it on a channel.
type warnings chan string

func (w warnings) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelWarn }
func (w warnings) Handle(_ context.Context, r slog.Record) error {
	select {
	case w <- r.Message:
	default:
	}
	return nil
}
func (w warnings) WithAttrs([]slog.Attr) slog.Handler { return w }
func (w warnings) WithGroup(string) slog.Handler      { return w }

// running reports whether an instance runs on listen.
func running(listen netip.AddrPort) *Instance {
	for _, i := range Running() {
		if i.Listen() == listen {
			return i
		}
	}
	return nil
}

// TestShareAndRelease: handles with the same settings share one node; the
// node outlives all but the last Release, which closes it and unbinds the
// address.
func TestShareAndRelease(t *testing.T) {
	o := Options{Listen: netip.MustParseAddrPort("127.0.40.1:4000"), Services: coraldht.ServiceDNS}
	h1 := acquire(t, o)
	if !h1.Instance().Joined() {
		t.Error("a node without bootstrap addresses is not joined at once")
	}
	select {
	case <-h1.Instance().WhenJoined():
	default:
		t.Error("WhenJoined is not closed for a node without bootstrap addresses")
	}
	h2 := acquire(t, o)
	if h1.Instance() != h2.Instance() {
		t.Fatal("the same settings started a second node")
	}
	n := h1.Node()
	if n.Addr() != o.Listen || n.Contact().Services != coraldht.ServiceDNS {
		t.Errorf("node %v services %v", n.Addr(), n.Contact().Services)
	}
	if h1.Release() {
		t.Error("Release of one of two handles closed the node")
	}
	if h1.Release() {
		t.Error("a second Release of the same handle counted")
	}
	if closed(n) || running(o.Listen) != h2.Instance() {
		t.Fatal("node closed while still held")
	}
	if !h2.Release() {
		t.Error("the last Release did not close the node")
	}
	if !closed(n) || running(o.Listen) != nil {
		t.Error("node still running after the last Release")
	}
	select {
	case <-h2.Instance().Stopped():
	default:
		t.Error("Stopped not closed")
	}
	c, err := net.ListenUDP("udp", net.UDPAddrFromAddrPort(o.Listen))
	if err != nil {
		t.Fatalf("the address is still bound: %v", err)
	}
	c.Close()
}

// notifyTransport tells when it has sent a datagram.
type notifyTransport struct {
	coraldht.Transport
	sent chan struct{}
}

func (t notifyTransport) WriteTo(p []byte, to netip.AddrPort) error {
	err := t.Transport.WriteTo(p, to)
	select {
	case t.sent <- struct{}{}:
	default:
	}
	return err
}

// TestRestartInPlace: changed settings restart the node on the same bound
// socket. A ping sent while no node runs waits in the socket and the new
// node answers it; attached state carries over; holders of the old
// settings see the new node, and releasing them does not close it.
func TestRestartInPlace(t *testing.T) {
	listen := netip.MustParseAddrPort("127.0.40.2:4000")
	o := Options{Listen: listen}
	h1 := acquire(t, o)
	defer h1.Release()
	type state struct{ n int }
	st := Attached(h1, func() *state { return &state{n: 1} })
	old := h1.Instance()
	sock := h1.s.sock

	tr, err := coraldht.ListenUDP("127.0.40.3:4000")
	if err != nil {
		t.Fatal(err)
	}
	cfg := coraldht.DefaultConfig()
	cfg.HintHops = 0
	// A ping waits 5 s for its answer however fast the node answered
	// before: the new node has that long to start and read it.
	cfg.MinRPCTimeout, cfg.InitialRPCTimeout, cfg.MaxRPCTimeout, cfg.LookupTimeout = 5*time.Second, 5*time.Second, 5*time.Second, 5*time.Second
	sent := make(chan struct{}, 1)
	peer, err := coraldht.NewNode(cfg, notifyTransport{tr, sent})
	if err != nil {
		t.Fatal(err)
	}
	defer peer.Close()
	if _, err := peer.Ping(context.Background(), listen); err != nil {
		t.Fatalf("ping before the restart: %v", err)
	}
	<-sent

	pinged := make(chan error, 1)
	betweenRuns = func() {
		if !closed(old.Node()) {
			t.Error("the old node still runs during the restart")
		}
		select {
		case <-sent: // an earlier datagram's
		default:
		}
		go func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			_, err := peer.Ping(ctx, listen)
			pinged <- err
		}()
		<-sent // the ping is in the socket's queue, and no node reads it
	}
	defer func() { betweenRuns = nil }()
	o.Levels = []time.Duration{80 * time.Millisecond, 40 * time.Millisecond, 10 * time.Millisecond}
	o.Pins = map[int]string{3: "rack"}
	h2 := acquire(t, o)
	defer h2.Release()
	if err := <-pinged; err != nil {
		t.Errorf("a ping sent during the restart: %v", err)
	}

	now := h2.Instance()
	if now == old || h1.Instance() != now || h1.Node() != now.Node() {
		t.Fatal("changed settings did not restart the node, or old holders do not see the new one")
	}
	if h2.s.sock != sock {
		t.Error("the socket was replaced")
	}
	select {
	case <-old.Stopped():
	default:
		t.Error("the old instance is not stopped")
	}
	lv := now.Node().Levels()
	if len(lv) != 4 || lv[3].Threshold != 10*time.Millisecond || !lv[3].Pinned || lv[3].Cluster.ID != coraldht.ClusterIDFor("rack") {
		t.Errorf("levels after the restart: %+v", lv)
	}
	if now.Node().ID() != old.Node().ID() || now.Node().Addr() != listen {
		t.Error("the node's identity changed with the same advertised address")
	}
	if Attached(h2, func() *state { return &state{n: 2} }) != st {
		t.Error("attached state lost across the restart")
	}
	if h1.Release() || closed(now.Node()) {
		t.Error("releasing a holder of the old settings closed the new node")
	}
}

// TestFailedAcquireKeepsNode: settings that cannot start (a key file that
// does not exist) fail before the running node is touched.
func TestFailedAcquireKeepsNode(t *testing.T) {
	o := Options{Listen: netip.MustParseAddrPort("127.0.40.4:4000")}
	h := acquire(t, o)
	defer h.Release()
	before := h.Instance()
	o.KeyFile = "/nonexistent/network.key"
	if _, err := Acquire(o); err == nil {
		t.Fatal("a missing key file was accepted")
	}
	if h.Instance() != before || closed(before.Node()) {
		t.Error("a failed Acquire restarted or closed the node")
	}
}

// TestKeyContentsRestart: a change of the keys alone (a new key in the
// same file, an accepted key added, the primary switched, one removed)
// updates the running node's keyring in place: the node keeps running,
// with its store. A configuration that changed the keys and then stops
// gives the previous keys back.
func TestKeyContentsRestart(t *testing.T) {
	key := writeKey(t)
	o := Options{Listen: netip.MustParseAddrPort("127.0.180.5:4000"), KeyFile: key}
	h1 := acquire(t, o)
	defer h1.Release()
	first := h1.Instance()
	h2 := acquire(t, o)
	defer h2.Release()
	if h2.Instance() != first {
		t.Fatal("the same key restarted the node")
	}
	oldFP := first.Node().Keyring().Fingerprints()
	// Something in the node's store, to see that it survives.
	stored := coraldht.KeyFor("kept across key changes")
	if _, err := first.Node().Put(context.Background(), stored, []byte("v"), time.Minute); err != nil {
		t.Fatal(err)
	}
	keys := func(h *Handle) []string { return h.Node().Keyring().Fingerprints() }
	same := func(h *Handle, what string) {
		t.Helper()
		if h.Instance() != first || closed(first.Node()) {
			t.Fatalf("%s restarted the node", what)
		}
		if r, err := h.Node().Get(context.Background(), stored); err != nil || len(r.Values) != 1 {
			t.Fatalf("%s: the node lost its store (%v)", what, err)
		}
	}

	old := filepath.Join(t.TempDir(), "old.key")
	if err := os.Rename(key, old); err != nil {
		t.Fatal(err)
	}
	if err := coraldht.WriteKeyFile(key); err != nil {
		t.Fatal(err)
	}
	h3 := acquire(t, Options{Listen: o.Listen, KeyFile: old, AcceptedKeyFiles: []string{key}})
	same(h3, "installing an accepted key")
	newFP := keys(h3)
	if len(newFP) != 2 || newFP[0] != oldFP[0] || newFP[1] == oldFP[0] {
		t.Fatalf("keys after installing one: %v; want [%s, the new key]", newFP, oldFP[0])
	}
	h4 := acquire(t, Options{Listen: o.Listen, KeyFile: key, AcceptedKeyFiles: []string{old}})
	same(h4, "switching the primary")
	if got := keys(h4); !slices.Equal(got, []string{newFP[1], oldFP[0]}) {
		t.Fatalf("keys after the switch: %v", got)
	}
	h5 := acquire(t, o) // the new key in the same file, alone
	same(h5, "a new key in the same file")
	if got := keys(h5); !slices.Equal(got, []string{newFP[1]}) {
		t.Fatalf("keys after the removal: %v; want only %s", got, newFP[1])
	}
	// The configuration that removed the old key stops (another app of it
	// failed): the previous configuration's keys come back.
	h5.Release()
	same(h4, "releasing the newest configuration")
	if got := keys(h4); !slices.Equal(got, []string{newFP[1], oldFP[0]}) {
		t.Fatalf("keys after the newest configuration stopped: %v; want the previous one's", got)
	}
	h3.Release()
	h4.Release()
}

// TestKeyValidation: accepted key files need a primary, and a node holds
// at most coraldht.KeyringSize keys.
func TestKeyValidation(t *testing.T) {
	listen := netip.MustParseAddrPort("127.0.180.6:4000")
	k := writeKey(t)
	for _, o := range []Options{
		{Listen: listen, AcceptedKeyFiles: []string{k}},
		{Listen: listen, KeyFile: k, AcceptedKeyFiles: []string{k, k, k, k}},
	} {
		var fe *FieldError
		if err := o.Validate(); !errors.As(err, &fe) || !strings.Contains(fe.Msg, "key") {
			t.Errorf("Validate(%+v) = %v; want a FieldError about the key option", o, err)
		}
	}
}

// TestJoinLoop: a node whose bootstrap node is not up yet keeps trying,
// and joins once it is.
func TestJoinLoop(t *testing.T) {
	first := netip.MustParseAddrPort("127.0.40.6:4000")
	warned := make(warnings, 1)
	h := acquire(t, Options{Listen: netip.MustParseAddrPort("127.0.40.7:4000"), Bootstrap: []netip.AddrPort{first}, Logger: slog.New(warned)})
	defer h.Release()
	// Nothing answers at first: the warning names the two causes (the
	// address unreachable, or a node with another key dropping every
	// datagram), not just a timeout.
	if msg := <-warned; msg != noAnswerHint+"; retrying" || !strings.Contains(msg, "network key") {
		t.Errorf("warning %q", msg)
	}
	if h.Instance().Joined() {
		t.Fatal("joined with its bootstrap node down")
	}
	h0 := acquire(t, Options{Listen: first})
	defer h0.Release()
	select {
	case <-h.Instance().WhenJoined():
	case <-time.After(20 * time.Second):
		t.Fatal("not joined 20 s after the bootstrap node came up")
	}
	if !h.Instance().Joined() || h.Node().Levels()[0].Contacts == 0 {
		t.Error("joined without contacts")
	}
}

// TestConcurrentHolders: holders acquiring and releasing with two sets of
// settings at once, as overlapping reloads would; the last Release leaves
// nothing running.
func TestConcurrentHolders(t *testing.T) {
	listen := netip.MustParseAddrPort("127.0.40.8:4000")
	opts := []Options{{Listen: listen}, {Listen: listen, Levels: []time.Duration{40 * time.Millisecond}}}
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 5 {
				h, err := Acquire(opts[(g+i)%2])
				if err != nil {
					t.Error(err)
					return
				}
				if h.Node() == nil || h.Instance().Listen() != listen {
					t.Error("no node")
				}
				Attached(h, func() *int { return new(int) })
				h.Release()
			}
		})
	}
	wg.Wait()
	if running(listen) != nil {
		t.Error("a node still runs after every holder released it")
	}
}
