package diskcache

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
)

// removeBodyFiles deletes every body file of key behind the store's back.
func removeBodyFiles(t *testing.T, dir, key string) {
	t.Helper()
	removed := 0
	for _, f := range objectFiles(t, dir) {
		if strings.Contains(f, fileName(key)) && (strings.HasSuffix(f, bodySuffix) || strings.HasSuffix(f, objSuffix)) {
			if err := os.Remove(filepath.Join(dir, f)); err != nil {
				t.Fatal(err)
			}
			removed++
		}
	}
	if removed == 0 {
		t.Fatalf("no body file of %s", key)
	}
}

// TestHotBodyFromMemory: the third Get of a small object (the first two
// read its metadata file) reads its body into memory, and from then on Gets
// open no file: with the body file gone, they still serve the right bytes,
// through Read, ReadAt, Seek, WriteTo (one Write) and Content, and they
// take no hold on the version.
func TestHotBodyFromMemory(t *testing.T) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	body := strings.Repeat("0123456789", 100)
	put(t, s, key1, body)
	for i := range 3 {
		getChecked(t, s, key1, body)
		if st := s.Stats(); (st.HotBodies == 1) != (i == 2) {
			t.Fatalf("after Get %d: %d bodies in memory", i+1, st.HotBodies)
		}
	}
	if st := s.Stats(); st.HotBodyBytes < int64(len(body)) || st.HotBodyBytes > 2*int64(len(body)) {
		t.Fatalf("HotBodyBytes %d for a body of %d", st.HotBodyBytes, len(body))
	}
	removeBodyFiles(t, o.Dir, key1)

	r, ok := s.Get(key1)
	if !ok {
		t.Fatal("miss")
	}
	if st := s.Stats(); st.Readers != 1 {
		t.Fatalf("%d readers", st.Readers)
	}
	s.mu.Lock()
	held, readers := s.held, s.idx.lookup(nameOf(key1)).readers
	s.mu.Unlock()
	if held != 0 || readers != 0 {
		t.Fatalf("a Reader of memory holds the version: held %d, readers %d", held, readers)
	}
	p := make([]byte, 10)
	if n, err := r.ReadAt(p, 995); n != 5 || err != io.EOF || string(p[:n]) != "56789" {
		t.Fatalf("ReadAt at the end: %d, %v, %q", n, err, p[:n])
	}
	if n, err := r.Read(p); n != 10 || err != nil || string(p) != body[:10] {
		t.Fatalf("Read: %d, %v, %q", n, err, p)
	}
	var w writeCounter
	if n, err := r.WriteTo(&w); err != nil || n != int64(len(body)-10) || w.b.String() != body[10:] || w.writes != 1 {
		t.Fatalf("WriteTo: %d, %v, %d writes", n, err, w.writes)
	}
	if _, err := r.Seek(-4, io.SeekEnd); err != nil {
		t.Fatal(err)
	}
	if rest, err := io.ReadAll(r); err != nil || string(rest) != "6789" {
		t.Fatalf("after Seek: %q, %v", rest, err)
	}
	c := r.Content()
	if all, err := io.ReadAll(c); err != nil || string(all) != body {
		t.Fatalf("Content: %d bytes, %v", len(all), err)
	}
	r.Close()
	r.Close()
	if st := s.Stats(); st.Readers != 0 || st.MetaReads != 2 || st.Hits != 4 {
		t.Fatalf("after the hits: %+v", st)
	}
}

// TestHotBodyFollowsChanges: a body in memory never outlives its version:
// a new version, a deletion or an eviction drops it, and an UpdateMeta
// keeps it with the new metadata.
func TestHotBodyFollowsChanges(t *testing.T) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	warm := func(key, body string) {
		t.Helper()
		for range 3 {
			getChecked(t, s, key, body)
		}
	}
	put(t, s, key1, "old body")
	warm(key1, "old body")
	put(t, s, key1, "new body")
	if st := s.Stats(); st.HotBodies != 0 || st.HotBodyBytes != 0 {
		t.Fatalf("replaced version's body kept: %+v", st)
	}
	getChecked(t, s, key1, "new body")
	warm(key1, "new body")
	if st := s.Stats(); st.HotBodies != 1 {
		t.Fatalf("new version's body not in memory: %+v", st)
	}

	m := testMeta("new body")
	m.Header.Set("X-Updated", "1")
	if err := s.UpdateMeta(key1, m); err != nil {
		t.Fatal(err)
	}
	removeBodyFiles(t, o.Dir, key1) // so only memory can serve it
	if got := getChecked(t, s, key1, "new body"); got.Header.Get("X-Updated") != "1" {
		t.Fatalf("after UpdateMeta: %v", got.Header)
	}
	if err := s.Delete(key1); err != nil {
		t.Fatal(err)
	}
	if _, ok := s.Get(key1); ok {
		t.Fatal("deleted object served from memory")
	}
	if st := s.Stats(); st.HotBodies != 0 || st.HotBodyBytes != 0 {
		t.Fatalf("deleted object's body kept: %+v", st)
	}

	// Eviction for disk room takes the body with the version.
	o2 := testOptions(t, 0)
	o2.MaxBytes = 3 * blockSize(o2.Dir) // three objects of one block, not four
	s2 := openStore(t, o2)
	body := strings.Repeat("x", 1000)
	put(t, s2, "0000aaaa", body)
	for range 3 {
		getChecked(t, s2, "0000aaaa", body)
	}
	for i := range 3 {
		put(t, s2, fmt.Sprintf("%08x", i), body)
	}
	if st := s2.Stats(); st.HotBodies != 0 || st.HotBodyBytes != 0 {
		t.Fatalf("evicted object's body kept: %+v", st)
	}
}

// TestHotBodyBudget: bodies in memory stay within HotBodyBytes however
// many small objects are read again and again; objects larger than
// HotBodyMaxSize (or than an eighth of the budget) never enter; and with
// HotBodyBytes negative none do.
func TestHotBodyBudget(t *testing.T) {
	const budget = 64 << 10
	o := testOptions(t, 16<<20)
	o.HotBodyBytes = budget
	s := openStore(t, o)
	body := strings.Repeat("b", 4000) // 4 KiB allocations: 16 fit
	for i := range 64 {
		key := fmt.Sprintf("%040x", i)
		put(t, s, key, body)
		for range 4 {
			getChecked(t, s, key, body)
		}
		if st := s.Stats(); st.HotBodyBytes > budget {
			t.Fatalf("after %d objects: %d bytes of bodies, budget %d", i+1, st.HotBodyBytes, budget)
		}
	}
	if st := s.Stats(); st.HotBodies < 8 || st.HotBodies > 16 {
		t.Fatalf("%d bodies in memory, want 8..16 of 4 KiB in 64 KiB", st.HotBodies)
	}

	big := strings.Repeat("B", budget/8+1)
	put(t, s, hotKey2, big)
	for range 4 {
		getChecked(t, s, hotKey2, big)
	}
	s.mu.Lock()
	e := s.idx.lookup(nameOf(hotKey2))
	inMemory := e.hot > 0 && s.hot[e.hot-1].body != nil
	s.mu.Unlock()
	if inMemory {
		t.Fatal("a body over an eighth of the budget was kept in memory")
	}

	o3 := testOptions(t, 1<<20)
	o3.HotBodyBytes = -1
	s3 := openStore(t, o3)
	put(t, s3, key1, "body")
	for range 5 {
		getChecked(t, s3, key1, "body")
	}
	if st := s3.Stats(); st.HotBodies != 0 || st.HotEntries != 1 {
		t.Fatalf("HotBodyBytes -1: %+v", st)
	}
}

// TestHotBodyConcurrent: readers of a body in memory, alongside writers
// replacing the object, always read one whole version (run with -race: the
// shared body is never written).
func TestHotBodyConcurrent(t *testing.T) {
	s := openStore(t, testOptions(t, 4<<20))
	bodies := []string{strings.Repeat("a", 3000), strings.Repeat("b", 5000)}
	put(t, s, key1, bodies[0])
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := range 200 {
				if g == 0 && i%20 == 0 {
					if err := tryPut(s, key1, bodies[(i/20)%2]); err != nil {
						t.Error(err)
						return
					}
					continue
				}
				r, ok := s.Get(key1)
				if !ok {
					continue // between a replacement's unlink and its commit
				}
				var b bytes.Buffer
				_, err := r.WriteTo(&b)
				m := r.Meta()
				r.Close()
				if err != nil {
					t.Error(err)
					return
				}
				if b.String() != bodies[0] && b.String() != bodies[1] || m.Extra["sha256"] != testMeta(b.String()).Extra["sha256"] {
					t.Errorf("read %d bytes not matching their metadata", b.Len())
					return
				}
			}
		})
	}
	wg.Wait()
	if st := s.Stats(); st.Readers != 0 {
		t.Fatalf("%d readers left open", st.Readers)
	}
}
