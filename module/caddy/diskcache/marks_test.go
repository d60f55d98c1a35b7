package diskcache

import (
	"fmt"
	"strings"
	"testing"
)

// TestMarks: a mark is kept with its object across versions and goes with
// it (Delete, eviction); only 40-hex keys of complete objects are marked;
// Marked counts them; a pass in batches visits each marked object once and
// sets or clears the marks it returns.
func TestMarks(t *testing.T) {
	s := openStore(t, testOptions(t, 1<<30))
	keys := make([]string, 2*markBatch+10) // three UpdateMarks batches
	for i := range keys {
		keys[i] = fmt.Sprintf("%040x", i)
		put(t, s, keys[i], "x")
	}
	if _, ok := s.SetMark("not a cache key", 1); ok {
		t.Error("a key that is not 40 hex digits was marked")
	}
	put(t, s, "not a cache key", "x")
	if _, ok := s.SetMark("not a cache key", 1); ok || s.Mark("not a cache key") != 0 {
		t.Error("a hashed name was marked")
	}
	if _, ok := s.SetMark(strings.Repeat("f", 40), 1); ok {
		t.Error("a key not in the store was marked")
	}
	for i, k := range keys {
		if old, ok := s.SetMark(k, uint64(i+1)); !ok || old != 0 {
			t.Fatalf("SetMark(%s) = %d, %v", k, old, ok)
		}
	}
	if n := s.Marked(); n != len(keys) {
		t.Fatalf("Marked %d, want %d", n, len(keys))
	}
	put(t, s, keys[0], "a new version")
	if m := s.Mark(keys[0]); m != 1 {
		t.Errorf("mark after a new version: %d, want 1", m)
	}
	s.AddMarkBits(keys[0], 1<<40)
	if m := s.Mark(keys[0]); m != 1|1<<40 {
		t.Errorf("mark after AddMarkBits: %#x", m)
	}
	if err := s.Delete(keys[1]); err != nil {
		t.Fatal(err)
	}
	if n := s.Marked(); n != len(keys)-1 {
		t.Fatalf("Marked %d after a Delete, want %d", n, len(keys)-1)
	}
	put(t, s, keys[1], "back")
	if m := s.Mark(keys[1]); m != 0 {
		t.Errorf("an object stored again has the removed one's mark %d", m)
	}

	// A pass: clear the odd marks, double the even ones.
	seen := map[string]int{}
	calls := 0
	for from := 0; from >= 0; calls++ {
		from = s.UpdateMarks(from, func(o MarkedObject, m uint64) uint64 {
			seen[o.Key()]++
			if m%2 == 1 {
				return 0
			}
			return 2 * m
		})
	}
	if calls < 3 {
		t.Errorf("%d UpdateMarks calls, want a batch each", calls)
	}
	for i, k := range keys {
		want, visits := uint64(0), 1
		switch {
		case i == 1:
			visits = 0
		case i == 0: // 1|1<<40: odd, cleared
		case (i+1)%2 == 0:
			want = 2 * uint64(i+1)
		}
		if seen[k] != visits || s.Mark(k) != want {
			t.Fatalf("%s: visited %d times, mark %d; want %d, %d", k, seen[k], s.Mark(k), visits, want)
		}
	}
	if n, want := s.Marked(), (len(keys)-1)/2; n != want {
		t.Errorf("Marked %d after the pass, want %d", n, want)
	}
}

// TestMarksGoWithEviction: an evicted object's mark is no longer counted.
func TestMarksGoWithEviction(t *testing.T) {
	s := openStore(t, testOptions(t, 64<<10)) // sixteen 4 KiB blocks
	first := fmt.Sprintf("%040x", 0)
	put(t, s, first, "x")
	s.SetMark(first, 7)
	for i := 1; i < 64; i++ {
		put(t, s, fmt.Sprintf("%040x", i), "x")
	}
	if _, ok := s.Stat(first); ok {
		t.Fatal("the first object was not evicted")
	}
	if n := s.Marked(); n != 0 {
		t.Errorf("Marked %d after the marked object was evicted", n)
	}
}

// TestAddMarkBitsAllocates: a hit's note allocates nothing.
func TestAddMarkBitsAllocates(t *testing.T) {
	s := openStore(t, testOptions(t, 1<<20))
	key := fmt.Sprintf("%040x", 1)
	put(t, s, key, "x")
	s.SetMark(key, 1)
	if n := testing.AllocsPerRun(100, func() { s.AddMarkBits(key, 2) }); n != 0 {
		t.Errorf("AddMarkBits allocates %v times", n)
	}
}
