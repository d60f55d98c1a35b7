package diskcache

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

const key1 = "0123456789abcdef0123456789abcdef01234567"

func TestPutGet(t *testing.T) {
	o := testOptions(t, 1<<20)
	o.NoSync = false // the real path once
	s := openStore(t, o)
	if _, ok := s.Get(key1); ok {
		t.Fatal("hit in an empty store")
	}
	w, err := s.Create(key1, testMeta("hello, world"))
	if err != nil {
		t.Fatal(err)
	}
	if m := w.Meta(); m.Key != key1 || m.Stored.IsZero() || m.Size != -1 {
		t.Fatalf("writer meta %+v", m)
	}
	io.WriteString(w, "hello, ")
	io.WriteString(w, "world")
	final := w.Meta()
	final.Header.Set("X-Trailer", "yes")
	if err := w.Commit(final); err != nil {
		t.Fatal(err)
	}
	mustErr(t, w.Commit(final), ErrCommitted)
	if _, err := w.Write([]byte("x")); !errors.Is(err, ErrCommitted) {
		t.Fatalf("Write after Commit: %v", err)
	}
	w.Abort(errors.New("too late")) // no effect

	r, ok := s.Get(key1)
	if !ok {
		t.Fatal("miss after commit")
	}
	defer r.Close()
	m := r.Meta()
	want := testMeta("hello, world")
	if m.Key != key1 || m.Status != 200 || m.Size != 12 || !m.Expires.Equal(want.Expires) ||
		m.Header.Get("X-Trailer") != "yes" || m.Header.Get("Etag") != want.Header.Get("Etag") ||
		m.Extra["sha256"] != want.Extra["sha256"] || m.Stored.IsZero() {
		t.Fatalf("meta %+v", m)
	}
	if !r.Complete() || r.Size() != 12 || r.Content() == nil {
		t.Fatalf("Complete %v Size %d File %v", r.Complete(), r.Size(), r.Content())
	}
	b, err := io.ReadAll(r)
	if err != nil || string(b) != "hello, world" {
		t.Fatalf("read %q, %v", b, err)
	}
	st := s.Stats()
	if st.Entries != 1 || st.Hits != 1 || st.Misses != 1 || st.Commits != 1 || st.Readers != 1 ||
		st.Bytes <= 12 || st.Bytes != diskBytes(t, o.Dir) {
		t.Fatalf("stats %+v, disk %d", st, diskBytes(t, o.Dir))
	}
	r.Close()
	r.Close()
	if st := s.Stats(); st.Readers != 0 {
		t.Fatalf("readers %d after Close", st.Readers)
	}
	got := objectFiles(t, o.Dir)
	if len(got) != 1 || !strings.HasPrefix(got[0], "objects/01/"+key1+"-") || !strings.HasSuffix(got[0], objSuffix) {
		t.Fatalf("files %v", got)
	}
}

func TestReaderSeekReadAtServeContent(t *testing.T) {
	s := openStore(t, testOptions(t, 1<<20))
	body := strings.Repeat("0123456789", 1000)
	put(t, s, key1, body)
	r, _ := s.Get(key1)
	defer r.Close()
	buf := make([]byte, 10)
	if n, err := r.ReadAt(buf, 9995); n != 5 || err != io.EOF || string(buf[:5]) != "56789" {
		t.Fatalf("ReadAt at the end: %d %v %q", n, err, buf[:n])
	}
	if n, err := r.ReadAt(buf, 20000); n != 0 || err != io.EOF {
		t.Fatalf("ReadAt past the end: %d %v", n, err)
	}
	if _, err := r.ReadAt(buf, -1); err == nil {
		t.Fatal("ReadAt at -1 succeeded")
	}
	if pos, err := r.Seek(-3, io.SeekEnd); pos != 9997 || err != nil {
		t.Fatalf("Seek: %d %v", pos, err)
	}
	if b, _ := io.ReadAll(r); string(b) != "789" {
		t.Fatalf("after Seek: %q", b)
	}
	if _, err := r.Seek(-1, io.SeekStart); err == nil {
		t.Fatal("Seek to -1 succeeded")
	}
	r.Seek(0, io.SeekStart)

	// The Reader is an io.ReadSeeker good enough for http.ServeContent.
	rec := httptest.NewRecorder()
	req := httptest.NewRequest("GET", "/", nil)
	req.Header.Set("Range", "bytes=10-19")
	http.ServeContent(rec, req, "", time.Time{}, r)
	if rec.Code != http.StatusPartialContent || rec.Body.String() != "0123456789" {
		t.Fatalf("ServeContent: %d %q", rec.Code, rec.Body.String())
	}
	// WriteTo from the middle, into a file (copy_file_range) and a buffer.
	r.Seek(9990, io.SeekStart)
	var bb bytes.Buffer
	if n, err := r.WriteTo(&bb); n != 10 || err != nil || bb.String() != "0123456789" {
		t.Fatalf("WriteTo: %d %v %q", n, err, bb.String())
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "copy"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	r.Seek(0, io.SeekStart)
	if n, err := io.Copy(f, r); n != 10000 || err != nil {
		t.Fatalf("io.Copy to file: %d %v", n, err)
	}
	if b, _ := os.ReadFile(f.Name()); string(b) != body {
		t.Fatal("file copy differs")
	}
}

func TestReplaceKeepsOldVersionForItsReaders(t *testing.T) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	put(t, s, key1, "version one")
	old, _ := s.Get(key1)
	defer old.Close()

	w, err := s.Create(key1, testMeta("version two!"))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := s.Create(key1, testMeta("x")); !errors.Is(err, ErrInProgress) {
		t.Fatalf("second Create: %v", err)
	}
	io.WriteString(w, "version")
	cur, ok := s.Get(key1) // the new, in-progress version
	if !ok || cur.Complete() || cur.Meta().Extra["sha256"] != testMeta("version two!").Extra["sha256"] {
		t.Fatalf("Get during write: ok %v complete %v", ok, cur.Complete())
	}
	defer cur.Close()
	if cur.Content() != nil {
		t.Fatal("File of an incomplete object")
	}
	if m, ok := s.Peek(key1); !ok || m.Size != -1 {
		t.Fatalf("Peek during write: %v %+v", ok, m)
	}
	io.WriteString(w, " two!")
	if err := w.Commit(w.Meta()); err != nil {
		t.Fatal(err)
	}
	if b, err := io.ReadAll(old); string(b) != "version one" || err != nil {
		t.Fatalf("old reader: %q %v", b, err)
	}
	if b, err := io.ReadAll(cur); string(b) != "version two!" || err != nil || !cur.Complete() || cur.Size() != 12 {
		t.Fatalf("new reader: %q %v", b, err)
	}
	if b, _, _ := get(t, s, key1); b != "version two!" {
		t.Fatalf("after commit: %q", b)
	}
	if got := objectFiles(t, o.Dir); len(got) != 1 {
		t.Fatalf("old version's files not removed: %v", got)
	}
	if st := s.Stats(); st.Entries != 1 || st.Evictions != 0 || st.Bytes != diskBytes(t, o.Dir) {
		t.Fatalf("stats %+v", st)
	}
}

func TestAbort(t *testing.T) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	put(t, s, key1, "complete")
	cause := errors.New("origin reset")
	w, _ := s.Create(key1, testMeta("partial body"))
	io.WriteString(w, "partial")
	r, _ := s.Get(key1)
	defer r.Close()
	w.Abort(cause)
	w.Abort(nil) // no effect
	buf := make([]byte, 100)
	_, err := r.Read(buf)
	var ae *AbortError
	if !errors.Is(err, ErrAborted) || !errors.Is(err, cause) || !errors.As(err, &ae) || ae.Key != key1 {
		t.Fatalf("reader of an aborted write: %v", err)
	}
	if _, err := r.Wait(t.Context()); !errors.Is(err, cause) {
		t.Fatalf("Wait: %v", err)
	}
	if _, err := w.Write([]byte("x")); !errors.Is(err, cause) {
		t.Fatalf("Write after Abort: %v", err)
	}
	if err := w.Commit(Meta{Size: -1}); !errors.Is(err, ErrAborted) {
		t.Fatalf("Commit after Abort: %v", err)
	}
	// The previous complete version is back.
	if b, _, ok := get(t, s, key1); !ok || b != "complete" {
		t.Fatalf("after abort: %q %v", b, ok)
	}
	// Without one, the key is gone; Close on a fresh writer aborts too.
	w, _ = s.Create("abcdef0123456789", testMeta("x"))
	io.WriteString(w, "x")
	w.Close()
	if _, ok := s.Get("abcdef0123456789"); ok {
		t.Fatal("aborted object visible")
	}
	if got := objectFiles(t, o.Dir); len(got) != 1 {
		t.Fatalf("files after aborts: %v", got)
	}
	if st := s.Stats(); st.Aborts != 2 || st.Writing != 0 || st.WritingBytes != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestSizeChecks(t *testing.T) {
	o := testOptions(t, 1<<20)
	o.MaxObjectBytes = 100
	s := openStore(t, o)
	m := testMeta("")
	m.Size = 10
	w, _ := s.Create("k1", m)
	io.WriteString(w, "12345")
	mustErr(t, w.Commit(w.Meta()), ErrSizeMismatch)

	w, _ = s.Create("k1", m)
	if _, err := io.WriteString(w, "12345678901"); !errors.Is(err, ErrSizeMismatch) || !errors.Is(err, ErrAborted) {
		t.Fatalf("writing past the declared size: %v", err)
	}
	w, _ = s.Create("k1", testMeta(""))
	io.WriteString(w, "123")
	final := w.Meta()
	final.Size = 4
	mustErr(t, w.Commit(final), ErrSizeMismatch)

	m.Size = 101
	_, err := s.Create("k1", m)
	mustErr(t, err, ErrTooLarge)
	w, _ = s.Create("k1", testMeta(""))
	_, err = w.Write(make([]byte, 101))
	mustErr(t, err, ErrTooLarge)

	m.Size = -2
	_, err = s.Create("k1", m)
	mustErr(t, err, ErrInvalidMeta)
	m.Size, m.Key = -1, "other"
	_, err = s.Create("k1", m)
	mustErr(t, err, ErrInvalidMeta)
	_, err = s.Create("", testMeta(""))
	mustErr(t, err, ErrInvalidKey)
	_, err = s.Create(strings.Repeat("k", MaxKeyLen+1), testMeta(""))
	mustErr(t, err, ErrInvalidKey)
	m = testMeta("")
	m.Expires = time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)
	_, err = s.Create("k1", m)
	mustErr(t, err, ErrInvalidMeta)
	if got := objectFiles(t, o.Dir); len(got) != 0 {
		t.Fatalf("files left: %v", got)
	}
	if st := s.Stats(); st.Writing != 0 || st.WritingBytes != 0 || st.Entries != 0 {
		t.Fatalf("stats %+v", st)
	}
}

func TestLRUEviction(t *testing.T) {
	o := testOptions(t, 1<<20)
	// A fixed clock: metadata records Stored, whose encoded length varies
	// with its nanoseconds, and the test needs objects of one size.
	now := time.Date(2026, 1, 2, 3, 4, 5, 600_000_000, time.UTC)
	o.Now = func() time.Time { return now }
	s := openStore(t, o)
	body := strings.Repeat("x", 1000)
	put(t, s, "aaaaaaaa", body)
	per := s.Stats().Bytes // one object's body and metadata
	s.Close()
	o.MaxBytes = 3*per + per/2
	s = openStore(t, o)
	put(t, s, "bbbbbbbb", body)
	put(t, s, "cccccccc", body)
	get(t, s, "aaaaaaaa") // a is now more recent than b
	put(t, s, "dddddddd", body)
	for k, want := range map[string]bool{"aaaaaaaa": true, "bbbbbbbb": false, "cccccccc": true, "dddddddd": true} {
		if _, ok := s.Peek(k); ok != want {
			t.Errorf("%s present %v, want %v", k, ok, want)
		}
	}
	st := s.Stats()
	if st.Evictions != 1 || st.EvictedBytes != per || st.Entries != 3 || st.Bytes != 3*per ||
		st.Bytes != diskBytes(t, o.Dir) {
		t.Fatalf("stats %+v, one object %d bytes, disk %d", st, per, diskBytes(t, o.Dir))
	}
	var order []string
	s.Range(func(in Info) bool { order = append(order, in.Key); return true })
	if want := []string{"dddddddd", "aaaaaaaa", "cccccccc"}; !slices.Equal(order, want) {
		t.Fatalf("LRU order %v, want %v", order, want)
	}
	// Recent: the most recently used first, at most n.
	for n, want := range map[int][]string{0: {}, 2: {"dddddddd", "aaaaaaaa"}, 5: {"dddddddd", "aaaaaaaa", "cccccccc"}} {
		var got []string
		for _, in := range s.Recent(n) {
			got = append(got, in.Key)
		}
		if !slices.Equal(got, want) && !(len(got) == 0 && len(want) == 0) {
			t.Errorf("Recent(%d) = %v, want %v", n, got, want)
		}
	}
	// The order survives a restart.
	s.Close()
	s = openStore(t, o)
	order = order[:0]
	s.Range(func(in Info) bool { order = append(order, in.Key); return in.Key != "aaaaaaaa" })
	if want := []string{"dddddddd", "aaaaaaaa"}; !slices.Equal(order, want) {
		t.Fatalf("LRU order after reopen %v, want %v", order, want)
	}
	// A smaller bound on reopen evicts the least recently used.
	s.Close()
	o.MaxBytes = 2 * per
	s = openStore(t, o)
	if _, ok := s.Peek("cccccccc"); ok || s.Stats().Entries != 2 {
		t.Fatalf("after shrinking: %+v", s.Stats())
	}
}

func TestMaxEntries(t *testing.T) {
	o := testOptions(t, 1<<20)
	o.MaxEntries = 2
	s := openStore(t, o)
	for _, k := range []string{"k1", "k2", "k3"} {
		put(t, s, k, k)
	}
	if _, ok := s.Peek("k1"); ok || s.Stats().Entries != 2 || s.Stats().Evictions != 1 {
		t.Fatalf("stats %+v", s.Stats())
	}
}

// TestInProgressWritesAreNeverEvicted: writes in progress are charged as
// their bytes arrive (Create reserves and evicts nothing, whatever size it
// declares), evict complete objects only for what they wrote, are never
// evicted themselves, and together hold at most MaxWritingBytes: past it
// Create and Write fail with ErrFull and evict nothing.
func TestInProgressWritesAreNeverEvicted(t *testing.T) {
	o := testOptions(t, 0)
	b := blockSize(o.Dir)
	o.MaxBytes, o.MaxObjectBytes, o.MaxWritingBytes = 16*b, 4*b, 6*b
	s := openStore(t, o)
	for i := range 8 { // full: eight objects of two blocks (a block of body and the metadata)
		put(t, s, fmt.Sprintf("old%d", i), strings.Repeat("o", int(b)))
	}
	check := func(entries int, writing, evictions int64) {
		t.Helper()
		st := s.Stats()
		if st.Entries != entries || st.WritingBytes != writing*b || st.Evictions != evictions ||
			st.Bytes+st.WritingBytes > o.MaxBytes {
			t.Fatalf("stats %+v, want %d entries, %d blocks being written, %d evictions", st, entries, writing, evictions)
		}
	}
	check(8, 0, 0)
	m := testMeta("")
	m.Size = 4 * b
	big, err := s.Create("big", m) // reserves nothing, evicts nothing
	if err != nil {
		t.Fatal(err)
	}
	defer big.Close()
	check(8, 0, 0)
	if _, err := big.Write(make([]byte, b)); err != nil { // one block: evicts old0
		t.Fatal(err)
	}
	check(7, 1, 1)
	if _, ok := s.Peek("old0"); ok {
		t.Fatal("old0, the least recently used, not evicted")
	}
	chunked, err := s.Create("chunked", testMeta(""))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := chunked.Write(make([]byte, 2*b)); err != nil { // evicts old1
		t.Fatal(err)
	}
	check(6, 3, 2)
	m.Size = 4 * b
	if _, err := s.Create("big2", m); !errors.Is(err, ErrFull) { // 3 + 4 blocks > 6
		t.Fatalf("Create beyond MaxWritingBytes: %v", err)
	}
	if _, err := big.Write(make([]byte, 2*b)); err != nil { // 5 blocks held: evicts old2
		t.Fatal(err)
	}
	check(5, 5, 3)
	if _, err := chunked.Write(make([]byte, b)); err != nil { // 6 blocks held: fits
		t.Fatal(err)
	}
	check(5, 6, 3)
	if _, err := s.Create("small", testMeta("")); !errors.Is(err, ErrFull) { // not even one block
		t.Fatalf("Create with MaxWritingBytes held: %v", err)
	}
	if _, err := chunked.Write([]byte("x")); !errors.Is(err, ErrFull) || !errors.Is(err, ErrAborted) {
		t.Fatalf("Write beyond MaxWritingBytes: %v", err)
	}
	check(5, 3, 3) // the complete objects keep MaxBytes - MaxWritingBytes
	if _, err := big.Write(make([]byte, b)); err != nil {
		t.Fatal(err)
	}
	if err := big.Commit(big.Meta()); err != nil { // 4 blocks and the metadata's
		t.Fatal(err)
	}
	check(6, 0, 3)
	if st := s.Stats(); st.Writing != 0 || st.Bytes != 15*b || st.Bytes != diskBytes(t, o.Dir) {
		t.Fatalf("stats %+v, disk %d", st, diskBytes(t, o.Dir))
	}
}

// TestBoundsOptions: the defaults of MaxObjectBytes, MaxWritingBytes and
// MaxEntries, and how explicit values are adjusted, as Stats reports them.
func TestBoundsOptions(t *testing.T) {
	dir := t.TempDir()
	b := blockSize(dir)
	const mib = 1 << 20
	for _, c := range []struct {
		name                    string
		entries                 int
		object, writing         int64
		wantObject, wantWriting int64
		wantEntries             int
	}{
		{"defaults", 0, 0, 0, mib / 8, mib / 4, mib / (4 << 10)},
		{"explicit", 5, 200 << 10, 300 << 10, 200 << 10, 300 << 10, 5},
		{"writing raised to the largest object", 0, 512 << 10, 0, 512 << 10, 512 << 10, mib / (4 << 10)},
		{"writing raised, in whole blocks", 0, 100, 100, 100, b, mib / (4 << 10)},
		{"object and writing at most MaxBytes", 0, 2 * mib, 4 * mib, mib, mib, mib / (4 << 10)},
		{"negative: defaults", 0, -1, -1, mib / 8, mib / 4, mib / (4 << 10)},
	} {
		o := Options{Dir: t.TempDir(), MaxBytes: mib, NoSync: true,
			MaxEntries: c.entries, MaxObjectBytes: c.object, MaxWritingBytes: c.writing}
		s := openStore(t, o)
		st := s.Stats()
		if st.MaxObjectBytes != c.wantObject || st.MaxWritingBytes != c.wantWriting ||
			st.MaxEntries != c.wantEntries || st.BlockBytes != b {
			t.Errorf("%s: %+v", c.name, st)
		}
		s.Close()
	}

	// A download that fills MaxWritingBytes still commits: its metadata
	// file may go beyond.
	o := testOptions(t, 16*b)
	o.MaxObjectBytes, o.MaxWritingBytes = 2*b, 2*b
	s := openStore(t, o)
	w, err := s.Create("f111f111", testMeta(""))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := w.Write(make([]byte, 2*b)); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(w.Meta()); err != nil {
		t.Fatal(err)
	}
	if st := s.Stats(); st.Entries != 1 || st.Bytes != 3*b || st.WritingBytes != 0 {
		t.Fatalf("stats %+v", st)
	}
	// Too small a cache for anything: Create says so.
	o = testOptions(t, 100)
	s = openStore(t, o)
	if _, err := s.Create("f222f222", testMeta("")); !errors.Is(err, ErrFull) {
		t.Fatalf("Create in a %d-byte cache: %v", o.MaxBytes, err)
	}
}

func TestUpdateMeta(t *testing.T) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	put(t, s, key1, "body")
	_, m, _ := get(t, s, key1)
	m = m.Clone()
	m.Expires = time.Date(2040, 1, 1, 0, 0, 0, 0, time.UTC)
	m.Header.Set("Age", "0")
	m.Extra["validated"] = "yes"
	if err := s.UpdateMeta(key1, m); err != nil {
		t.Fatal(err)
	}
	m.Size = 5
	mustErr(t, s.UpdateMeta(key1, m), ErrInvalidMeta)
	m.Size = -1
	mustErr(t, s.UpdateMeta("nokey", Meta{Size: -1}), ErrNotFound)
	mustErr(t, s.UpdateMeta("other", m), ErrInvalidMeta) // m.Key is key1
	s.Close()
	s = openStore(t, o)
	b, got, ok := get(t, s, key1)
	if !ok || b != "body" || !got.Expires.Equal(m.Expires) || got.Header.Get("Age") != "0" || got.Extra["validated"] != "yes" {
		t.Fatalf("after reopen: %q %+v", b, got)
	}
	if st := s.Stats(); st.Bytes != diskBytes(t, o.Dir) {
		t.Fatalf("accounted %d, on disk %d", st.Bytes, diskBytes(t, o.Dir))
	}
	// Only the complete version is updated, not a write in progress.
	w, _ := s.Create("k2", testMeta("x"))
	defer w.Close()
	mustErr(t, s.UpdateMeta("k2", Meta{Size: -1}), ErrNotFound)
}

func TestDelete(t *testing.T) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	put(t, s, key1, "body")
	r, _ := s.Get(key1)
	defer r.Close()
	if err := s.Delete(key1); err != nil {
		t.Fatal(err)
	}
	mustErr(t, s.Delete(key1), ErrNotFound)
	if b, err := io.ReadAll(r); string(b) != "body" || err != nil {
		t.Fatalf("reader of a deleted object: %q %v", b, err)
	}
	put(t, s, "k2", "kept")
	w, _ := s.Create("k2", testMeta("new"))
	io.WriteString(w, "ne")
	r2, _ := s.Get("k2")
	defer r2.Close()
	if err := s.Delete("k2"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(r2); !errors.Is(err, ErrDeleted) {
		t.Fatalf("reader of a deleted write: %v", err)
	}
	if _, err := io.WriteString(w, "w"); !errors.Is(err, ErrDeleted) {
		t.Fatalf("Write after Delete: %v", err)
	}
	if got := objectFiles(t, o.Dir); len(got) != 0 {
		t.Fatalf("files %v", got)
	}
	s.Close()
	s = openStore(t, o)
	if st := s.Stats(); st.Entries != 0 {
		t.Fatalf("deleted objects back after reopen: %+v", st)
	}
}

func TestReopenAndLock(t *testing.T) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	keys := []string{key1, "with/slash?q=1", "ünïcode", "new\nline", strings.Repeat("long", 300), "ABCDEF0123"}
	for i, k := range keys {
		put(t, s, k, fmt.Sprint("body ", i))
	}
	if _, err := Open(o); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open: %v", err)
	}
	w, _ := s.Create("inprogress", testMeta("x"))
	io.WriteString(w, "x")
	r, _ := s.Get("inprogress")
	defer r.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadAll(r); !errors.Is(err, ErrClosed) || !errors.Is(err, ErrAborted) {
		t.Fatalf("reader of a write aborted by Close: %v", err)
	}
	if _, err := io.WriteString(w, "x"); !errors.Is(err, ErrClosed) {
		t.Fatalf("Write after Close: %v", err)
	}
	if _, ok := s.Get(key1); ok {
		t.Fatal("Get after Close")
	}
	_, err := s.Create("k", testMeta(""))
	mustErr(t, err, ErrClosed)
	mustErr(t, s.Delete(key1), ErrClosed)
	mustErr(t, s.UpdateMeta(key1, Meta{Size: -1}), ErrClosed)
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = openStore(t, o)
	for i, k := range keys {
		if b, m, ok := get(t, s, k); !ok || b != fmt.Sprint("body ", i) || m.Key != k {
			t.Fatalf("key %q after reopen: %q %v", k, b, ok)
		}
	}
	if _, ok := s.Get("inprogress"); ok {
		t.Fatal("aborted write visible after reopen")
	}
	st := s.Stats()
	if st.Entries != len(keys) || st.Bytes != diskBytes(t, o.Dir) || st.Corrupt != 0 {
		t.Fatalf("stats %+v, disk %d", st, diskBytes(t, o.Dir))
	}
	var seen []string
	s.Range(func(in Info) bool { seen = append(seen, in.Key); return true })
	if len(seen) != len(keys) {
		t.Fatalf("Range saw %v", seen)
	}
}

func TestOpenRejectsOtherFormats(t *testing.T) {
	o := testOptions(t, 1<<20)
	os.WriteFile(filepath.Join(o.Dir, formatFile), []byte("coral-diskcache 3\n"), 0o600)
	if _, err := Open(o); !errors.Is(err, ErrFormat) {
		t.Fatalf("Open: %v", err)
	}
	for _, bad := range []Options{{MaxBytes: 1}, {Dir: o.Dir}, {Dir: o.Dir, MaxBytes: 1, MaxEntries: -1}} {
		if _, err := Open(bad); err == nil {
			t.Errorf("Open(%+v) succeeded", bad)
		}
	}
}

func TestRangeAndPeek(t *testing.T) {
	s := openStore(t, testOptions(t, 1<<20))
	put(t, s, "done", "12345")
	put(t, s, "both", "old")
	w1, _ := s.Create("both", testMeta("newer"))
	defer w1.Close()
	io.WriteString(w1, "ne")
	m := testMeta("")
	m.Size = 10
	w2, _ := s.Create("writing", m)
	defer w2.Close()
	io.WriteString(w2, "abc")
	got := map[string]Info{}
	s.Range(func(in Info) bool { got[in.Key] = in; return true })
	check := func(k string, size int64, writing bool, written, writeSize int64) {
		t.Helper()
		in := got[k]
		if in.Size != size || in.Writing != writing || in.Written != written || in.WriteSize != writeSize ||
			(size >= 0) == in.LastUsed.IsZero() {
			t.Errorf("%s: %+v", k, in)
		}
	}
	check("done", 5, false, 0, 0)
	check("both", 3, true, 2, -1)
	check("writing", -1, true, 3, 10)
	if m, ok := s.Peek("writing"); !ok || m.Size != 10 {
		t.Fatalf("Peek: %+v", m)
	}
	if _, ok := s.Peek("none"); ok {
		t.Fatal("Peek of a missing key")
	}
	if st := s.Stats(); st.Hits != 0 || st.Misses != 0 {
		t.Fatalf("Peek and Range counted: %+v", st)
	}
}
