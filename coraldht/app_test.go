package coraldht

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
	"github.com/coralcdn/coral/coraldht/memnet"
)

// appEcho is a handler that answers "echo:" + payload and counts its calls.
func appEcho(calls *atomic.Int64) AppHandler {
	return func(_ context.Context, _ Contact, p []byte) ([]byte, error) {
		calls.Add(1)
		return append([]byte("echo:"), p...), nil
	}
}

// TestAppRoundTrip: an app message reaches the handler registered for its
// kind at the peer, with the sender's authenticated contact, and the
// handler's answer (or error) comes back; kinds without a handler are
// answered so at once.
func TestAppRoundTrip(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTestNet(t, 3, memnet.Config{}, nil)
		a, b := tn.nodes[1], tn.nodes[2]
		var calls atomic.Int64
		var from atomic.Pointer[Contact]
		b.HandleApp(1, func(ctx context.Context, c Contact, p []byte) ([]byte, error) {
			from.Store(&c)
			return appEcho(&calls)(ctx, c, p)
		})
		b.HandleApp(2, func(context.Context, Contact, []byte) ([]byte, error) { return nil, errors.New("disk on fire") })
		b.HandleApp(3, func(context.Context, Contact, []byte) ([]byte, error) { panic("handler bug") })
		b.HandleApp(4, func(context.Context, Contact, []byte) ([]byte, error) { return make([]byte, MaxAppPayload+1), nil })
		ctx := context.Background()

		got, err := a.CallApp(ctx, b.Addr(), 1, []byte("hello"))
		if err != nil || string(got) != "echo:hello" {
			t.Fatalf("CallApp = %q, %v", got, err)
		}
		if c := from.Load(); c == nil || *c != a.Contact() {
			t.Errorf("handler saw sender %v, want %v", c, a.Contact())
		}
		// The largest payload both ways, and an empty one.
		big := bytes.Repeat([]byte{7}, MaxAppPayload-len("echo:"))
		if got, err := a.CallApp(ctx, b.Addr(), 1, big); err != nil || !bytes.Equal(got, append([]byte("echo:"), big...)) {
			t.Fatalf("largest payload: %d bytes, %v", len(got), err)
		}
		if got, err := a.CallApp(ctx, b.Addr(), 1, nil); err != nil || string(got) != "echo:" {
			t.Fatalf("empty payload: %q, %v", got, err)
		}

		if _, err := a.CallApp(ctx, b.Addr(), 9, nil); !errors.Is(err, ErrAppUnknown) {
			t.Errorf("unknown kind: %v, want ErrAppUnknown", err)
		}
		var ae *AppError
		if _, err := a.CallApp(ctx, b.Addr(), 2, nil); !errors.As(err, &ae) || ae.Text != "disk on fire" || ae.Peer != b.Addr() {
			t.Errorf("failing handler: %v", err)
		}
		if _, err := a.CallApp(ctx, b.Addr(), 3, nil); !errors.As(err, &ae) || !strings.Contains(ae.Text, "handler bug") {
			t.Errorf("panicking handler: %v", err)
		}
		if _, err := a.CallApp(ctx, b.Addr(), 4, nil); !errors.As(err, &ae) || !strings.Contains(ae.Text, "exceeds MaxAppPayload") {
			t.Errorf("oversized reply: %v", err)
		}
		// Removing a handler: its kind is unknown again.
		b.HandleApp(1, nil)
		if _, err := a.CallApp(ctx, b.Addr(), 1, nil); !errors.Is(err, ErrAppUnknown) {
			t.Errorf("removed handler: %v", err)
		}

		for name, call := range map[string]func() error{
			"kind 0":         func() error { _, err := a.CallApp(ctx, b.Addr(), 0, nil); return err },
			"payload 769":    func() error { _, err := a.CallApp(ctx, b.Addr(), 1, make([]byte, MaxAppPayload+1)); return err },
			"itself":         func() error { _, err := a.CallApp(ctx, a.Addr(), 1, nil); return err },
			"port 0":         func() error { _, err := a.CallApp(ctx, netip.MustParseAddrPort("10.0.0.2:0"), 1, nil); return err },
			"zero address":   func() error { _, err := a.CallApp(ctx, netip.AddrPort{}, 1, nil); return err },
			"multicast addr": func() error { _, err := a.CallApp(ctx, netip.MustParseAddrPort("224.0.0.1:4000"), 1, nil); return err },
		} {
			if err := call(); !errors.Is(err, ErrInvalid) {
				t.Errorf("%s: %v, want ErrInvalid", name, err)
			}
		}
		sa, sb := a.Stats(), b.Stats()
		if sa.RequestsOut.App != 8 || sb.RequestsIn.App != 8 || sb.RepliesOut.App != 8 || sa.RepliesIn.App != 8 {
			t.Errorf("app counters: out %d in %d, replies out %d in %d; want 8 each",
				sa.RequestsOut.App, sb.RequestsIn.App, sb.RepliesOut.App, sa.RepliesIn.App)
		}
		if d := sb.Drops; d != (DropCounts{}) {
			t.Errorf("drops at the responder: %+v", d)
		}
	})
}

// TestAppHandlerRunsOncePerRequest: while a slow handler runs, the caller's
// retransmissions are ignored; a lost reply is sent again to the next
// retransmission without running the handler again.
func TestAppHandlerRunsOncePerRequest(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTestNet(t, 2, memnet.Config{}, nil)
		a, b := tn.nodes[0], tn.nodes[1]
		var calls atomic.Int64
		release := make(chan struct{})
		b.HandleApp(1, func(ctx context.Context, c Contact, p []byte) ([]byte, error) {
			calls.Add(1)
			select {
			case <-release:
			case <-ctx.Done():
				return nil, ctx.Err()
			}
			return []byte("done"), nil
		})
		time.AfterFunc(5*time.Second, func() { close(release) })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		start := time.Now()
		got, err := a.CallApp(ctx, b.Addr(), 1, []byte("slow"))
		if err != nil || string(got) != "done" {
			t.Fatalf("slow handler: %q, %v", got, err)
		}
		if d := time.Since(start); d < 5*time.Second || d > 6*time.Second {
			t.Errorf("reply after %v, want just after the 5 s the handler took", d)
		}
		sa, sb := a.Stats(), b.Stats()
		if calls.Load() != 1 || sa.RequestsOut.App < 2 || sb.RequestsIn.App != sa.RequestsOut.App || sb.RepliesOut.App != 1 {
			t.Errorf("handler ran %d times for %d sends (%d received, %d replies); want once, several sends, one reply",
				calls.Load(), sa.RequestsOut.App, sb.RequestsIn.App, sb.RepliesOut.App)
		}

		// A lost reply: the handler cuts the network before answering,
		// and it heals a second later.
		calls.Store(0)
		b.HandleApp(2, func(context.Context, Contact, []byte) ([]byte, error) {
			calls.Add(1)
			tn.net.Partition([]netip.AddrPort{a.Addr()}, []netip.AddrPort{b.Addr()})
			time.AfterFunc(time.Second, tn.net.Heal)
			return []byte("answer"), nil
		})
		before := b.Stats().RepliesOut.App
		if got, err := a.CallApp(ctx, b.Addr(), 2, nil); err != nil || string(got) != "answer" {
			t.Fatalf("lost reply: %q, %v", got, err)
		}
		if calls.Load() != 1 || b.Stats().RepliesOut.App-before < 2 {
			t.Errorf("lost reply: handler ran %d times, %d replies sent; want once, the reply at least twice",
				calls.Load(), b.Stats().RepliesOut.App-before)
		}
		if d := a.Stats().Drops; d.Unsolicited+d.Replay+d.BadAuth+d.Malformed != 0 {
			t.Errorf("caller dropped %+v", d)
		}
	})
}

// TestAppBusyAndTimeout: beyond maxAppRunning handlers at once the peer
// answers busy at once; a dead peer is a timeout at the caller's deadline.
func TestAppBusyAndTimeout(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		tn := newTestNet(t, 3, memnet.Config{}, nil)
		a, b, c := tn.nodes[0], tn.nodes[1], tn.nodes[2]
		release := make(chan struct{})
		var running atomic.Int64
		b.HandleApp(1, func(ctx context.Context, _ Contact, _ []byte) ([]byte, error) {
			running.Add(1)
			<-release
			return nil, nil
		})
		var wg sync.WaitGroup
		errs := make(chan error, maxAppRunning)
		for range maxAppRunning {
			wg.Go(func() {
				_, err := a.CallApp(context.Background(), b.Addr(), 1, nil)
				errs <- err
			})
		}
		synctest.Wait()
		if running.Load() != maxAppRunning {
			t.Fatalf("%d handlers running, want %d", running.Load(), maxAppRunning)
		}
		if _, err := c.CallApp(context.Background(), b.Addr(), 1, nil); !errors.Is(err, ErrAppBusy) {
			t.Errorf("one request too many: %v, want ErrAppBusy", err)
		}
		close(release)
		wg.Wait()
		close(errs)
		for err := range errs {
			if err != nil {
				t.Errorf("a running request failed: %v", err)
			}
		}

		tn.net.Kill(c.Addr())
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		start := time.Now()
		_, err := a.CallApp(ctx, c.Addr(), 1, nil)
		if !errors.Is(err, ErrTimeout) || time.Since(start) != 3*time.Second {
			t.Errorf("dead peer: %v after %v, want ErrTimeout after 3s", err, time.Since(start))
		}
		// Without a deadline: 10 s.
		start = time.Now()
		if _, err := a.CallApp(context.Background(), c.Addr(), 1, nil); !errors.Is(err, ErrTimeout) || time.Since(start) != defaultAppTimeout {
			t.Errorf("dead peer, no deadline: %v after %v", err, time.Since(start))
		}
		// Cancelled by the caller: the context's error.
		cctx, ccancel := context.WithCancel(context.Background())
		time.AfterFunc(time.Second, ccancel)
		if _, err := a.CallApp(cctx, c.Addr(), 1, nil); !errors.Is(err, context.Canceled) {
			t.Errorf("cancelled: %v", err)
		}
		// A closing node ends its calls with ErrClosed.
		time.AfterFunc(time.Second, func() { a.Close() })
		if _, err := a.CallApp(context.Background(), c.Addr(), 1, nil); !errors.Is(err, ErrClosed) {
			t.Errorf("closed: %v", err)
		}
		if _, err := a.CallApp(context.Background(), b.Addr(), 1, nil); !errors.Is(err, ErrClosed) {
			t.Errorf("after close: %v", err)
		}
	})
}

// TestAppAuthentication: app requests obey every acceptance rule of the
// protocol. A request under another key, a flipped bit, a replayed copy or
// one addressed to another node never reaches the handler and gets no
// reply; a retransmission (same request ID, new stamp) gets the same reply
// without a second run.
func TestAppAuthentication(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newAuthEnv(t)
		var calls atomic.Int64
		e.target.HandleApp(1, appEcho(&calls))
		req := func() *wire.Message {
			m := e.message(wire.App, false)
			m.Kind, m.Payload = 1, []byte("purge /a.jpg")
			return m
		}

		e.expectDropped(func(d *DropCounts) { d.BadAuth += 2 },
			e.seal(req(), authMustKey(t, authSecret(9))), e.seal(req(), insecureLoopbackKey))
		flipped := e.seal(req(), testKey)
		flipped[len(flipped)-tagLen-3] ^= 1 // in the payload
		e.expectDropped(func(d *DropCounts) { d.BadAuth++ }, flipped)
		misdirected := req()
		misdirected.Recipient = e.tn.nodes[1].ID()
		e.expectDropped(func(d *DropCounts) { d.Misdirected++ }, e.seal(misdirected, testKey))
		stale := req()
		stale.Timestamp = time.Now().Add(-time.Minute).UnixNano()
		e.expectDropped(func(d *DropCounts) { d.Stale++ }, e.seal(stale, testKey))
		if calls.Load() != 0 {
			t.Fatalf("handler ran %d times for refused requests", calls.Load())
		}

		m := req()
		p := e.seal(m, testKey)
		r := e.expectReply(p)
		if r.AppResult != wire.AppOK || string(r.Payload) != "echo:purge /a.jpg" || calls.Load() != 1 {
			t.Fatalf("reply %+v after %d calls", r, calls.Load())
		}
		// The captured datagram again: a replay, dropped.
		e.expectDropped(func(d *DropCounts) { d.Replay++ }, p)
		// A retransmission: the same reply, the handler not run again.
		m.Timestamp = e.stamp()
		if r2 := e.expectReply(e.seal(m, testKey)); r2.AppResult != wire.AppOK || !bytes.Equal(r2.Payload, r.Payload) {
			t.Errorf("retransmission answered %+v", r2)
		}
		if calls.Load() != 1 {
			t.Errorf("handler ran %d times; want once per request ID", calls.Load())
		}
		// An unknown kind is answered at once, and counted as refused.
		u := req()
		u.Kind = 200
		before := e.target.Stats().Refused
		if r := e.expectReply(e.seal(u, testKey)); r.AppResult != wire.AppUnknown || len(r.Payload) != 0 {
			t.Errorf("unknown kind answered %+v", r)
		}
		if e.target.Stats().Refused != before+1 {
			t.Error("unknown kind not counted as refused")
		}
	})
}

// TestAppOverUDP: app messages between nodes on real UDP sockets, and a
// node with another network key is never heard.
func TestAppOverUDP(t *testing.T) {
	nodes := startUDPNodes(t, 3, 60, func(i int, cfg *Config) {
		if i == 2 {
			cfg.Key = authMustKey(t, authSecret(0x42))
		}
	})
	a, b, stranger := nodes[0], nodes[1], nodes[2]
	var calls atomic.Int64
	b.HandleApp(1, appEcho(&calls))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	for i := range 20 {
		msg := fmt.Sprintf("request %d", i)
		got, err := a.CallApp(ctx, b.Addr(), 1, []byte(msg))
		if err != nil || string(got) != "echo:"+msg {
			t.Fatalf("%s: %q, %v", msg, got, err)
		}
	}
	if _, err := a.CallApp(ctx, b.Addr(), 2, nil); !errors.Is(err, ErrAppUnknown) {
		t.Errorf("unknown kind over UDP: %v", err)
	}
	sctx, scancel := context.WithTimeout(ctx, time.Second)
	defer scancel()
	if _, err := stranger.CallApp(sctx, b.Addr(), 1, []byte("let me in")); !errors.Is(err, ErrTimeout) {
		t.Errorf("stranger: %v, want ErrTimeout", err)
	}
	if calls.Load() != 20 {
		t.Errorf("handler ran %d times, want 20", calls.Load())
	}
	if d := b.Stats().Drops; d.BadAuth == 0 || d.Malformed+d.Replay+d.Stale != 0 {
		t.Errorf("responder drops %+v: want the stranger's datagrams as bad_auth, nothing else", d)
	}
}
