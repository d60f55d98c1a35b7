package proxy

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// TestRefTableRenewsOnlyRequested: a reference is renewed when its TTL runs
// out only if its object was requested since the last put and is still in
// the cache (in virtual time).
func TestRefTableRenewsOnlyRequested(t *testing.T) {
	synctest.Test(t, testRefTableRenewsOnlyRequested)
}

func testRefTableRenewsOnlyRequested(t *testing.T) {
	store := storeHolding(t, "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")
	tab := NewReferences(store, noNode)
	ref := reference{Addr: netip.MustParseAddrPort("192.0.2.1:80"), Complete: true}
	tab.put("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", ref, time.Hour)
	tab.put("bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", ref, time.Hour)
	tab.put("cccccccccccccccccccccccccccccccccccccccc", ref, time.Hour) // not cached (evicted): not kept
	if n := tab.Len(); n != 2 {
		t.Fatalf("%d references kept, want the 2 of cached objects", n)
	}

	time.Sleep(10 * time.Minute)
	tab.touch("aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa")
	tab.touch("cccccccccccccccccccccccccccccccccccccccc")
	if d := dueNow(tab); len(d) != 0 {
		t.Fatalf("renewals before the TTL ran out: %v", d)
	}
	time.Sleep(50 * time.Minute) // within renewAhead of the expiry
	d := dueNow(tab)
	if len(d) != 1 {
		t.Fatalf("renewed %d references, want only the requested, cached one", len(d))
	}
	if r, ok := d["aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"]; !ok || r.ref.Addr != ref.Addr || !r.ref.Complete || r.ttl != time.Hour {
		t.Fatalf("renewed %v", d)
	}
	// Not requested since that renewal: it lapses next time.
	time.Sleep(time.Hour)
	if d := dueNow(tab); len(d) != 0 {
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
	keys := make([]string, 64)
	for i := range keys {
		keys[i] = fmt.Sprintf("%040d", i)
	}
	store := storeHolding(t, keys...)
	tab := NewReferences(store, noNode)
	ref := reference{Addr: netip.MustParseAddrPort("192.0.2.1:80"), Complete: true}
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
		dueNow(tab)
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
	for _, key := range keys {
		tab.put(key, ref, time.Hour)
	}
	if n := tab.Len(); n != len(keys) {
		t.Errorf("table counts %d references after putting all %d", n, len(keys))
	}
}

// storeHolding opens a store (closed when the test ends) holding a
// one-byte object under each of keys.
func storeHolding(t testing.TB, keys ...string) *diskcache.Store {
	t.Helper()
	store := openTestStore(t, diskcache.Options{Dir: t.TempDir(), MaxBytes: 1 << 30, NoSync: true})
	for _, key := range keys {
		m := diskcache.Meta{Key: key, Status: 200, Size: 1, Stored: time.Now()}
		w, err := store.Create(key, m)
		if err != nil {
			t.Fatal(err)
		}
		w.Write([]byte("x"))
		if err := w.Commit(m); err != nil {
			t.Fatal(err)
		}
	}
	return store
}

// dueNow is what one renewal pass of t renews, by key.
func dueNow(t *References) map[string]refRenewal {
	out := make(map[string]refRenewal)
	t.due(func(batch []refRenewal) bool {
		for _, r := range batch {
			out[r.key] = r
		}
		return true
	})
	return out
}

// noNode is Config.Node without a node.
func noNode() DHT { return nil }

// TestRefTableLikeAMap: random puts, forgets and lapses (renewal passes
// with some keys no longer cached) leave the table holding exactly what
// a map of the cached objects' references would, and what it renews is
// what was put (addresses, flags, TTL); a put for an object not cached is
// not kept.
func TestRefTableLikeAMap(t *testing.T) {
	synctest.Test(t, testRefTableLikeAMap)
}

func testRefTableLikeAMap(t *testing.T) {
	store, err := diskcache.Open(diskcache.Options{Dir: t.TempDir(), MaxBytes: 1 << 30, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	tab := NewReferences(store, noNode)
	peers := []reference{
		{Addr: netip.MustParseAddrPort("192.0.2.1:80"), DHT: netip.MustParseAddrPort("192.0.2.1:4000"), Complete: true},
		{Addr: netip.MustParseAddrPort("[2001:db8::1]:8080"), Complete: true, Negative: true},
	}
	type want struct {
		ref       reference
		ttl       time.Duration
		requested bool // since the put or the last renewal
	}
	model := map[string]want{}
	rng := rand.New(rand.NewPCG(1, 2))
	key := func(i int) string {
		sum := sha1.Sum([]byte(strconv.Itoa(i)))
		return hex.EncodeToString(sum[:])
	}
	const keys = 20000
	cached := map[string]bool{}
	for i := range keys {
		if i%4 != 0 { // a quarter were evicted: they lapse at renewal
			k := key(i)
			cached[k] = true
			w, err := store.Create(k, diskcache.Meta{Key: k, Status: 200, Size: 1, Stored: time.Now()})
			if err != nil {
				t.Fatal(err)
			}
			w.Write([]byte("x"))
			if err := w.Commit(diskcache.Meta{Key: k, Status: 200, Size: 1, Stored: time.Now()}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for round := range 6 {
		for range 30000 {
			k := key(rng.IntN(keys))
			switch op := rng.IntN(10); {
			case op < 6:
				w := want{ref: peers[rng.IntN(len(peers))], ttl: time.Duration(10+rng.IntN(50)) * time.Minute}
				tab.put(k, w.ref, w.ttl)
				if cached[k] {
					model[k] = w
				}
			case op < 8:
				_, had := model[k]
				if got := tab.Forget(k); got != had {
					t.Fatalf("round %d: Forget(%s) = %v, want %v", round, k, got, had)
				}
				delete(model, k)
			default:
				tab.touch(k)
				if w, ok := model[k]; ok {
					w.requested = true
					model[k] = w
				}
			}
		}
		if tab.Len() != len(model) {
			t.Fatalf("round %d: Len %d, want %d", round, tab.Len(), len(model))
		}
		for i := range keys {
			k := key(i)
			if _, ok := model[k]; tab.has(k) != ok {
				t.Fatalf("round %d: has(%s) = %v, want %v", round, k, !ok, ok)
			}
		}
		// Request all but a tenth of the keys, then renew everything:
		// the requested ones are renewed as they were put, the others
		// lapse.
		for k, w := range model {
			if rng.IntN(10) != 0 {
				tab.touch(k)
				w.requested = true
				model[k] = w
			}
		}
		time.Sleep(time.Hour)
		d := dueNow(tab)
		for k, w := range model {
			r, ok := d[k]
			if ok != w.requested {
				t.Fatalf("round %d: %s renewed %v, requested %v", round, k, ok, w.requested)
			}
			if !ok {
				delete(model, k)
				continue
			}
			w.requested = false
			model[k] = w
			if r.ref != w.ref || r.ttl != w.ttl {
				t.Fatalf("round %d: %s renewed as %+v for %v, put as %+v for %v", round, k, r.ref, r.ttl, w.ref, w.ttl)
			}
		}
		if len(d) != len(model) || tab.Len() != len(model) {
			t.Fatalf("round %d: renewed %d, table holds %d, want %d", round, len(d), tab.Len(), len(model))
		}
	}
}

// TestRefTableKeepsOnlyCacheKeys: a key that is not 40 lowercase hex
// digits (no cache key is) is not kept, touched or forgotten.
func TestRefTableKeepsOnlyCacheKeys(t *testing.T) {
	tab := NewReferences(nil, noNode)
	ref := reference{Addr: netip.MustParseAddrPort("192.0.2.1:80"), Complete: true}
	for _, k := range []string{"", "abc", "AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA", "gggggggggggggggggggggggggggggggggggggggg", "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"} {
		tab.put(k, ref, time.Hour)
		tab.touch(k)
		if tab.Forget(k) {
			t.Errorf("Forget(%q) found a reference", k)
		}
	}
	if n := tab.Len(); n != 0 {
		t.Errorf("Len %d, want 0", n)
	}
}

// BenchmarkReferencesTouch is a hit's note of its request.
func BenchmarkReferencesTouch(b *testing.B) {
	keys := make([]string, 4096)
	for i := range keys {
		sum := sha1.Sum([]byte(strconv.Itoa(i)))
		keys[i] = hex.EncodeToString(sum[:])
	}
	tab := NewReferences(storeHolding(b, keys...), noNode)
	ref := reference{Addr: netip.MustParseAddrPort("192.0.2.1:80"), Complete: true}
	for _, k := range keys {
		tab.put(k, ref, time.Hour)
	}
	b.RunParallel(func(pb *testing.PB) {
		i := 0
		for pb.Next() {
			tab.touch(keys[i&4095])
			i++
		}
	})
}

// TestRefTouchAllocates: a hit's touch allocates nothing.
func TestRefTouchAllocates(t *testing.T) {
	key := "0123456789abcdef0123456789abcdef01234567"
	tab := NewReferences(storeHolding(t, key), noNode)
	tab.put(key, reference{Addr: netip.MustParseAddrPort("192.0.2.1:80"), Complete: true}, time.Hour)
	if !tab.has(key) {
		t.Fatal("no reference kept")
	}
	if n := testing.AllocsPerRun(100, func() { tab.touch(key) }); n != 0 {
		t.Errorf("touch allocates %v times", n)
	}
}

// TestHitNotesRequest: through ServeHTTP, an object's first hit after its
// reference was put marks it requested (so it is renewed), a Vary
// object's hit marks the URL's entry, where the reference is, and a
// reference nobody asked for stays unrequested.
func TestHitNotesRequest(t *testing.T) {
	p := startPurgeProxies(t, 1, 12, true)[0]
	o := newPurgeOrigin(t)
	p.get(t, o, "/a.jpg")
	p.get(t, o, "/b.jpg")
	p.get(t, o, "/vary/page", "Accept-Language", "en")
	p.settle(t)
	key := func(path string) string { return coralname.CacheKey("http", "127.0.0.1", atoiPort(o.port()), path, "") }
	for _, path := range []string{"/a.jpg", "/b.jpg", "/vary/page"} {
		if m := p.px.store.Mark(key(path)); m&refLive == 0 || m&refRequested != 0 {
			t.Fatalf("%s after its download: mark %#x, want a reference not yet requested", path, m)
		}
	}
	for range 3 {
		p.get(t, o, "/a.jpg")
		p.get(t, o, "/vary/page", "Accept-Language", "en")
	}
	for _, path := range []string{"/a.jpg", "/vary/page"} {
		if m := p.px.store.Mark(key(path)); m&refRequested == 0 {
			t.Errorf("%s after hits: mark %#x, not requested", path, m)
		}
	}
	if m := p.px.store.Mark(key("/b.jpg")); m&refRequested != 0 {
		t.Errorf("/b.jpg, never hit: mark %#x, requested", m)
	}
}
