package diskcache

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestIndexTable adds and removes names at random, checking the table
// against a map after every step: probe runs survive removals
// (backward-shift deletion), slots are reused, the table grows.
func TestIndexTable(t *testing.T) {
	x := newIndex()
	want := map[objName]int32{}
	rng := rand.New(rand.NewPCG(1, 2))
	names := make([]objName, 5000)
	for i := range names {
		names[i] = nameOf(fmt.Sprintf("key %d", i))
		if i%2 == 0 {
			names[i] = nameOf(fmt.Sprintf("%040x", i))
		}
	}
	for step := range 40000 {
		n := names[rng.IntN(len(names))]
		if e := x.lookup(n); e != nil {
			if _, ok := want[n]; !ok || e.objName() != n || !e.live {
				t.Fatalf("step %d: lookup found %+v, map has %v", step, e, ok)
			}
			if rng.IntN(3) > 0 {
				x.remove(e)
				delete(want, n)
			}
		} else {
			if _, ok := want[n]; ok {
				t.Fatalf("step %d: lost %v", step, n)
			}
			e := x.add(n)
			e.gen = uint64(step)
			want[n] = e.slot
		}
		if x.n != len(want) {
			t.Fatalf("step %d: %d entries, want %d", step, x.n, len(want))
		}
	}
	for n, slot := range want {
		if e := x.lookup(n); e == nil || e.slot != slot {
			t.Fatalf("%v: %+v, want slot %d", n, e, slot)
		}
	}
	live := 0
	x.each(func(*entry) bool { live++; return true })
	if live != len(want) || x.slots() > 2*entryChunk {
		t.Fatalf("%d live, %d slots for %d names", live, x.slots(), len(want))
	}
}

// TestInlineDamage damages the one file of small objects every way we can
// think of: Open takes an inline file on its name, so Get must notice the
// damage, miss, count it and remove the file.
func TestInlineDamage(t *testing.T) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	keys := []string{"intact01", "truncated", "extended", "flipmeta", "flipgen", "swapped1", "swapped2", "renamed1"}
	for _, k := range keys {
		put(t, s, k, "body of "+k)
	}
	s.Close()
	pathOf := func(key string) string {
		m, _ := filepath.Glob(filepath.Join(o.Dir, objectsDir, shardOf(nameOf(key)), fileName(key)+"-*"+objSuffix))
		if len(m) != 1 {
			t.Fatalf("%s: %v", key, m)
		}
		return m[0]
	}
	edit := func(key string, f func([]byte) []byte) {
		p := pathOf(key)
		b, _ := os.ReadFile(p)
		if err := os.WriteFile(p, f(b), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	edit("truncated", func(b []byte) []byte { return b[:len(b)-1] })
	edit("extended", func(b []byte) []byte { return append(b, 0) })
	edit("flipmeta", func(b []byte) []byte { b[len(b)-3] ^= 0x40; return b })
	// A valid file of another key under this key's name, of the same size.
	b1, _ := os.ReadFile(pathOf("swapped1"))
	b2, _ := os.ReadFile(pathOf("swapped2"))
	os.WriteFile(pathOf("swapped1"), b2, 0o600)
	os.WriteFile(pathOf("swapped2"), b1, 0o600)
	// Its name says another size.
	p := pathOf("renamed1")
	f, _ := parseObjectFile(filepath.Base(p))
	os.Rename(p, filepath.Join(filepath.Dir(p), inlineBase(f.name, f.gen, f.size+1, f.metaLen-1)+objSuffix))
	// Another generation in the name than in the metadata.
	p = pathOf("flipgen")
	f, _ = parseObjectFile(filepath.Base(p))
	os.Rename(p, filepath.Join(filepath.Dir(p), inlineBase(f.name, f.gen+1, f.size, f.metaLen)+objSuffix))

	s = openStore(t, o)
	if b, _, ok := get(t, s, "intact01"); !ok || b != "body of intact01" {
		t.Fatalf("intact object: %q %v", b, ok)
	}
	for _, k := range keys[1:] {
		if r, ok := s.Get(k); ok {
			b := new(bytes.Buffer)
			r.WriteTo(b)
			r.Close()
			t.Errorf("damaged object %q served: %q", k, b)
		}
		if _, ok := s.Peek(k); ok {
			t.Errorf("damaged object %q peeked", k)
		}
	}
	if got := objectFiles(t, o.Dir); len(got) != 1 {
		t.Errorf("files left: %v", got)
	}
	if st := s.Stats(); st.Entries != 1 || st.Corrupt != int64(len(keys)-1) || st.Bytes != diskBytes(t, o.Dir) {
		t.Errorf("stats %+v", st)
	}
}

// TestMigrateFormat1 opens a cache written by format 1 (a body and a
// metadata file per object, keys of any hex length as names, an lru
// file): objects whose names format 2 knows stay and are served, the
// others are removed, and new versions of small objects take one file.
func TestMigrateFormat1(t *testing.T) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	pad := strings.Repeat(".", InlineMaxSize) // two files, as format 1 wrote every object
	put(t, s, key1, "kept"+pad)
	put(t, s, "not hex", "kept too"+pad)
	s.Close()
	os.WriteFile(filepath.Join(o.Dir, formatFile), []byte(formatContent1), 0o600)
	os.WriteFile(filepath.Join(o.Dir, lruFile), []byte("coral-diskcache-lru 1\n"+key1+"\n"), 0o600)
	os.Remove(filepath.Join(o.Dir, checkpointFile))
	// Format 1 named an 8-hex-digit key by itself.
	shard := filepath.Join(o.Dir, objectsDir, "ab")
	os.WriteFile(filepath.Join(shard, "abcdef01-0000000000000001.body"), []byte("x"), 0o600)
	os.WriteFile(filepath.Join(shard, "abcdef01-0000000000000001.meta"), []byte("CDCM"), 0o600)

	s = openStore(t, o)
	getChecked(t, s, key1, "kept"+pad)
	getChecked(t, s, "not hex", "kept too"+pad)
	if b, _ := os.ReadFile(filepath.Join(o.Dir, formatFile)); string(b) != formatContent {
		t.Errorf("FORMAT says %q", b)
	}
	for _, f := range files(t, o.Dir) {
		if strings.Contains(f, "/abcdef01-") || f == lruFile {
			t.Errorf("%s kept", f)
		}
	}
	put(t, s, key1, "small now")
	if got := objectFiles(t, o.Dir); len(got) != 3 || !slices.ContainsFunc(got, func(f string) bool { return strings.HasSuffix(f, objSuffix) }) {
		t.Errorf("files %v", got)
	}
	if st := s.Stats(); st.Entries != 2 || st.Bytes != diskBytes(t, o.Dir) {
		t.Errorf("stats %+v", st)
	}
}

// TestCheckpointOrder: the LRU order and last-use times survive a Close
// and Open; a damaged checkpoint costs the order, never an object.
func TestCheckpointOrder(t *testing.T) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	keys := []string{key1, "b", "c", "d"}
	for _, k := range keys {
		put(t, s, k, "body "+k)
	}
	get(t, s, "c")
	get(t, s, key1)
	want := s.Recent(10)
	s.Close()
	s = openStore(t, o)
	got := s.Recent(10)
	if len(got) != len(want) {
		t.Fatalf("after reopen %v, before %v", got, want)
	}
	for i := range got {
		if got[i].Key != want[i].Key || !got[i].LastUsed.Equal(want[i].LastUsed) {
			t.Errorf("%d: %+v, before %+v", i, got[i], want[i])
		}
	}
	if _, err := os.Stat(filepath.Join(o.Dir, checkpointFile)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("checkpoint not removed by Open: %v", err)
	}
	s.Close()
	p := filepath.Join(o.Dir, checkpointFile)
	b, _ := os.ReadFile(p)
	b[checkpointHeader+5] ^= 1
	os.WriteFile(p, b, 0o600)
	s = openStore(t, o)
	if st := s.Stats(); st.Entries != len(keys) {
		t.Errorf("damaged checkpoint: %+v", st)
	}
	for _, k := range keys {
		getChecked(t, s, k, "body "+k)
	}
}

// TestInlinePath: the one-allocation path is the joined one.
func TestInlinePath(t *testing.T) {
	s := openStore(t, testOptions(t, 1<<20))
	for _, key := range []string{key1, "Not Hex/../x"} {
		n := nameOf(key)
		for _, sz := range [][2]int64{{0, metaHeaderLen}, {1024, 300}, {InlineMaxSize, MaxMetaSize}} {
			want := filepath.Join(s.shardDir(n), inlineBase(n, 0xabc, sz[0], int32(sz[1]))+objSuffix)
			if got := s.inlinePath(n, 0xabc, sz[0], int32(sz[1])); got != want {
				t.Errorf("inlinePath = %q, want %q", got, want)
			}
		}
	}
}
