package diskcache

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"
)

const hotKey2 = "00000000000000000000000000000000000000b2"

// objectFileOf returns the path of key's (only) inline file.
func objectFileOf(t *testing.T, dir, key string) string {
	t.Helper()
	var found []string
	for _, f := range objectFiles(t, dir) {
		if strings.Contains(f, fileName(key)) && strings.HasSuffix(f, objSuffix) {
			found = append(found, filepath.Join(dir, f))
		}
	}
	if len(found) != 1 {
		t.Fatalf("metadata files of %q: %v", key, found)
	}
	return found[0]
}

// getChecked reads key, checks that it is body and that its metadata
// belongs to it, and returns the metadata.
func getChecked(t *testing.T, s *Store, key, body string) Meta {
	t.Helper()
	b, m, ok := get(t, s, key)
	if !ok || b != body {
		t.Fatalf("Get %q: %q, %v; want %q", key, b, ok, body)
	}
	return m
}

// TestHotSkipsMetaFile: the first Get of an object reads its metadata
// file and remembers that; the second caches the decoded metadata; from
// then on Gets (and Peek) take it from memory. They read no metadata file,
// so damage to that file goes unnoticed while the store runs. The file is
// still the commit record: a restart finds the damage and drops the object.
func TestHotSkipsMetaFile(t *testing.T) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	put(t, s, key1, "body")
	first := getChecked(t, s, key1, "body")
	if st := s.Stats(); st.MetaReads != 1 || st.HotEntries != 0 {
		t.Fatalf("after the first Get: %+v", st)
	}
	if m := getChecked(t, s, key1, "body"); !reflect.DeepEqual(m, first) {
		t.Fatalf("second Get's metadata %+v, first Get's %+v", m, first)
	}
	if st := s.Stats(); st.MetaReads != 2 || st.HotEntries != 1 || st.HotBytes <= 0 {
		t.Fatalf("after the second Get: %+v", st)
	}
	// Damage the metadata at the end of the object's one file.
	f := objectFileOf(t, o.Dir, key1)
	b, _ := os.ReadFile(f)
	b[len(b)-1] ^= 1
	if err := os.WriteFile(f, b, 0o600); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		if m := getChecked(t, s, key1, "body"); !reflect.DeepEqual(m, first) {
			t.Fatalf("hit's metadata %+v, first Get's %+v", m, first)
		}
	}
	if m, ok := s.Peek(key1); !ok || !reflect.DeepEqual(m, first) {
		t.Fatalf("Peek: %+v, %v", m, ok)
	}
	if st := s.Stats(); st.MetaReads != 2 || st.Corrupt != 0 || st.Hits != 5 {
		t.Fatalf("after the hits: %+v", st)
	}
	s.Close()
	s = openStore(t, o)
	if _, ok := s.Get(key1); ok {
		t.Fatal("served after a restart with damaged metadata")
	}
	if st := s.Stats(); st.Corrupt != 1 || st.Entries != 0 {
		t.Fatalf("after reopening: %+v", st)
	}
}

// TestHotDisabled: with HotMetaBytes negative every Get reads the file.
func TestHotDisabled(t *testing.T) {
	o := testOptions(t, 1<<20)
	o.HotMetaBytes = -1
	s := openStore(t, o)
	put(t, s, key1, "body")
	for range 3 {
		getChecked(t, s, key1, "body")
	}
	if st := s.Stats(); st.MetaReads != 3 || st.HotEntries != 0 || st.HotBytes != 0 {
		t.Fatalf("%+v", st)
	}
}

// TestHotFollowsChanges: the cached metadata is replaced by UpdateMeta and
// dropped when its version goes (replaced, deleted, evicted, found gone).
func TestHotFollowsChanges(t *testing.T) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	put(t, s, key1, "body")
	getChecked(t, s, key1, "body")
	m := getChecked(t, s, key1, "body").Clone()
	reads := s.Stats().MetaReads

	// UpdateMeta: the next Get has the new metadata, from memory.
	m.Expires = time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
	m.Header.Set("Age", "7")
	if err := s.UpdateMeta(key1, m); err != nil {
		t.Fatal(err)
	}
	got := getChecked(t, s, key1, "body")
	if !got.Expires.Equal(m.Expires) || got.Header.Get("Age") != "7" {
		t.Fatalf("after UpdateMeta: %+v", got)
	}
	if st := s.Stats(); st.MetaReads != reads || st.HotEntries != 1 {
		t.Fatalf("after UpdateMeta: %+v", st)
	}
	// The caller's Meta is not the cached one.
	m.Header.Set("Age", "8")
	if got := getChecked(t, s, key1, "body"); got.Header.Get("Age") != "7" {
		t.Fatalf("the caller's change reached the cache: %+v", got)
	}

	// A new version: its own metadata, read from its file twice (the
	// first read of a version only marks it).
	put(t, s, key1, "new body")
	if st := s.Stats(); st.HotEntries != 0 || st.HotBytes != 0 {
		t.Fatalf("replaced version still cached: %+v", st)
	}
	for range 3 {
		getChecked(t, s, key1, "new body")
	}
	if st := s.Stats(); st.MetaReads != reads+2 || st.HotEntries != 1 {
		t.Fatalf("after replacing: %+v", st)
	}

	// Delete.
	if err := s.Delete(key1); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.HotEntries != 0 || st.HotBytes != 0 {
		t.Fatalf("deleted object still cached: %+v", st)
	}
	if _, ok := s.Get(key1); ok {
		t.Fatal("deleted object served")
	}

	// A body removed behind the store's back: a miss, and forgotten.
	put(t, s, key1, "body")
	getChecked(t, s, key1, "body")
	getChecked(t, s, key1, "body")
	for _, f := range objectFiles(t, o.Dir) {
		os.Remove(filepath.Join(o.Dir, f))
	}
	if _, ok := s.Get(key1); ok {
		t.Fatal("served without its body")
	}
	if st := s.Stats(); st.HotEntries != 0 || st.Entries != 0 {
		t.Fatalf("after losing the files: %+v", st)
	}

	// Eviction.
	o2 := testOptions(t, 0)
	o2.MaxBytes = 3 * blockSize(o2.Dir) // three objects of one block, not four
	s2 := openStore(t, o2)
	body := strings.Repeat("x", 1000)
	put(t, s2, "0000aaaa", body)
	getChecked(t, s2, "0000aaaa", body)
	getChecked(t, s2, "0000aaaa", body)
	if st := s2.Stats(); st.HotEntries != 1 {
		t.Fatalf("not cached: %+v", st)
	}
	for i := range 3 {
		put(t, s2, fmt.Sprintf("%08x", i), body)
	}
	if _, ok := s2.Peek("0000aaaa"); ok {
		t.Fatal("not evicted")
	}
	if st := s2.Stats(); st.HotEntries != 0 || st.HotBytes != 0 {
		t.Fatalf("evicted object still cached: %+v", st)
	}
}

// TestHotRaces: a Get that read a metadata file just before the version
// was replaced, or its metadata updated, does not cache what it read.
func TestHotRaces(t *testing.T) {
	s := openStore(t, testOptions(t, 1<<20))
	put(t, s, key1, "old body")
	getChecked(t, s, key1, "old body") // the next read would cache
	s.readHook = func() {
		s.readHook = nil
		put(t, s, key1, "new body")
	}
	getChecked(t, s, key1, "old body") // the version it opened, whole
	getChecked(t, s, key1, "new body")
	getChecked(t, s, key1, "new body")

	put(t, s, hotKey2, "body")
	getChecked(t, s, hotKey2, "body")
	m := testMeta("body")
	m.Expires = time.Date(2041, 1, 1, 0, 0, 0, 0, time.UTC)
	s.readHook = func() {
		s.readHook = nil
		if err := s.UpdateMeta(hotKey2, m); err != nil {
			t.Error(err)
		}
	}
	if got := getChecked(t, s, hotKey2, "body"); got.Expires.Equal(m.Expires) {
		t.Fatal("the racing Get read the new metadata")
	}
	for range 2 {
		if got := getChecked(t, s, hotKey2, "body"); !got.Expires.Equal(m.Expires) {
			t.Fatalf("after the update: Expires %v", got.Expires)
		}
	}
}

// TestHotBudget: objects read once never enter the hot set; it stays
// within HotMetaBytes; and an object read again and again stays in it while
// objects read twice pass through.
func TestHotBudget(t *testing.T) {
	o := testOptions(t, 1<<20)
	o.HotMetaBytes = 10 * metaCost(testMeta("body"))
	s := openStore(t, o)
	for i := range 20 {
		k := fmt.Sprintf("1%07x", i)
		put(t, s, k, "once")
		getChecked(t, s, k, "once")
	}
	if st := s.Stats(); st.HotEntries != 0 || st.MetaReads != 20 {
		t.Fatalf("objects read once: %+v", st)
	}
	put(t, s, "0000aaaa", "popular")
	getChecked(t, s, "0000aaaa", "popular")
	getChecked(t, s, "0000aaaa", "popular")
	const others = 50
	for i := range others {
		k := fmt.Sprintf("%08x", i)
		put(t, s, k, "body "+strconv.Itoa(i))
		getChecked(t, s, k, "body "+strconv.Itoa(i))
		getChecked(t, s, k, "body "+strconv.Itoa(i))
		getChecked(t, s, "0000aaaa", "popular")
		if st := s.Stats(); st.HotBytes > o.HotMetaBytes || st.HotEntries < 2 {
			t.Fatalf("after %d objects: %+v (budget %d)", i+1, st, o.HotMetaBytes)
		}
	}
	st := s.Stats()
	if want := int64(20 + 2 + 2*others); st.MetaReads != want {
		t.Fatalf("%d metadata reads, want %d: the popular object left the hot set", st.MetaReads, want)
	}
	if st.HotEntries > 10 || len(s.hot) > 11 {
		t.Fatalf("%d entries in the hot set, %d slots", st.HotEntries, len(s.hot))
	}
	// Metadata larger than an eighth of the budget is never kept.
	m := testMeta("big")
	m.Header.Set("X-Big", strings.Repeat("b", int(o.HotMetaBytes)))
	w, err := s.Create("0000bbbb", m)
	if err != nil {
		t.Fatal(err)
	}
	w.Write([]byte("big"))
	if err := w.Commit(w.Meta()); err != nil {
		t.Fatal(err)
	}
	getChecked(t, s, "0000bbbb", "big")
	getChecked(t, s, "0000bbbb", "big")
	if st2 := s.Stats(); st2.MetaReads != st.MetaReads+2 || st2.HotBytes > o.HotMetaBytes {
		t.Fatalf("large metadata: %+v", st2)
	}
}

// TestHotMemory: the hot set's estimate (Stats.HotBytes) is close to the
// heap its decoded metadata takes, for the metadata coral_proxy stores.
func TestHotMemory(t *testing.T) {
	const n = 5000
	s := openStore(t, testOptions(t, 1<<30))
	now := time.Now()
	for i := range n {
		key := fmt.Sprintf("%040x", i*2654435761)
		m := Meta{
			Status: http.StatusOK,
			Header: http.Header{
				"Content-Type":   {"application/octet-stream"},
				"Cache-Control":  {"public, max-age=86400"},
				"Last-Modified":  {"Fri, 02 Jan 2026 03:04:05 GMT"},
				"Content-Length": {"100"},
				"Date":           {now.UTC().Format(http.TimeFormat)},
			},
			Stored: now, Expires: now.Add(time.Hour), Size: 100,
			Extra: map[string]string{"source": "origin", "url": "http://127.0.0.1:8080/obj/" + strconv.Itoa(i)},
		}
		w, err := s.Create(key, m)
		if err != nil {
			t.Fatal(err)
		}
		w.Write(make([]byte, 100))
		if err := w.Commit(w.Meta()); err != nil {
			t.Fatal(err)
		}
	}
	keys := make([]string, 0, n)
	s.Range(func(in Info) bool { keys = append(keys, in.Key); return true })
	before, _ := heapStats()
	for range 2 { // the second read caches
		for _, k := range keys {
			r, ok := s.Get(k)
			if !ok {
				t.Fatal("miss")
			}
			r.Close()
		}
	}
	after, _ := heapStats()
	st := s.Stats()
	if st.HotEntries != n {
		t.Fatalf("%d hot entries, want %d", st.HotEntries, n)
	}
	measured := float64(int64(after)-int64(before)) / n
	estimated := float64(st.HotBytes) / n
	t.Logf("hot set: %.0f bytes per object measured, %.0f estimated", measured, estimated)
	if estimated < 0.7*measured || estimated > 1.5*measured {
		t.Fatalf("estimate %.0f bytes per object, measured %.0f", estimated, measured)
	}
	runtime.KeepAlive(s)
}

func TestVersionPath(t *testing.T) {
	s := openStore(t, testOptions(t, 1<<20))
	for _, key := range []string{key1, "0123456789abcdef0123456789abcdef01234567", "Not Hex/../x"} {
		for _, gen := range []uint64{1, 0xabc, 1<<64 - 1} {
			name := nameOf(key)
			for _, suffix := range []string{bodySuffix, metaSuffix} {
				want := filepath.Join(s.shardDir(name), versionBase(name, gen)+suffix)
				if got := s.versionPath(name, gen, suffix); got != want {
					t.Errorf("versionPath(%q, %x, %q) = %q, want %q", name, gen, suffix, got, want)
				}
			}
		}
	}
}

// TestWriteToSmall: the rest of a small complete object goes to dst in one
// Write, from wherever the offset is; a body shorter than its metadata
// says is an error, never a short success.
func TestWriteToSmall(t *testing.T) {
	o := testOptions(t, 1<<20)
	o.HotBodyBytes = -1 // the file's copy, not memory's (TestHotBodyFromMemory)
	s := openStore(t, o)
	body := strings.Repeat("0123456789", 100)
	put(t, s, key1, body)
	for _, off := range []int64{0, 1, 999, 1000} {
		r, _ := s.Get(key1)
		if _, err := r.Seek(off, io.SeekStart); err != nil {
			t.Fatal(err)
		}
		var w writeCounter
		n, err := r.WriteTo(&w)
		r.Close()
		if err != nil || n != int64(len(body))-off || w.b.String() != body[off:] || (n > 0 && w.writes != 1) {
			t.Fatalf("from %d: %d, %v, %d writes of %q", off, n, err, w.writes, w.b.String())
		}
	}
	// The last 16 KiB of a larger object: the same.
	big := strings.Repeat("x", 3*smallWrite)
	put(t, s, hotKey2, big)
	r, _ := s.Get(hotKey2)
	r.Seek(int64(len(big)-smallWrite), io.SeekStart)
	var w writeCounter
	if n, err := r.WriteTo(&w); err != nil || n != smallWrite || w.writes != 1 {
		t.Fatalf("tail: %d, %v, %d writes", n, err, w.writes)
	}
	r.Close()

	r, _ = s.Get(key1)
	defer r.Close()
	for _, f := range objectFiles(t, o.Dir) {
		if strings.Contains(f, fileName(key1)) && (strings.HasSuffix(f, bodySuffix) || strings.HasSuffix(f, objSuffix)) {
			os.Truncate(filepath.Join(o.Dir, f), 10)
		}
	}
	w = writeCounter{}
	if n, err := r.WriteTo(&w); !errors.Is(err, io.ErrUnexpectedEOF) || n != 0 || w.writes != 0 {
		t.Fatalf("truncated body: %d, %v, %d writes", n, err, w.writes)
	}
}

// writeCounter is an io.Writer without ReadFrom that counts Write calls.
type writeCounter struct {
	b      strings.Builder
	writes int
}

func (w *writeCounter) Write(p []byte) (int, error) {
	w.writes++
	return w.b.Write(p)
}

// TestWriteToKeepsFileVisible: WriteTo of a complete object larger than
// the small-copy limit hands dst's ReadFrom something that, under one
// more LimitedReader (Caddy's write-timeout writer adds one per chunk),
// is still the file (a syscall.Conn), which is what net's sendfile looks
// for; and copies exactly the rest of the object.
func TestWriteToKeepsFileVisible(t *testing.T) {
	s := openStore(t, testOptions(t, 1<<20))
	body := strings.Repeat("abcdefgh", 8<<10) // 64 KiB
	put(t, s, key1, body)
	for _, off := range []int64{0, 100, int64(len(body)) - smallWrite - 1} {
		r, _ := s.Get(key1)
		r.Seek(off, io.SeekStart)
		var dst chunkingWriter
		n, err := r.WriteTo(&dst)
		r.Close()
		if err != nil || n != int64(len(body))-off || dst.b.String() != body[off:] {
			t.Fatalf("from %d: %d, %v, %d bytes match", off, n, err, dst.b.Len())
		}
		if !dst.sawFile {
			t.Fatalf("from %d: ReadFrom got no file under its LimitedReader", off)
		}
	}
}

// chunkingWriter copies in chunks as caddyhttp.IdleTimeoutWriter does, and
// notes whether a chunk's source is a file underneath.
type chunkingWriter struct {
	b       strings.Builder
	sawFile bool
}

func (w *chunkingWriter) Write(p []byte) (int, error) { return w.b.Write(p) }

func (w *chunkingWriter) ReadFrom(r io.Reader) (int64, error) {
	var total int64
	for {
		lr := io.LimitReader(r, 16<<10).(*io.LimitedReader)
		if _, ok := lr.R.(syscall.Conn); ok {
			w.sawFile = true
		}
		n, err := io.Copy(struct{ io.Writer }{&w.b}, lr)
		total += n
		if err != nil || n < 16<<10 {
			return total, err
		}
	}
}
