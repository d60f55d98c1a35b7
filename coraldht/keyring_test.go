package coraldht

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
	"github.com/coralcdn/coral/coraldht/memnet"
)

func TestKeyringChanges(t *testing.T) {
	a, b, c := authMustKey(t, authSecret(1)), authMustKey(t, authSecret(2)), authMustKey(t, authSecret(3))
	r, err := newKeyring(a, nil)
	if err != nil {
		t.Fatal(err)
	}
	fps := func() string { return fmt.Sprint(r.Fingerprints()) }
	want := func(keys ...*Key) {
		t.Helper()
		var w []string
		for _, k := range keys {
			w = append(w, k.Fingerprint())
		}
		if got := fps(); got != fmt.Sprint(w) {
			t.Fatalf("keyring %s; want %v", got, w)
		}
	}
	if err := r.Install(b); err != nil {
		t.Fatal(err)
	}
	if err := r.Install(b); err != nil { // again: nothing changes
		t.Fatal(err)
	}
	want(a, b)
	// A datagram sealed with the accepted key opens and is counted there.
	msg := []byte("hello")
	if got, e, ok := r.open(b.seal(append([]byte(nil), msg...))); !ok || e.key != b || !bytes.Equal(got, msg) {
		t.Fatalf("open of a datagram sealed with the accepted key: ok %v", ok)
	}
	r.cur.Load().entries[1].accepted.Add(5)
	if err := r.SetPrimary(b.Fingerprint()[:6]); err != nil {
		t.Fatal(err)
	}
	want(b, a)
	if ks := r.Keys(); !ks[0].Primary || ks[0].Accepted != 5 || ks[1].Primary {
		t.Fatalf("after SetPrimary: %+v; want b primary with its count of 5", ks)
	}
	if sealed := r.seal([]byte("x")); !bytes.Equal(sealed, b.seal([]byte("x"))) {
		t.Fatal("the keyring does not seal with its primary")
	}
	if err := r.Remove(b.Fingerprint()); !errors.Is(err, ErrRemovePrimary) {
		t.Fatalf("removing the primary: %v; want ErrRemovePrimary", err)
	}
	if err := r.Remove("ffffffffffffffff0"); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("removing an unknown key: %v; want ErrKeyNotFound", err)
	}
	if err := r.SetPrimary(""); !errors.Is(err, ErrKeyNotFound) {
		t.Fatalf("empty fingerprint: %v; want ErrKeyNotFound", err)
	}
	if err := r.Remove(a.Fingerprint()); err != nil {
		t.Fatal(err)
	}
	want(b)
	if _, _, ok := r.open(a.seal([]byte("old"))); ok {
		t.Fatal("a removed key still opens datagrams")
	}
	for i := range KeyringSize - 1 {
		if err := r.Install(authMustKey(t, authSecret(byte(10+i)))); err != nil {
			t.Fatal(err)
		}
	}
	if err := r.Install(c); !errors.Is(err, ErrKeyringFull) {
		t.Fatalf("installing a fifth key: %v; want ErrKeyringFull", err)
	}
	// Set keeps the counts of keys that stay.
	if err := r.Set(a, b); err != nil {
		t.Fatal(err)
	}
	want(a, b)
	if ks := r.Keys(); ks[1].Accepted != 5 || ks[0].Accepted != 0 {
		t.Fatalf("after Set: %+v; want b's count of 5 kept and a's new count 0", ks)
	}
	if err := r.Set(a, b, c, authMustKey(t, authSecret(20)), authMustKey(t, authSecret(21))); err == nil {
		t.Fatal("Set with five keys succeeded")
	}
	want(a, b)
	if err := r.Set(nil); err == nil {
		t.Fatal("Set without a primary succeeded")
	}
}

func TestKeyFingerprint(t *testing.T) {
	a := authMustKey(t, authSecret(1))
	// The fingerprint hashes the derived key: it is not the secret's hash,
	// and it is stable (operators compare it across nodes).
	sum := sha256.Sum256(a.mac[:])
	if want := fmt.Sprintf("%x", sum[:8]); a.Fingerprint() != want {
		t.Fatalf("fingerprint %s; want %s", a.Fingerprint(), want)
	}
	secretSum := sha256.Sum256(authSecret(1))
	if a.Fingerprint() == fmt.Sprintf("%x", secretSum[:8]) {
		t.Fatal("the fingerprint is the secret's hash")
	}
	if a.Fingerprint() == authMustKey(t, authSecret(2)).Fingerprint() {
		t.Fatal("two keys share a fingerprint")
	}
	k, err := ParseKey([]byte("# comment\n" + string(bytes.Repeat([]byte("01"), 32)) + "\n"))
	if err != nil || k.Fingerprint() != a.Fingerprint() {
		t.Fatalf("ParseKey of the hex text: %v, %v", k, err)
	}
	if _, err := ParseKey([]byte("short")); err == nil {
		t.Fatal("ParseKey accepted a short key")
	}
}

// TestKeyringDomainSeparation: every key of a ring derives its MAC key
// with the same label as a single key does, so a node with a keyring tags
// exactly as a version-1 node holding that key.
func TestKeyringDomainSeparation(t *testing.T) {
	for _, secret := range [][]byte{authSecret(1), authSecret(2)} {
		k := authMustKey(t, secret)
		d := hmac.New(sha256.New, secret)
		d.Write([]byte("coral dht v1 datagram tag"))
		m := hmac.New(sha256.New, d.Sum(nil))
		m.Write([]byte("msg"))
		want := m.Sum(nil)[:tagLen]
		r, _ := newKeyring(authMustKey(t, authSecret(9)), []*Key{k})
		if err := r.SetPrimary(k.Fingerprint()); err != nil {
			t.Fatal(err)
		}
		if got := r.seal([]byte("msg")); !bytes.Equal(got[3:], want) {
			t.Fatalf("tag %x; want %x", got[3:], want)
		}
	}
}

// TestKeyringReplayAcrossPrimarySwitch: a datagram accepted under an
// accepted key is refused as a replay after that key becomes primary, and
// one accepted under the old primary after it is demoted: the replay
// filter is the node's, not the key's.
func TestKeyringReplayAcrossPrimarySwitch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		e := newAuthEnv(t)
		newKey := authMustKey(t, authSecret(7))
		if err := e.target.Keyring().Install(newKey); err != nil {
			t.Fatal(err)
		}
		underNew := e.seal(e.message(wire.Ping, false), newKey)
		underOld := e.ping()
		if got := e.send(underNew, underOld); len(got) != 2 {
			t.Fatalf("%d replies to two valid pings (one per key); want 2", len(got))
		}
		if err := e.target.Keyring().SetPrimary(newKey.Fingerprint()); err != nil {
			t.Fatal(err)
		}
		e.expectDropped(func(d *DropCounts) { d.Replay += 2 }, underNew, underOld)
		if err := e.target.Keyring().Remove(testKey.Fingerprint()); err != nil {
			t.Fatal(err)
		}
		e.expectDropped(func(d *DropCounts) { d.Replay++ }, underNew)
		e.expectDropped(func(d *DropCounts) { d.BadAuth += 2 }, underOld, e.ping())
		ks := e.target.Stats().Keys
		if len(ks) != 1 || ks[0].Fingerprint != newKey.Fingerprint() || !ks[0].Primary || ks[0].Accepted != 1 {
			t.Fatalf("keys in Stats: %+v; want only the new key, primary, with 1 datagram accepted", ks)
		}
	})
}

// TestKeyringRotation rotates the network key of 8 nodes in three steps
// (install the new key everywhere, make it primary everywhere, remove the
// old one), one node at a time, while every node runs gets: none fails.
// Then one node is set back to only the old key, as a node reloaded with a
// stale configuration: the others drop what it sends and count it as a bad
// key, and its gets fail.
func TestKeyringRotation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 8
		tn := newTestNet(t, n, memnet.Config{Latency: pairLatency(time.Millisecond, 5*time.Millisecond)}, nil)
		tn.meshAll()
		ctx := context.Background()
		keys := make([]ID, 16)
		for i := range keys {
			keys[i] = KeyFor(fmt.Sprint("http://rotation.example/", i))
			if _, err := tn.nodes[i%n].Put(ctx, keys[i], []byte(fmt.Sprint("value ", i)), time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		var gets, failed atomic.Int64
		var firstErr atomic.Value
		stop := make(chan struct{})
		var wg sync.WaitGroup
		for i, nd := range tn.nodes {
			wg.Go(func() {
				for j := 0; ; j++ {
					select {
					case <-stop:
						return
					default:
					}
					k := keys[(i*3+j)%len(keys)]
					r, err := nd.Get(ctx, k)
					gets.Add(1)
					if err == nil && len(r.Values) == 0 {
						err = errors.New("no values")
					}
					if err != nil {
						failed.Add(1)
						firstErr.CompareAndSwap(nil, fmt.Sprintf("node %d: %v", i, err))
					}
					time.Sleep(50 * time.Millisecond)
				}
			})
		}
		newKey := authMustKey(t, authSecret(42))
		steps := []func(r *Keyring) error{
			func(r *Keyring) error { return r.Install(newKey) },
			func(r *Keyring) error { return r.SetPrimary(newKey.Fingerprint()) },
			func(r *Keyring) error { return r.Remove(testKey.Fingerprint()) },
		}
		for _, step := range steps {
			for _, nd := range tn.nodes {
				if err := step(nd.Keyring()); err != nil {
					t.Fatal(err)
				}
				time.Sleep(200 * time.Millisecond)
			}
		}
		time.Sleep(time.Second)
		close(stop)
		wg.Wait()
		if failed.Load() != 0 || gets.Load() < 500 {
			t.Fatalf("%d of %d gets failed during the rotation (first: %v); want 0 of at least 500", failed.Load(), gets.Load(), firstErr.Load())
		}
		var badAuth, underNew, getFailures uint64
		for i, nd := range tn.nodes {
			s := nd.Stats()
			badAuth += s.Drops.BadAuth
			getFailures += s.GetFailures + s.PutFailures
			if len(s.Keys) != 1 || s.Keys[0].Fingerprint != newKey.Fingerprint() {
				t.Fatalf("node %d keys %+v; want only the new key", i, s.Keys)
			}
			underNew += s.Keys[0].Accepted
		}
		if badAuth != 0 || underNew == 0 || getFailures != 0 {
			t.Fatalf("after the rotation: %d datagrams dropped for a bad key, %d accepted under the new key, %d gets failed in Stats; want 0, some, 0", badAuth, underNew, getFailures)
		}

		stale := tn.nodes[n-1]
		if err := stale.Keyring().Set(testKey); err != nil {
			t.Fatal(err)
		}
		_, err := stale.Get(ctx, keys[0])
		if err == nil || stale.Stats().GetFailures != 1 {
			t.Fatalf("a node with only the old key: get error %v, %d failed gets in Stats; want an error, counted", err, stale.Stats().GetFailures)
		}
		badAuth = 0
		for _, nd := range tn.nodes[:n-1] {
			badAuth += nd.Stats().Drops.BadAuth
		}
		sent := stale.Stats().RequestsOut.Total()
		if badAuth == 0 {
			t.Fatalf("the node with only the old key sent %d requests and none was counted as a bad key", sent)
		}
		t.Logf("%d gets during the rotation, 0 failed; the stale node's get: %v; %d of its datagrams dropped as bad_auth", gets.Load(), err, badAuth)
	})
}

func BenchmarkKeyringOpen(b *testing.B) {
	msg := bytes.Repeat([]byte{0x5a}, 200) // a typical get request
	for _, size := range []int{1, KeyringSize} {
		b.Run(fmt.Sprintf("keys=%d,match=last", size), func(b *testing.B) {
			var ks []*Key
			for i := range size {
				ks = append(ks, authMustKey(b, authSecret(byte(i+1))))
			}
			r, err := newKeyring(ks[0], ks[1:])
			if err != nil {
				b.Fatal(err)
			}
			pkt := ks[size-1].seal(append([]byte(nil), msg...))
			b.ReportAllocs()
			for b.Loop() {
				if _, _, ok := r.open(pkt); !ok {
					b.Fatal("does not open")
				}
			}
		})
	}
}
