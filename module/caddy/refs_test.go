package coralcaddy

import (
	"fmt"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// TestRefTableRenewsOnlyRequested: a reference is renewed when its TTL runs
// out only if its object was requested since the last put and is still in
// the cache.
func TestRefTableRenewsOnlyRequested(t *testing.T) {
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
	now := time.Unix(10_000, 0)
	tab := newRefTable(store, nil)
	tab.now = func() time.Time { return now }
	ref := reference{Addr: netip.MustParseAddrPort("192.0.2.1:80"), Complete: true}
	tab.put("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", ref, time.Hour)
	tab.put("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", ref, time.Hour)
	tab.put("cccccccccccccccccccccccccccccccccccccccc", ref, time.Hour) // not cached (evicted)

	now = now.Add(10 * time.Minute)
	tab.touch("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	tab.touch("cccccccccccccccccccccccccccccccccccccccc")
	if d := tab.due(); len(d) != 0 {
		t.Fatalf("renewals before the TTL ran out: %v", d)
	}
	now = now.Add(50 * time.Minute) // within renewAhead of the expiry
	d := tab.due()
	if len(d) != 1 {
		t.Fatalf("renewed %d references, want only the requested, cached one", len(d))
	}
	if _, ok := d["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]; !ok {
		t.Fatalf("renewed %v", d)
	}
	// Not requested since that renewal: it lapses next time.
	now = now.Add(time.Hour)
	if d := tab.due(); len(d) != 0 {
		t.Errorf("renewed an unrequested reference: %v", d)
	}
	if left := tab.len(); left != 0 {
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
	var clock atomic.Int64
	tab := newRefTable(store, nil)
	tab.now = func() time.Time { return time.Unix(clock.Load(), 0) }
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
				tab.forget(key)
			} else {
				tab.put(key, ref, time.Hour)
			}
		}
		clock.Add(3600)
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
	if n := tab.len(); n != held {
		t.Errorf("table counts %d references, holds %d", n, held)
	}
}

// has reports whether t renews a reference for key.
func (t *refTable) has(key string) bool {
	_, ok := t.refs.Load(key)
	return ok
}
