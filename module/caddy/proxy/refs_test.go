package proxy

import (
	"crypto/sha1"
	"encoding/hex"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"strconv"
	"sync"
	"testing"
	"testing/synctest"
	"time"
	"unsafe"

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
}

// has reports whether t renews a reference for key.
func (t *References) has(key string) bool {
	k, ok := refKey(key)
	if !ok {
		return false
	}
	sh, h := t.locate(&k)
	sh.mu.RLock()
	defer sh.mu.RUnlock()
	return sh.find(&k, h) != nil
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

// TestRefEntrySize: an entry is the 32 bytes the table's memory figures
// count (Bytes, the package docs).
func TestRefEntrySize(t *testing.T) {
	if got := unsafe.Sizeof(refEntry{}); got != refEntrySize {
		t.Errorf("refEntry is %d bytes, refEntrySize says %d", got, refEntrySize)
	}
}

// TestRefTableLikeAMap: random puts, forgets and lapses (renewal passes
// with some keys no longer cached) leave the table holding exactly what
// a map would, through its growth and its backward-shift deletions, and
// what it renews is what was put (addresses, flags, TTL).
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
		ref reference
		ttl time.Duration
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
				w := want{peers[rng.IntN(len(peers))], time.Duration(10+rng.IntN(50)) * time.Minute}
				tab.put(k, w.ref, w.ttl)
				model[k] = w
			case op < 8:
				_, had := model[k]
				if got := tab.Forget(k); got != had {
					t.Fatalf("round %d: Forget(%s) = %v, want %v", round, k, got, had)
				}
				delete(model, k)
			default:
				tab.touch(k)
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
		// Request every cached key, then renew everything: the cached
		// ones are renewed as they were put, the others lapse.
		for k := range model {
			tab.touch(k)
		}
		time.Sleep(time.Hour)
		d := dueNow(tab)
		for k, w := range model {
			r, ok := d[k]
			if ok != cached[k] {
				t.Fatalf("round %d: %s renewed %v, cached %v", round, k, ok, cached[k])
			}
			if !ok {
				delete(model, k)
				continue
			}
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

// BenchmarkReferencesMemory puts a reference for each of b.N objects and
// reports the table's bytes per reference (entries off the Go heap, see
// the package docs) and the Go heap it takes per reference (≈ 0).
func BenchmarkReferencesMemory(b *testing.B) {
	n := max(b.N, 100000)
	tab := NewReferences(nil, noNode)
	ref := reference{Addr: netip.MustParseAddrPort("192.0.2.1:80"), Complete: true}
	keys := make([]string, n)
	for i := range keys {
		sum := sha1.Sum([]byte(strconv.Itoa(i)))
		keys[i] = hex.EncodeToString(sum[:])
	}
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	b.ResetTimer()
	for _, k := range keys {
		tab.put(k, ref, time.Hour)
	}
	b.StopTimer()
	runtime.GC()
	runtime.ReadMemStats(&after)
	b.ReportMetric(float64(tab.Bytes())/float64(n), "B/object")
	b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/float64(n), "heapB/object")
	runtime.KeepAlive(keys)
}

// BenchmarkReferencesTouch is a hit's note of its request.
func BenchmarkReferencesTouch(b *testing.B) {
	tab := NewReferences(nil, noNode)
	ref := reference{Addr: netip.MustParseAddrPort("192.0.2.1:80"), Complete: true}
	keys := make([]string, 4096)
	for i := range keys {
		sum := sha1.Sum([]byte(strconv.Itoa(i)))
		keys[i] = hex.EncodeToString(sum[:])
		tab.put(keys[i], ref, time.Hour)
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
	tab := NewReferences(nil, noNode)
	key := "0123456789abcdef0123456789abcdef01234567"
	tab.put(key, reference{Addr: netip.MustParseAddrPort("192.0.2.1:80"), Complete: true}, time.Hour)
	if n := testing.AllocsPerRun(100, func() { tab.touch(key) }); n != 0 {
		t.Errorf("touch allocates %v times", n)
	}
}
