package diskcache

import (
	"errors"
	"fmt"
	"strings"
	"testing"
)

// Regression tests for a hostile origin (or client) against the store's
// bounds: declared sizes that never arrive, downloads that trickle, many
// of them at once, and objects far smaller than a file-system block. They
// use the defaults (only MaxBytes set), which are what a proxy runs with.

// fillCache stores objects of bodyLen bytes until the first eviction and
// returns the keys still present: a cache full of complete objects.
func fillCache(t *testing.T, s *Store, bodyLen int) []string {
	t.Helper()
	body := strings.Repeat("c", bodyLen)
	var keys []string
	for i := 0; s.Stats().Evictions == 0; i++ {
		if i > 100000 {
			t.Fatal("no eviction after 100000 objects")
		}
		k := fmt.Sprintf("c%039x", i)
		put(t, s, k, body)
		keys = append(keys, k)
	}
	var present []string
	for _, k := range keys {
		if _, ok := s.Peek(k); ok {
			present = append(present, k)
		}
	}
	return present
}

// TestSlowOriginKeepsCache is the issue's "one slow origin empties the
// cache": origins announcing a Content-Length as large as the cache allows
// and then trickling bytes. Create must neither reserve nor evict for the
// declared size, and the store must keep its complete objects and keep
// storing others meanwhile.
func TestSlowOriginKeepsCache(t *testing.T) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	full := fillCache(t, s, 2000)
	evictions := s.Stats().Evictions

	// Near the whole cache: not even started (the default MaxObjectBytes
	// is an eighth of MaxBytes).
	m := testMeta("")
	m.Size = o.MaxBytes - 4096
	if w, err := s.Create("5105105105105105105105105105105105105100", m); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Create declaring %d bytes of a %d-byte cache: %v", m.Size, o.MaxBytes, err)
		if w != nil {
			w.Close()
		}
	}
	// Eight slow origins declaring the largest size allowed: together the
	// whole cache. Each has a reader following it, as in the proxy.
	m.Size = o.MaxBytes / 8
	var slow []*Writer
	for i := range 8 {
		key := fmt.Sprintf("51%038x", i)
		w, err := s.Create(key, m)
		if err != nil {
			t.Fatalf("Create of slow download %d declaring %d bytes: %v", i, m.Size, err)
		}
		defer w.Close()
		r, ok := s.Get(key)
		if !ok {
			t.Fatalf("no reader of slow download %d", i)
		}
		defer r.Close()
		slow = append(slow, w)
	}
	if st := s.Stats(); st.Evictions != evictions {
		t.Errorf("Create of downloads that sent nothing evicted %d objects: %+v", st.Evictions-evictions, st)
	}
	// They trickle, a byte each at a time; other objects keep being stored
	// and read meanwhile.
	stored := 0
	for round := range 20 {
		for i, w := range slow {
			if _, err := w.Write([]byte{'s'}); err != nil {
				t.Fatalf("round %d: slow download %d: %v", round, i, err)
			}
		}
		k := fmt.Sprintf("d%039x", round)
		body := strings.Repeat("d", 2000)
		if err := tryPut(s, k, body); err != nil {
			t.Errorf("round %d: storing another object while slow downloads run: %v", round, err)
			break
		}
		stored++
		if b, _, ok := get(t, s, k); !ok || b != body {
			t.Errorf("round %d: object stored meanwhile not readable", round)
		}
	}
	// Evicted: one object (two blocks) for every two blocks the slow
	// downloads wrote (eight blocks, one each) and one for every object
	// stored since. Far from everything.
	st := s.Stats()
	if got, limit := st.Evictions-evictions, int64(8+stored); got > limit {
		t.Errorf("%d objects evicted, want at most %d (%d stored meanwhile): %+v", got, limit, stored, st)
	}
	kept := 0
	for _, k := range full {
		if b, _, ok := get(t, s, k); ok {
			if b != strings.Repeat("c", 2000) {
				t.Fatalf("%s: wrong body", k)
			}
			kept++
		}
	}
	if kept < len(full)-8-stored {
		t.Errorf("%d of %d complete objects left after the slow downloads (%d others stored)", kept, len(full), stored)
	}
	t.Logf("%d complete objects before, %d kept, %d stored meanwhile; %+v", len(full), kept, stored, st)
}

// TestWritesInProgressCannotEmptyCache: many downloads at once, writing as
// fast as they can up to the largest object allowed, take no more than
// the default quarter of the cache; the complete objects keep the rest,
// and once the downloads are gone objects store again.
func TestWritesInProgressCannotEmptyCache(t *testing.T) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	fillCache(t, s, 2000)
	const n = 16
	var ws []*Writer
	for i := range n {
		w, err := s.Create(fmt.Sprintf("77%038x", i), testMeta(""))
		if err != nil {
			t.Fatalf("Create %d: %v", i, err)
		}
		defer w.Close()
		ws = append(ws, w)
	}
	chunk := make([]byte, 4096)
	live := n
	full := 0
	lowest := s.Stats().Bytes
	for live > 0 {
		for i, w := range ws {
			if w == nil {
				continue
			}
			if _, err := w.Write(chunk); err != nil {
				if !errors.Is(err, ErrFull) && !errors.Is(err, ErrTooLarge) {
					t.Fatalf("writer %d: %v", i, err)
				}
				if errors.Is(err, ErrFull) {
					full++
				}
				ws[i] = nil
				live--
			}
			st := s.Stats()
			lowest = min(lowest, st.Bytes)
			if st.Bytes+st.WritingBytes > o.MaxBytes {
				t.Fatalf("over MaxBytes: %+v", st)
			}
		}
	}
	// At most a quarter held by writes in progress, and eviction frees
	// one object (of two blocks) at a time.
	if floor := o.MaxBytes - o.MaxBytes/4 - 8<<10; lowest < floor {
		t.Errorf("writes in progress left %d bytes of complete objects, want at least %d", lowest, floor)
	}
	if full == 0 {
		t.Errorf("no write failed with ErrFull")
	}
	if st := s.Stats(); st.Writing != 0 || st.WritingBytes != 0 {
		t.Fatalf("failed writes still in progress: %+v", st)
	}
	put(t, s, "7f7f7f7f", "after")
	t.Logf("complete objects never below %d bytes; %d writes failed with ErrFull; %+v", lowest, full, s.Stats())
}

// TestDefaultObjectAndEntryBounds: with only MaxBytes set, one object may
// take an eighth of the cache, declared or not, and the index holds at
// most MaxBytes / 8 KiB objects.
func TestDefaultObjectAndEntryBounds(t *testing.T) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	limit := o.MaxBytes / 8
	m := testMeta("")
	m.Size = limit + 1
	if w, err := s.Create("0b0b0b0b", m); !errors.Is(err, ErrTooLarge) {
		t.Errorf("Create declaring %d bytes: %v", m.Size, err)
		if w != nil {
			w.Close()
		}
	}
	w, err := s.Create("0b0b0b0b", testMeta(""))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, limit+1)); !errors.Is(err, ErrTooLarge) {
		t.Errorf("writing %d bytes without a declared size: %v", limit+1, err)
	}
	w.Close()
	put(t, s, "0c0c0c0c", strings.Repeat("x", int(limit))) // the limit itself is fine

	if st := s.Stats(); st.MaxEntries != int(o.MaxBytes/(4<<10)) {
		t.Errorf("MaxEntries %d, want %d", st.MaxEntries, o.MaxBytes/(4<<10))
	}
	for i := range 300 {
		put(t, s, fmt.Sprintf("e%039x", i), "")
	}
	if st := s.Stats(); st.Entries > int(o.MaxBytes/(4<<10)) {
		t.Errorf("%d objects in a %d-byte cache: %+v", st.Entries, o.MaxBytes, st)
	}
}

// TestBlockAccounting: every file is charged whole blocks, at least one,
// also after a reopen. The block is whatever one small object costs (its
// one file): 4 KiB on the usual file systems.
func TestBlockAccounting(t *testing.T) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	put(t, s, "00000001", "x")
	st := s.Stats()
	b := st.Bytes
	if b < 4096 {
		t.Fatalf("a 1-byte object charged %d bytes, want a block of at least 4096", st.Bytes)
	}
	put(t, s, "00000002", "")                                   // an empty body is a file too
	put(t, s, "00000003", strings.Repeat("y", int(b)+1))        // two blocks, body and metadata in one file
	put(t, s, "00000004", strings.Repeat("z", InlineMaxSize+1)) // a body file and a metadata file
	want := 4*b + s.blocks(InlineMaxSize+1) + b
	if st := s.Stats(); st.Bytes != want || st.Bytes != diskBytes(t, o.Dir) {
		t.Fatalf("charged %d bytes, want %d", st.Bytes, want)
	}
	s.Close()
	s = openStore(t, o)
	if st := s.Stats(); st.Entries != 4 || st.Bytes != want {
		t.Fatalf("after reopen: %+v, want %d bytes", st, want)
	}
}
