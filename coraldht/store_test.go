package coraldht

import (
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht/internal/wire"
)

var t0 = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func lk(s string) levelKey { return levelKey{key: KeyFor(s)} }

func TestFullEdges(t *testing.T) {
	const l = 4
	ttl := 10 * time.Minute
	cases := []struct {
		name    string
		values  int
		remain  time.Duration // remaining lifetime of the shortest-lived value
		newTTL  time.Duration
		full    bool
		outcome uint8
	}{
		{"one short of l", l - 1, time.Hour, ttl, false, wire.StoreStored},
		{"l values all long-lived", l, time.Hour, ttl, true, wire.StoreFull},
		{"shortest exactly half the new TTL", l, ttl / 2, ttl, true, wire.StoreFull},
		{"shortest just under half", l, ttl/2 - time.Millisecond, ttl, false, wire.StoreStored},
		{"long new value makes old ones short", l, time.Hour, 3 * time.Hour, false, wire.StoreStored},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			s := testStore(l, 1000, 1000)
			k := lk("k")
			for i := 0; i < tc.values; i++ {
				life := time.Hour + time.Duration(i)*time.Minute
				if i == 0 {
					life = tc.remain
				}
				if r, _, _ := s.putSelf(k, []byte(fmt.Sprint("v", i)), life, t0); r != wire.StoreStored {
					t.Fatalf("filling: result %d", r)
				}
			}
			st := s.status(k, t0)
			if st.count != tc.values || st.minRemaining != tc.remain {
				t.Fatalf("status = %+v, want count %d min %v", st, tc.values, tc.remain)
			}
			if got := st.full(l, tc.newTTL); got != tc.full {
				t.Fatalf("full = %v, want %v", got, tc.full)
			}
			r, after, _ := s.putSelf(k, []byte("new"), tc.newTTL, t0)
			if r != tc.outcome {
				t.Fatalf("store result %d, want %d", r, tc.outcome)
			}
			if after.count > l {
				t.Fatalf("%d values stored, more than l=%d", after.count, l)
			}
		})
	}
}

func TestStoreEvictsEarliestExpiryWhenNotFull(t *testing.T) {
	s := testStore(4, 1000, 1000)
	k := lk("k")
	lives := []time.Duration{time.Minute, 50 * time.Minute, 40 * time.Minute, 30 * time.Minute}
	for i, d := range lives {
		s.putSelf(k, []byte(fmt.Sprint("v", i)), d, t0)
	}
	// 1 min < 60/2 min: not full for a 60-minute value; v0 must go.
	if r, _, before := s.putSelf(k, []byte("new"), time.Hour, t0); r != wire.StoreStored || len(before) != 4 {
		t.Fatalf("result %d with %d values before, want stored with 4", r, len(before))
	}
	got := map[string]bool{}
	for _, v := range s.get(k, t0) {
		got[string(v.Data)] = true
	}
	if got["v0"] || !got["new"] || len(got) != 4 {
		t.Fatalf("after eviction values = %v, want v1..v3 and new", got)
	}
	_, _, c := s.sizes()
	if c.EvictedForNewer != 1 {
		t.Fatalf("EvictedForNewer = %d", c.EvictedForNewer)
	}
}

func TestStoreSameValueTTL(t *testing.T) {
	s := testStore(4, 1000, 1000)
	k := lk("k")
	s.putSelf(k, []byte("v"), time.Minute, t0)
	r, _, before := s.putSelf(k, []byte("v"), time.Hour, t0)
	if r != wire.StoreRefreshed || len(before) != 0 {
		t.Fatalf("longer TTL: result %d, before %v; want refreshed with no other values", r, before)
	}
	if st := s.status(k, t0); st.count != 1 || st.minRemaining != time.Hour {
		t.Fatalf("after longer TTL: %+v, want one value living 1h", st)
	}
	if r, _, _ := s.putSelf(k, []byte("v"), time.Second, t0); r != wire.StoreRefreshed {
		t.Fatalf("shorter TTL: result %d", r)
	}
	if st := s.status(k, t0); st.minRemaining != time.Hour {
		t.Fatalf("a shorter TTL shortened the value: %v", st.minRemaining)
	}
	// The same value is accepted even when the node is full for others.
	for i := range 3 {
		s.putSelf(k, []byte(fmt.Sprint("o", i)), 2*time.Hour, t0)
	}
	if r, _, _ := s.putSelf(k, []byte("v"), time.Hour, t0); r != wire.StoreRefreshed {
		t.Fatalf("refresh at a full node: result %d", r)
	}
}

func TestStoreExpiry(t *testing.T) {
	s := testStore(4, 1000, 1000)
	k := lk("k")
	s.putSelf(k, []byte("a"), time.Second, t0)
	s.putSelf(k, []byte("b"), time.Minute, t0)
	if vs := s.get(k, t0.Add(time.Second)); len(vs) != 1 || string(vs[0].Data) != "b" {
		t.Fatalf("after 1s got %v, want only b", vs)
	}
	if vs := s.get(k, t0.Add(59*time.Second)); len(vs) != 1 || vs[0].TTL != 1000 {
		t.Fatalf("remaining TTL reported as %v", vs)
	}
	s.expire(t0.Add(time.Minute))
	if keys, values, c := s.sizes(); keys != 0 || values != 0 || c.Expired != 2 {
		t.Fatalf("after expiry: %d keys %d values, %d expired", keys, values, c.Expired)
	}
}

func TestStoreMemoryBound(t *testing.T) {
	t.Run("values", func(t *testing.T) {
		s := testStore(4, 3, 100)
		s.putSelf(lk("a"), []byte("1"), time.Minute, t0)
		s.putSelf(lk("b"), []byte("1"), 2*time.Minute, t0)
		s.putSelf(lk("c"), []byte("1"), 3*time.Minute, t0)
		// The holder with the most values (here the only one) gives up
		// its soonest-expiring value, whatever the newcomer's lifetime.
		for _, ttl := range []time.Duration{time.Hour, time.Second} {
			if r, _, _ := s.putSelf(lk(ttl.String()), []byte("1"), ttl, t0); r != wire.StoreStored {
				t.Fatalf("ttl %v: result %d", ttl, r)
			}
		}
		if s.status(lk("a"), t0).count != 0 || s.status(lk("b"), t0).count != 0 {
			t.Fatal("the values expiring soonest were not evicted")
		}
		if keys, values, c := s.sizes(); values != 3 || keys != 3 || c.EvictedForSpace != 2 || c.RefusedExhausted != 0 {
			t.Fatalf("keys %d values %d counters %+v", keys, values, c)
		}
	})
	t.Run("keys", func(t *testing.T) {
		s := testStore(4, 100, 2)
		s.putSelf(lk("a"), []byte("1"), time.Minute, t0)
		s.putSelf(lk("a"), []byte("2"), time.Hour, t0)
		s.putSelf(lk("b"), []byte("1"), 30*time.Minute, t0)
		// A third key needs a key slot: values go, soonest first, until
		// a key is free.
		if r, _, _ := s.putSelf(lk("c"), []byte("1"), time.Hour, t0); r != wire.StoreStored {
			t.Fatalf("result %d", r)
		}
		if keys, values, _ := s.sizes(); keys != 2 || values != 2 {
			t.Fatalf("keys %d values %d, want 2 and 2", keys, values)
		}
		if st := s.status(lk("b"), t0); st.count != 0 {
			t.Fatal("key b survived")
		}
		// More values for an existing key need no key slot.
		if r, _, _ := s.putSelf(lk("a"), []byte("3"), time.Minute, t0); r != wire.StoreStored {
			t.Fatalf("existing key: result %d", r)
		}
	})
	t.Run("bytes", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.MaxStoreBytes = 10
		s := newStore(cfg)
		s.putSelf(lk("a"), []byte("12345"), time.Hour, t0)
		s.putSelf(lk("b"), []byte("12345"), 2*time.Hour, t0)
		if r, _, _ := s.putSelf(lk("c"), []byte("1"), time.Hour, t0); r != wire.StoreStored || s.status(lk("a"), t0).count != 0 {
			t.Fatalf("result %d; a kept: %v", r, s.status(lk("a"), t0).count != 0)
		}
	})
	t.Run("trust members keeps the rule of before", func(t *testing.T) {
		cfg := DefaultConfig()
		cfg.FullValues, cfg.MaxValues, cfg.TrustMembers = 4, 3, true
		s := newStore(cfg)
		for i, ttl := range []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute} {
			s.putSelf(lk(fmt.Sprint(i)), []byte("1"), ttl, t0)
		}
		if r, _, _ := s.putSelf(lk("d"), []byte("1"), time.Hour, t0); r != wire.StoreStored {
			t.Fatalf("longer newcomer: result %d", r)
		}
		if r, _, _ := s.putSelf(lk("e"), []byte("1"), time.Second, t0); r != wire.StoreExhausted {
			t.Fatalf("short newcomer: result %d, want exhausted", r)
		}
	})
}

// TestStoreShares: one source holds at most its share of the store (its
// own soonest value makes room), half of a key's values; a full store
// evicts from the prefix holding the most, even values of the longest
// lifetime; this node's own values are charged to no source.
func TestStoreShares(t *testing.T) {
	src := func(ip string) holderID { return holderID{ip: netip.MustParseAddr(ip)} }
	cfg := DefaultConfig()
	cfg.MaxValues, cfg.MaxKeys, cfg.SourceShare = 16, 16, 0.25 // 4 values a source, 8 a prefix
	t.Run("a source's share", func(t *testing.T) {
		s := newStore(cfg)
		for i := range 10 {
			if r, _, _, _ := s.put(lk(fmt.Sprint(i)), []byte("x"), time.Duration(i+1)*time.Hour, t0, src("192.0.2.1")); r != wire.StoreStored {
				t.Fatalf("store %d: result %d", i, r)
			}
		}
		if got := s.sources[netip.MustParseAddr("192.0.2.1")].values; got != 4 {
			t.Fatalf("the source holds %d values, share 4", got)
		}
		if s.status(lk("5"), t0).count != 0 || s.status(lk("9"), t0).count != 1 {
			t.Fatal("the source's soonest values did not make room")
		}
		for i := range 3 {
			s.put(lk(fmt.Sprint("p", i)), []byte("x"), time.Hour, t0, src(fmt.Sprint("192.0.2.", 10+i)))
		}
		if got := s.prefixes[netip.MustParsePrefix("192.0.2.0/24")].values; got != 7 {
			t.Fatalf("the prefix holds %d values, want 7", got)
		}
		s.put(lk("p9"), []byte("x"), time.Hour, t0, src("192.0.2.20"))
		s.put(lk("p10"), []byte("x"), time.Hour, t0, src("192.0.2.21"))
		if got := s.prefixes[netip.MustParsePrefix("192.0.2.0/24")].values; got != 8 {
			t.Fatalf("the prefix holds %d values, share 8", got)
		}
	})
	t.Run("half a key", func(t *testing.T) {
		s := newStore(cfg)
		for i := range 4 {
			s.put(lk("k"), []byte(fmt.Sprint(i)), time.Hour, t0, src("192.0.2.1"))
		}
		if st := s.status(lk("k"), t0); st.count != 2 {
			t.Fatalf("one source holds %d of the key's values, limit 2", st.count)
		}
		if r, _, _, _ := s.put(lk("k"), []byte("other"), time.Hour, t0, src("198.51.100.1")); r != wire.StoreStored {
			t.Fatalf("another source: result %d", r)
		}
	})
	t.Run("largest holder first", func(t *testing.T) {
		s := newStore(cfg)
		for i := range 4 {
			s.put(lk(fmt.Sprint("m", i)), []byte("x"), 24*time.Hour, t0, src("192.0.2.1"))
		}
		// A site-mate of the member's, with short-lived values.
		for i := range 2 {
			s.put(lk(fmt.Sprint("mate", i)), []byte("x"), time.Minute, t0, src("192.0.2.2"))
		}
		for i := range 10 {
			s.putSelf(lk(fmt.Sprint("own", i)), []byte("x"), time.Minute, t0)
		}
		// Full. The largest source is this node (10): its value goes.
		s.put(lk("a"), []byte("x"), time.Minute, t0, src("198.51.100.7"))
		if c := s.sources[netip.Addr{}].values; c != 9 {
			t.Fatalf("this node holds %d, want 9", c)
		}
		for i := range 5 {
			s.put(lk(fmt.Sprint("b", i)), []byte("x"), time.Minute, t0, src(fmt.Sprint("198.51.100.", 10+i)))
		}
		// Now the member (4) is the largest with this node: honest
		// one-minute values evict the member's 24-hour ones, never the
		// site-mate's that expire sooner.
		for i := range 3 {
			if r, _, _, _ := s.put(lk(fmt.Sprint("c", i)), []byte("x"), time.Minute, t0, src(fmt.Sprint("203.0.113.", 1+i))); r != wire.StoreStored {
				t.Fatalf("result %d", r)
			}
		}
		if got := s.sources[netip.MustParseAddr("192.0.2.2")].values; got != 2 {
			t.Fatalf("the member's site-mate lost values: %d left of 2", got)
		}
		if got := s.sources[netip.MustParseAddr("192.0.2.1")].values; got >= 4 {
			t.Fatalf("the member kept its %d values", got)
		}
		if _, values, _ := s.sizes(); values != 16 {
			t.Fatalf("%d values", values)
		}
	})
	t.Run("this node's own values", func(t *testing.T) {
		s := newStore(cfg)
		for i := range 12 {
			s.putSelf(lk(fmt.Sprint(i)), []byte("x"), time.Hour, t0)
		}
		if _, values, c := s.sizes(); values != 12 || c.EvictedForShare != 0 {
			t.Fatalf("%d values, %d evicted for a share", values, c.EvictedForShare)
		}
	})
}

// TestStoreBookkeeping: through random stores, refreshes, expiry and
// evictions from many sources, every value sits in its three heaps at
// the index it records, and the holders' counts add up.
func TestStoreBookkeeping(t *testing.T) {
	cfg := DefaultConfig()
	cfg.MaxValues, cfg.MaxKeys, cfg.MaxStoreBytes, cfg.SourceShare = 64, 48, 400, 0.2
	s := newStore(cfg)
	rng := rand.New(rand.NewPCG(1, 2))
	now := t0
	for i := range 5000 {
		h := holderID{ip: netip.AddrFrom4([4]byte{10, 0, byte(rng.IntN(3)), byte(rng.IntN(6))})}
		if rng.IntN(8) == 0 {
			h = holderID{}
		}
		data := []byte(fmt.Sprint("v", rng.IntN(50), strings.Repeat("x", rng.IntN(12))))
		s.put(lk(fmt.Sprint(rng.IntN(70))), data, time.Duration(1+rng.IntN(600))*time.Second, now, h)
		now = now.Add(time.Duration(rng.IntN(3)) * time.Second)
		if i%97 == 0 {
			s.dropWhere(func(v *storedValue) bool { return v.from.ip.IsValid() && v.from.ip.As4()[2] == 1 })
		}
		checkStoreBooks(t, s)
	}
}

func checkStoreBooks(t *testing.T, s *store) {
	t.Helper()
	values, bytes := 0, 0
	src, pre := map[netip.Addr][2]int{}, map[netip.Prefix][2]int{}
	for i, v := range s.byExpiry.vs {
		if v.idx[slotExpiry] != i || s.sources[v.from.ip].heap.vs[v.idx[slotSource]] != v || s.prefixes[v.from.prefix()].heap.vs[v.idx[slotPrefix]] != v {
			t.Fatalf("value %d is not where its indexes say", i)
		}
		if !slices.Contains(v.entry.values, v) || s.keys[v.entry.lk] != v.entry {
			t.Fatal("value not in its key")
		}
		values++
		bytes += len(v.data)
		a := src[v.from.ip]
		src[v.from.ip] = [2]int{a[0] + 1, a[1] + len(v.data)}
		b := pre[v.from.prefix()]
		pre[v.from.prefix()] = [2]int{b[0] + 1, b[1] + len(v.data)}
	}
	if bytes != s.bytes || values > s.maxValues || len(s.keys) > s.maxKeys || s.bytes > s.maxBytes {
		t.Fatalf("%d values, %d bytes (books %d), %d keys", values, bytes, s.bytes, len(s.keys))
	}
	for ip, h := range s.sources {
		if src[ip] != [2]int{h.values, h.bytes} {
			t.Fatalf("source %v: books %d/%d, counted %v", ip, h.values, h.bytes, src[ip])
		}
	}
	for ip, h := range s.sources {
		if s.largest[h.hidx] != h {
			t.Fatalf("source %v is not where its index says", ip)
		}
	}
	for p, h := range s.prefixes {
		if pre[p] != [2]int{h.values, h.bytes} {
			t.Fatalf("prefix %v: books %d/%d, counted %v", p, h.values, h.bytes, pre[p])
		}
	}
	if len(src) != len(s.sources) || len(pre) != len(s.prefixes) || len(s.largest) != len(s.sources) {
		t.Fatal("holders without values, or values without holders")
	}
	for i := 1; i < len(s.largest); i++ {
		if s.largest[(i-1)/2].values < s.largest[i].values {
			t.Fatal("the largest-holder heap is out of order")
		}
	}
}

func TestStoreKeysPerLevel(t *testing.T) {
	s := testStore(4, 100, 100)
	k := KeyFor("k")
	s.putSelf(levelKey{level: 2, key: k}, []byte("near"), time.Minute, t0)
	if st := s.status(levelKey{level: 0, key: k}, t0); st.count != 0 {
		t.Fatal("a level-2 value is visible at level 0")
	}
	s.dropWhere(func(v *storedValue) bool { return v.entry.lk.level == 2 })
	if keys, _, _ := s.sizes(); keys != 0 {
		t.Fatal("dropWhere kept values")
	}
}

func TestPutForcedIgnoresFull(t *testing.T) {
	s := testStore(2, 100, 100)
	k := lk("k")
	s.putSelf(k, []byte("a"), time.Hour, t0)
	s.putSelf(k, []byte("b"), time.Hour, t0)
	if r, _, _ := s.putSelf(k, []byte("c"), time.Hour, t0); r != wire.StoreFull {
		t.Fatalf("sloppy store: result %d, want full", r)
	}
	if r, after, _, _ := s.putForced(k, []byte("c"), time.Hour, t0, holderID{}); r != wire.StoreStored || after.count != 2 {
		t.Fatalf("forced store: result %d count %d", r, after.count)
	}
}

func TestLoadedEdges(t *testing.T) {
	const beta = 12
	k := lk("hot")
	t.Run("beta requests are not loaded, one more is", func(t *testing.T) {
		lt := newLoadTracker(beta, 100)
		for i := 1; i <= beta; i++ {
			if lt.request(k, kindPutProbe, false, t0.Add(time.Duration(i)*time.Second)) {
				t.Fatalf("request %d of %d in a minute reported loaded", i, beta)
			}
		}
		if !lt.request(k, kindGet, false, t0.Add(13*time.Second)) {
			t.Fatal("request beta+1 within a minute not loaded")
		}
	})
	t.Run("the window is one minute", func(t *testing.T) {
		lt := newLoadTracker(beta, 100)
		// beta+1 requests spread so the first is exactly a minute old.
		for i := 0; i < beta; i++ {
			lt.request(k, kindGet, false, t0.Add(time.Duration(i)*time.Second))
		}
		if lt.request(k, kindGet, false, t0.Add(time.Minute)) {
			t.Fatal("a request a minute after the first of beta+1 counted as loaded")
		}
	})
	t.Run("stores do not count", func(t *testing.T) {
		lt := newLoadTracker(beta, 100)
		for range 100 {
			lt.request(k, kindStore, false, t0)
		}
		if lt.request(k, kindGet, false, t0) {
			t.Fatal("stores made the key loaded")
		}
		if kl := lt.snapshot(k, t0); kl.Stores != 100 || kl.Gets != 1 {
			t.Fatalf("counters %+v", kl)
		}
	})
	t.Run("sustained load leaks one request per minute/beta", func(t *testing.T) {
		lt := newLoadTracker(beta, 100)
		passed, last := 0, -1
		// 10 requests a second for 5 minutes.
		for i := 0; i < 3000; i++ {
			now := t0.Add(time.Duration(i) * 100 * time.Millisecond)
			if !lt.request(k, kindPutProbe, false, now) {
				passed++
				if i >= beta && i-last != 50 {
					t.Fatalf("request %d passed %d requests after the previous one, want 50 (5 s)", i, i-last)
				}
				last = i
			}
		}
		// beta in the initial burst, then one every 5 s for the rest.
		if want := beta + (3000-beta)/50; passed < want-1 || passed > want+1 {
			t.Fatalf("%d requests passed in 5 min, want about %d", passed, want)
		}
		if kl := lt.snapshot(k, t0.Add(300*time.Second)); !kl.Loaded || kl.LoadedAnswers != uint64(3000-passed) {
			t.Fatalf("snapshot %+v", kl)
		}
	})
	t.Run("keys are independent", func(t *testing.T) {
		lt := newLoadTracker(beta, 100)
		for range beta + 1 {
			lt.request(k, kindGet, false, t0)
		}
		if lt.request(lk("other"), kindGet, false, t0) {
			t.Fatal("load on one key made another loaded")
		}
	})
}

func TestLoadTrackerBounded(t *testing.T) {
	lt := newLoadTracker(12, 10)
	for i := range 100 {
		lt.request(lk(fmt.Sprint(i)), kindGet, false, t0)
	}
	if n := lt.n; n > 10 {
		t.Fatalf("%d trackers, bound 10", n)
	}
	// The key idle longest went first: the last ten remain.
	for i := 90; i < 100; i++ {
		if lt.findLocked(lk(fmt.Sprint(i))) < 0 {
			t.Fatalf("key %d, among the ten most recent, was evicted", i)
		}
	}
	top := lt.top(3, t0)
	if len(top) != 3 {
		t.Fatalf("top returned %d", len(top))
	}
}

// testStore is a store with the default configuration but for l and the
// bounds.
func testStore(l, maxValues, maxKeys int) *store {
	cfg := DefaultConfig()
	cfg.FullValues, cfg.MaxValues, cfg.MaxKeys = l, maxValues, maxKeys
	return newStore(cfg)
}

// putSelf stores as this node itself, which no share limits.
func (s *store) putSelf(lk levelKey, data []byte, ttl time.Duration, now time.Time) (uint8, keyStatus, []wire.Value) {
	r, after, before, _ := s.put(lk, data, ttl, now, holderID{})
	return r, after, before
}

// BenchmarkLoadTrackerMemory fills a tracker to its default bound
// (MaxTrackedKeys) with keys seen once each, as a proxy filling its cache
// makes them, and reports the heap a tracked key takes.
func BenchmarkLoadTrackerMemory(b *testing.B) {
	cfg := DefaultConfig()
	for b.Loop() {
		var before, after runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&before)
		lt := newLoadTracker(cfg.Leak, cfg.MaxTrackedKeys)
		for i := range cfg.MaxTrackedKeys {
			var key ID
			binary.BigEndian.PutUint64(key[:], uint64(i))
			lt.request(levelKey{0, key}, kindGet, false, t0)
		}
		runtime.GC()
		runtime.ReadMemStats(&after)
		b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/float64(cfg.MaxTrackedKeys), "B/key")
		runtime.KeepAlive(lt)
	}
}
