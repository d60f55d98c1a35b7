package proxy

import (
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// TestRefTableRenewsOnlyRequested: a reference is renewed when its TTL runs
// out only if its object was requested since the last put and is still in
// the cache (in virtual time).
func TestRefTableRenewsOnlyRequested(t *testing.T) {
	synctest.Test(t, testRefTableRenewsOnlyRequested)
}

func testRefTableRenewsOnlyRequested(t *testing.T) {
	store, err := diskcache.Open(diskcache.Options{Dir: t.TempDir(), MaxBytes: 1 << 20, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	for _, key := range []string{"aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb"} {
		w, err := store.Create(key, diskcache.Meta{Key: key, Status: 200, Size: 1, Stored: time.Now()})
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("x"))
		if err := w.Commit(diskcache.Meta{Key: key, Status: 200, Size: 1, Stored: time.Now()}); err != nil {
			t.Fatal(err)
		}
	}
	tab := NewReferences(store, noNode)
	ref := reference{Addr: netip.MustParseAddrPort("192.0.2.1:80"), Complete: true}
	tab.put("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", ref, time.Hour)
	tab.put("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", ref, time.Hour)
	tab.put("cccccccccccccccccccccccccccccccccccccccc", ref, time.Hour) // not cached (evicted)

	time.Sleep(10 * time.Minute)
	tab.touch("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	tab.touch("cccccccccccccccccccccccccccccccccccccccc")
	if d := tab.due(); len(d) != 0 {
		t.Fatalf("renewals before the TTL ran out: %v", d)
	}
	time.Sleep(50 * time.Minute) // within renewAhead of the expiry
	d := tab.due()
	if len(d) != 1 {
		t.Fatalf("renewed %d references, want only the requested, cached one", len(d))
	}
	if _, ok := d["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]; !ok {
		t.Fatalf("renewed %v", d)
	}
	// Not requested since that renewal: it lapses next time.
	time.Sleep(time.Hour)
	if d := tab.due(); len(d) != 0 {
		t.Errorf("renewed an unrequested reference: %v", d)
	}
	if left := tab.Len(); left != 0 {
		t.Errorf("%d references still tracked, want 0", left)
	}
}

// TestRefTableTouchDuringRenewal: hits note their requests (touch, no
// lock) while references are put, renewed and forgotten; under -race this
// finds any unsynchronized access, and the table's count stays the number
// of references it holds.
func TestRefTableTouchDuringRenewal(t *testing.T) {
	store, err := diskcache.Open(diskcache.Options{Dir: t.TempDir(), MaxBytes: 1 << 20, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tab := NewReferences(store, noNode)
	ref := reference{Addr: netip.MustParseAddrPort("192.0.2.1:80"), Complete: true}
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("%040d", i)
	}
	var wg sync.WaitGroup
	stop := make(chan struct{})
	for g := range 2 {
		wg.Go(func() {
			for i := g; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				tab.touch(keys[i%len(keys)])
			}
		})
	}
	for round := range 200 {
		for i, key := range keys {
			if (i+round)%3 == 0 {
				tab.Forget(key)
			} else {
				// Shorter than renewAhead: due at once.
				tab.put(key, ref, time.Minute)
			}
		}
		tab.due()
	}
	close(stop)
	wg.Wait()
	held := 0
	for _, key := range keys {
		if tab.has(key) {
			held++
		}
	}
	if n := tab.Len(); n != held {
		t.Errorf("table counts %d references, holds %d", n, held)
	}
}

// has reports whether t renews a reference for key.
func (t *References) has(key string) bool {
	_, ok := t.refs.Load(key)
	return ok
}

// noNode is Config.Node without a node.
func noNode() DHT { return nil }
