package coraldht

import (
	"fmt"
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
			s := newStore(l, 1000, 1000)
			k := lk("k")
			for i := 0; i < tc.values; i++ {
				life := time.Hour + time.Duration(i)*time.Minute
				if i == 0 {
					life = tc.remain
				}
				if r, _, _ := s.put(k, []byte(fmt.Sprint("v", i)), life, t0); r != wire.StoreStored {
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
			r, after, _ := s.put(k, []byte("new"), tc.newTTL, t0)
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
	s := newStore(4, 1000, 1000)
	k := lk("k")
	lives := []time.Duration{time.Minute, 50 * time.Minute, 40 * time.Minute, 30 * time.Minute}
	for i, d := range lives {
		s.put(k, []byte(fmt.Sprint("v", i)), d, t0)
	}
	// 1 min < 60/2 min: not full for a 60-minute value; v0 must go.
	if r, _, before := s.put(k, []byte("new"), time.Hour, t0); r != wire.StoreStored || len(before) != 4 {
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
	s := newStore(4, 1000, 1000)
	k := lk("k")
	s.put(k, []byte("v"), time.Minute, t0)
	r, _, before := s.put(k, []byte("v"), time.Hour, t0)
	if r != wire.StoreRefreshed || len(before) != 0 {
		t.Fatalf("longer TTL: result %d, before %v; want refreshed with no other values", r, before)
	}
	if st := s.status(k, t0); st.count != 1 || st.minRemaining != time.Hour {
		t.Fatalf("after longer TTL: %+v, want one value living 1h", st)
	}
	if r, _, _ := s.put(k, []byte("v"), time.Second, t0); r != wire.StoreRefreshed {
		t.Fatalf("shorter TTL: result %d", r)
	}
	if st := s.status(k, t0); st.minRemaining != time.Hour {
		t.Fatalf("a shorter TTL shortened the value: %v", st.minRemaining)
	}
	// The same value is accepted even when the node is full for others.
	for i := range 3 {
		s.put(k, []byte(fmt.Sprint("o", i)), 2*time.Hour, t0)
	}
	if r, _, _ := s.put(k, []byte("v"), time.Hour, t0); r != wire.StoreRefreshed {
		t.Fatalf("refresh at a full node: result %d", r)
	}
}

func TestStoreExpiry(t *testing.T) {
	s := newStore(4, 1000, 1000)
	k := lk("k")
	s.put(k, []byte("a"), time.Second, t0)
	s.put(k, []byte("b"), time.Minute, t0)
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
		s := newStore(4, 3, 100)
		s.put(lk("a"), []byte("1"), time.Minute, t0)
		s.put(lk("b"), []byte("1"), 2*time.Minute, t0)
		s.put(lk("c"), []byte("1"), 3*time.Minute, t0)
		// A longer-lived newcomer displaces the soonest expiry in the store.
		if r, _, _ := s.put(lk("d"), []byte("1"), time.Hour, t0); r != wire.StoreStored {
			t.Fatalf("result %d", r)
		}
		if st := s.status(lk("a"), t0); st.count != 0 {
			t.Fatal("value expiring soonest was not evicted")
		}
		// A newcomer that would expire first is refused.
		if r, _, _ := s.put(lk("e"), []byte("1"), time.Second, t0); r != wire.StoreExhausted {
			t.Fatalf("short newcomer: result %d, want exhausted", r)
		}
		if keys, values, c := s.sizes(); values != 3 || keys != 3 || c.EvictedForSpace != 1 || c.RefusedExhausted != 1 {
			t.Fatalf("keys %d values %d counters %+v", keys, values, c)
		}
	})
	t.Run("keys", func(t *testing.T) {
		s := newStore(4, 100, 2)
		s.put(lk("a"), []byte("1"), time.Minute, t0)
		s.put(lk("a"), []byte("2"), time.Hour, t0)
		s.put(lk("b"), []byte("1"), 30*time.Minute, t0)
		// A third key evicts the whole key holding the soonest expiry.
		if r, _, _ := s.put(lk("c"), []byte("1"), time.Hour, t0); r != wire.StoreStored {
			t.Fatalf("result %d", r)
		}
		if keys, values, _ := s.sizes(); keys != 2 || values != 2 {
			t.Fatalf("keys %d values %d, want 2 and 2", keys, values)
		}
		if st := s.status(lk("a"), t0); st.count != 0 {
			t.Fatal("key a survived")
		}
		// More values for an existing key need no key slot.
		if r, _, _ := s.put(lk("b"), []byte("2"), time.Minute, t0); r != wire.StoreStored {
			t.Fatalf("existing key: result %d", r)
		}
	})
}

func TestStoreKeysPerLevel(t *testing.T) {
	s := newStore(4, 100, 100)
	k := KeyFor("k")
	s.put(levelKey{level: 2, key: k}, []byte("near"), time.Minute, t0)
	if st := s.status(levelKey{level: 0, key: k}, t0); st.count != 0 {
		t.Fatal("a level-2 value is visible at level 0")
	}
	s.dropLevel(2)
	if keys, _, _ := s.sizes(); keys != 0 {
		t.Fatal("dropLevel kept values")
	}
}

func TestPutForcedIgnoresFull(t *testing.T) {
	s := newStore(2, 100, 100)
	k := lk("k")
	s.put(k, []byte("a"), time.Hour, t0)
	s.put(k, []byte("b"), time.Hour, t0)
	if r, _, _ := s.put(k, []byte("c"), time.Hour, t0); r != wire.StoreFull {
		t.Fatalf("sloppy store: result %d, want full", r)
	}
	if r, after, _ := s.putForced(k, []byte("c"), time.Hour, t0); r != wire.StoreStored || after.count != 2 {
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
	if n := len(lt.keys); n > 10 {
		t.Fatalf("%d trackers, bound 10", n)
	}
	top := lt.top(3, t0)
	if len(top) != 3 {
		t.Fatalf("top returned %d", len(top))
	}
}
