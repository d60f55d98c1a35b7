//go:build unix

package diskcache

import (
	"errors"
	"fmt"
	"strings"
	"syscall"
	"testing"
)

// openUnlinked sums the space allocated to the files rs hold open that
// no longer have a name (each file once, however many readers have it):
// what the disk holds for them beyond the directory.
func openUnlinked(t *testing.T, rs []*Reader) int64 {
	t.Helper()
	var n int64
	seen := map[[2]uint64]bool{}
	for _, r := range rs {
		var st syscall.Stat_t
		if err := syscall.Fstat(int(r.f.Fd()), &st); err != nil {
			t.Fatal(err)
		}
		id := [2]uint64{uint64(st.Dev), uint64(st.Ino)}
		if st.Nlink == 0 && !seen[id] {
			seen[id] = true
			n += int64(st.Blocks) * 512
		}
	}
	return n
}

// TestOpenUnlinkedCounted is the stalled readers: clients that
// never read hold every version of an object that changes, each unlinked
// when the next one commits. Their space used to be freed from the count
// while the files stayed on disk, so a 1 MiB cache grew without bound.
// What the disk holds (the directory plus the unlinked files readers keep
// open) must stay within MaxBytes (slack: the Store's own files); writes
// that would go beyond fail with ErrFull; closing the readers gives the
// space back.
func TestOpenUnlinkedCounted(t *testing.T) {
	o := testOptions(t, 1<<20)
	o.MaxObjectBytes = 256 << 10
	s := openStore(t, o)
	const slack = 6 * 4096
	var readers []*Reader
	defer func() {
		for _, r := range readers {
			r.Close()
		}
	}()
	check := func(when string) {
		t.Helper()
		files, _ := realUsage(t, o.Dir)
		unlinked := openUnlinked(t, readers)
		st := s.Stats()
		if files+unlinked > o.MaxBytes+slack {
			t.Fatalf("%s: the directory takes %d bytes and %d open unlinked files %d more: %d for a %d-byte cache (accounted: %d complete, %d writing, %d unlinked)",
				when, files, st.UnlinkedVersions, unlinked, files+unlinked, o.MaxBytes, st.Bytes, st.WritingBytes, st.UnlinkedBytes)
		}
		if st.Bytes+st.WritingBytes+st.UnlinkedBytes > o.MaxBytes {
			t.Fatalf("%s: accounted %d + %d + %d > %d", when, st.Bytes, st.WritingBytes, st.UnlinkedBytes, o.MaxBytes)
		}
		if unlinked > st.UnlinkedBytes {
			t.Fatalf("%s: open unlinked files take %d bytes, accounted %d", when, unlinked, st.UnlinkedBytes)
		}
	}
	body := func(i int) string { return strings.Repeat(fmt.Sprint(i%10), 200<<10) }
	// Other objects, which eviction may take.
	for i := range 3 {
		put(t, s, fmt.Sprintf("other-%d", i), body(i))
	}
	full := 0
	for i := range 20 {
		// A stalled reader of the current version, then a new version.
		if r, ok := s.Get("changing"); ok {
			readers = append(readers, r)
		}
		if err := tryPut(s, "changing", body(i)); err != nil {
			mustErr(t, err, ErrFull)
			full++
		}
		check(fmt.Sprintf("version %d", i))
	}
	if full == 0 {
		t.Error("20 versions of 200 KiB held open in a 1 MiB cache, and no write was refused")
	}
	// A write in progress with a reader, aborted: its bytes stay charged
	// until the reader closes.
	if w, err := s.Create("aborted", testMeta("")); err == nil {
		r, _ := s.Get("aborted")
		w.Write(make([]byte, 64<<10))
		w.Abort(nil)
		if r != nil {
			readers = append(readers, r)
		}
		check("aborted write")
	}
	for _, r := range readers {
		r.Close()
	}
	readers = nil
	if st := s.Stats(); st.UnlinkedBytes != 0 || st.UnlinkedVersions != 0 || s.held != 0 {
		t.Errorf("readers closed: %d unlinked bytes in %d versions, %d held", st.UnlinkedBytes, st.UnlinkedVersions, s.held)
	}
	for i := range 4 {
		put(t, s, "changing", body(i))
	}
	check("readers closed")
}

// TestHeldNotEvicted: a complete object with an open Reader is not evicted
// for room (that would free nothing while the Reader has it), so the
// least recently used object without one goes instead; once the Reader
// closes it can go like any other.
func TestHeldNotEvicted(t *testing.T) {
	o := testOptions(t, 1<<20)
	o.MaxObjectBytes = 256 << 10
	s := openStore(t, o)
	body := strings.Repeat("h", 200<<10)
	put(t, s, "held", body)
	r, ok := s.Get("held")
	if !ok {
		t.Fatal("miss")
	}
	for i := range 8 {
		put(t, s, fmt.Sprintf("new-%d", i), body)
	}
	if _, ok := s.Peek("held"); !ok {
		t.Error("the object being read was evicted")
	}
	if st := s.Stats(); st.UnlinkedBytes != 0 || st.Bytes > o.MaxBytes {
		t.Errorf("%+v", st)
	}
	r.Close()
	for i := range 8 {
		put(t, s, fmt.Sprintf("newer-%d", i), body)
	}
	if _, ok := s.Peek("held"); ok {
		t.Error("the least recently used object was not evicted once its reader closed")
	}
}

// TestCreateRefusedWhenReadersHoldTheRoom: when the versions Readers hold
// leave no room for a declared size, Create fails with ErrFull at once (the
// caller relays the response uncached) instead of a Write failing midway
// and cutting off the clients already reading the object.
func TestCreateRefusedWhenReadersHoldTheRoom(t *testing.T) {
	o := testOptions(t, 1<<20)
	o.MaxObjectBytes = 256 << 10
	s := openStore(t, o)
	body := strings.Repeat("h", 200<<10)
	var readers []*Reader
	for i := range 4 {
		key := fmt.Sprintf("held-%d", i)
		put(t, s, key, body)
		r, ok := s.Get(key)
		if !ok {
			t.Fatal("miss")
		}
		readers = append(readers, r)
	}
	// 800 KiB held of 1 MiB: a declared 250 KiB cannot fit.
	w, err := s.Create("new", Meta{Status: 200, Size: 250 << 10})
	if !errors.Is(err, ErrFull) {
		if err == nil {
			_, err = w.Write([]byte(strings.Repeat("n", 250<<10)))
			w.Close()
		}
		t.Fatalf("Create with readers holding the room: %v, want ErrFull from Create itself", err)
	}
	// One that fits is taken.
	w, err = s.Create("small", Meta{Status: 200, Size: 100 << 10})
	if err != nil {
		t.Fatalf("Create of what fits: %v", err)
	}
	w.Close()
	for _, r := range readers {
		r.Close()
	}
	if w, err = s.Create("new", Meta{Status: 200, Size: 250 << 10}); err != nil {
		t.Fatalf("Create once the readers closed: %v", err)
	}
	w.Close()
}
