package diskcache

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"sync"
	"syscall"
	"testing"
	"time"
)

// failingDisk is the file system a test decides the failures of: every
// body file the Store opens writes through it, and fails with err once
// the bodies together have written more than room bytes (room < 0: never),
// failing at most fails times (then the disk "has room again").
type failingDisk struct {
	mu      sync.Mutex
	room    int64
	written int64
	err     error
	fails   int
	syncErr error
}

type failingFile struct {
	*os.File
	d *failingDisk
}

func (f failingFile) Write(p []byte) (int, error) {
	d := f.d
	d.mu.Lock()
	n := len(p)
	var err error
	if d.room >= 0 && d.fails > 0 && d.written+int64(n) > d.room {
		n = int(max(d.room-d.written, 0))
		err = d.err
		d.fails--
	}
	d.written += int64(n)
	d.mu.Unlock()
	k, werr := f.File.Write(p[:n])
	if werr != nil {
		return k, werr
	}
	return k, err
}

func (f failingFile) Sync() error {
	f.d.mu.Lock()
	err := f.d.syncErr
	f.d.mu.Unlock()
	if err != nil {
		return err
	}
	return f.File.Sync()
}

func (d *failingDisk) install(s *Store) {
	s.wrapBody = func(f *os.File) bodyFile { return failingFile{f, d} }
}

func randomBody(n int, seed uint64) []byte {
	b := make([]byte, n)
	r := rand.New(rand.NewPCG(seed, 1))
	for i := range b {
		b[i] = byte(r.Uint32())
	}
	return b
}

// TestDiskFullEvictsAndRetries (issue 36): a cache whose MaxBytes is far
// more than its disk holds meets ENOSPC: the bound drops to what the disk
// holds, least recently used objects are evicted, the write succeeds, and
// the object is stored whole.
func TestDiskFullEvictsAndRetries(t *testing.T) {
	o := testOptions(t, 1<<30)
	s := openStore(t, o)
	for i := range 20 {
		put(t, s, fmt.Sprintf("old-%02d", i), string(randomBody(8<<10, uint64(i))))
	}
	before := s.Stats()
	d := &failingDisk{room: 0, fails: 1, err: fmt.Errorf("write: %w", syscall.ENOSPC)}
	d.install(s)
	s.freeBytes = func() (int64, bool) { return 0, true } // the disk is full
	body := string(randomBody(20<<10, 99))
	put(t, s, "new", body)
	if got, _, ok := get(t, s, "new"); !ok || got != body {
		t.Fatalf("the object written through a full disk: found %v, %d bytes", ok, len(got))
	}
	st := s.Stats()
	if st.DiskWriteErrors != 1 {
		t.Errorf("DiskWriteErrors = %d, want 1", st.DiskWriteErrors)
	}
	if st.Relays != 0 || st.Aborts != 0 {
		t.Errorf("Relays %d, Aborts %d: the retry should have stored it", st.Relays, st.Aborts)
	}
	if st.Evictions == before.Evictions {
		t.Errorf("nothing evicted for room on a full disk")
	}
	if st.DiskLimitBytes == 0 || st.DiskLimitBytes >= st.MaxBytes {
		t.Errorf("DiskLimitBytes = %d, want the disk's bound below MaxBytes %d", st.DiskLimitBytes, st.MaxBytes)
	}
	if held := st.Bytes + st.WritingBytes + st.UnlinkedBytes; held > st.DiskLimitBytes {
		t.Errorf("the store holds %d bytes, above the disk's bound %d", held, st.DiskLimitBytes)
	}
	if got := diskBytes(t, o.Dir); got != st.Bytes {
		t.Errorf("files take %d bytes, Stats.Bytes %d", got, st.Bytes)
	}
	// Later writes are held to the disk's bound without failing again.
	for i := range 10 {
		put(t, s, fmt.Sprintf("later-%02d", i), string(randomBody(8<<10, uint64(100+i))))
	}
	if st := s.Stats(); st.Bytes+st.WritingBytes > st.DiskLimitBytes || st.DiskWriteErrors != 1 {
		t.Errorf("after more writes: %d bytes held, bound %d, %d write errors", st.Bytes+st.WritingBytes, st.DiskLimitBytes, st.DiskWriteErrors)
	}
}

// TestDiskLimitRecovers: a lowered bound follows the disk back up once it
// has room again.
func TestDiskLimitRecovers(t *testing.T) {
	s := openStore(t, testOptions(t, 1<<30))
	put(t, s, "a", string(randomBody(8<<10, 1)))
	d := &failingDisk{room: 0, fails: 1, err: syscall.ENOSPC}
	d.install(s)
	s.freeBytes = func() (int64, bool) { return 0, true }
	put(t, s, "b", string(randomBody(8<<10, 2)))
	if s.Stats().DiskLimitBytes == 0 {
		t.Fatal("no bound after a full disk")
	}
	s.freeBytes = func() (int64, bool) { return 10 << 30, true }
	s.mu.Lock()
	s.diskCheckedAt = time.Now().Add(-2 * diskRecheck)
	s.mu.Unlock()
	put(t, s, "c", string(randomBody(8<<10, 3)))
	if got := s.Stats().DiskLimitBytes; got != 0 {
		t.Errorf("DiskLimitBytes = %d with the disk freed, want 0 (MaxBytes again)", got)
	}
}

// TestWriteErrorRelaysToReaders (issue 36): a body the disk will not take
// (EIO, or full with nothing left to evict) is not stored, and the Readers
// already reading it still get every byte, then io.EOF, never a short body
// that looks complete. Bodies larger than the relay window make the
// writer wait for a slow reader rather than drop bytes it has not read.
func TestWriteErrorRelaysToReaders(t *testing.T) {
	for _, tc := range []struct {
		name     string
		size     int
		failAt   int64
		err      error
		declared bool
	}{
		{"EIO at the start", 300 << 10, 0, syscall.EIO, true},
		{"EIO midway, chunked", 300 << 10, 100 << 10, syscall.EIO, false},
		{"ENOSPC with nothing to evict", 200 << 10, 64 << 10, syscall.ENOSPC, true},
		{"larger than the window", 3*relayWindow + 12345, 512 << 10, syscall.EIO, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(t, 1<<30)
			s := openStore(t, o)
			d := &failingDisk{room: tc.failAt, fails: 1 << 30, err: tc.err}
			d.install(s)
			s.freeBytes = func() (int64, bool) { return 0, true }
			body := randomBody(tc.size, uint64(tc.size))
			m := testMeta(string(body))
			if tc.declared {
				m.Size = int64(len(body))
			}
			w, err := s.Create("k", m)
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			// Two readers, one slow, joined before the first byte.
			var readers []*Reader
			for range 2 {
				r, ok := s.Get("k")
				if !ok {
					t.Fatal("no reader of the write in progress")
				}
				readers = append(readers, r)
			}
			type result struct {
				b   []byte
				err error
			}
			results := make(chan result, len(readers))
			for i, r := range readers {
				go func() {
					var buf bytes.Buffer
					chunk := make([]byte, 7<<10)
					for {
						n, err := r.Read(chunk)
						buf.Write(chunk[:n])
						if i == 1 && n > 0 {
							time.Sleep(50 * time.Microsecond) // slow: holds the window
						}
						if err != nil {
							if err == io.EOF {
								err = nil
							}
							r.Close() // before the counts are checked
							results <- result{buf.Bytes(), err}
							return
						}
					}
				}()
			}
			for p := body; len(p) > 0; {
				n := min(len(p), 16<<10)
				if _, err := w.Write(p[:n]); err != nil {
					t.Fatalf("Write after %d bytes: %v", len(body)-len(p), err)
				}
				p = p[n:]
			}
			err = w.Commit(w.Meta())
			if !errors.Is(err, ErrNotStored) || !errors.Is(err, tc.err) {
				t.Fatalf("Commit: %v, want ErrNotStored wrapping %v", err, tc.err)
			}
			for range readers {
				res := <-results
				if res.err != nil {
					t.Fatalf("a reader got %v after %d bytes", res.err, len(res.b))
				}
				if !bytes.Equal(res.b, body) {
					t.Fatalf("a reader got %d bytes, not the %d-byte body", len(res.b), len(body))
				}
			}
			if r, ok := s.Get("k"); ok {
				r.Close()
				t.Error("a relayed object is in the cache")
			}
			st := s.Stats()
			if st.Relays != 1 || st.DiskWriteErrors == 0 || st.Commits != 0 {
				t.Errorf("Relays %d, DiskWriteErrors %d, Commits %d; want 1, > 0, 0", st.Relays, st.DiskWriteErrors, st.Commits)
			}
			if st.WritingBytes != 0 || st.UnlinkedBytes != 0 || st.Writing != 0 {
				t.Errorf("after the relay: WritingBytes %d, UnlinkedBytes %d, Writing %d", st.WritingBytes, st.UnlinkedBytes, st.Writing)
			}
			if f := objectFiles(t, o.Dir); len(f) != 0 {
				t.Errorf("files left: %v", f)
			}
			// The key can be stored again once the disk works.
			d.mu.Lock()
			d.room = -1
			d.mu.Unlock()
			s.freeBytes = func() (int64, bool) { return 10 << 30, true }
			s.mu.Lock()
			s.diskCheckedAt = time.Time{}
			s.mu.Unlock()
			put(t, s, "k", string(body))
		})
	}
}

// TestRelayNewReaderMisses: once a write relays, new Gets miss (they
// could not get the bytes that left the window), and Create may start the
// object afresh.
func TestRelayNewReaderMisses(t *testing.T) {
	s := openStore(t, testOptions(t, 1<<30))
	d := &failingDisk{room: 0, fails: 1 << 30, err: syscall.EIO}
	d.install(s)
	w, err := s.Create("k", testMeta("x"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if _, err := w.Write([]byte("x")); err != nil {
		t.Fatal(err)
	}
	if !w.Relaying() {
		t.Fatal("Relaying() false after a failed write")
	}
	if r, ok := s.Get("k"); ok {
		r.Close()
		t.Fatal("Get found a relayed write")
	}
	w2, err := s.Create("k", testMeta("x"))
	if err != nil {
		t.Fatalf("Create after a relay started: %v", err)
	}
	w2.Close()
}

// TestRelayAbortEndsWaitingWrite: a relay Write waiting for a reader that
// does not read ends when the writer is aborted from elsewhere, and the
// reader gets an *AbortError, not io.EOF.
func TestRelayAbortEndsWaitingWrite(t *testing.T) {
	s := openStore(t, testOptions(t, 1<<30))
	d := &failingDisk{room: 0, fails: 1 << 30, err: syscall.EIO}
	d.install(s)
	w, err := s.Create("k", testMeta(""))
	if err != nil {
		t.Fatal(err)
	}
	r, ok := s.Get("k")
	if !ok {
		t.Fatal("no reader")
	}
	defer r.Close()
	done := make(chan error, 1)
	go func() {
		_, err := w.Write(make([]byte, 2*relayWindow)) // more than the window: waits for r
		done <- err
	}()
	// Wait until the relay window is full (the writer is blocked on r).
	for {
		w.mu.Lock()
		full := w.rl != nil && w.rl.end == relayWindow
		w.mu.Unlock()
		if full {
			break
		}
		time.Sleep(time.Millisecond)
	}
	w.Abort(errors.New("origin went away"))
	if err := <-done; !errors.Is(err, ErrAborted) {
		t.Fatalf("the waiting Write returned %v, want an abort", err)
	}
	if _, err := io.ReadAll(r); !errors.Is(err, ErrAborted) {
		t.Fatalf("reader of an aborted relay: %v, want ErrAborted", err)
	}
}

// TestCommitDiskErrorRelays: a body written whole whose commit the disk
// fails (fsync, metadata file) is not stored, and its reader still gets
// it to the end.
func TestCommitDiskErrorRelays(t *testing.T) {
	o := testOptions(t, 1<<30)
	o.NoSync = false
	s := openStore(t, o)
	d := &failingDisk{room: -1, syncErr: syscall.EIO}
	d.install(s)
	body := randomBody(50<<10, 7)
	w, err := s.Create("k", testMeta(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r, ok := s.Get("k")
	if !ok {
		t.Fatal("no reader")
	}
	defer r.Close()
	if _, err := w.Write(body); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(w.Meta()); !errors.Is(err, ErrNotStored) {
		t.Fatalf("Commit: %v, want ErrNotStored", err)
	}
	got, err := io.ReadAll(r)
	if err != nil || !bytes.Equal(got, body) {
		t.Fatalf("reader: %d bytes, %v; want the whole %d-byte body", len(got), err, len(body))
	}
	if st := s.Stats(); st.DiskWriteErrors != 1 || st.Entries != 0 {
		t.Errorf("DiskWriteErrors %d, Entries %d; want 1, 0", st.DiskWriteErrors, st.Entries)
	}
}

// TestRelayAsked: a caller that will not have a write stored (Relay)
// gets what a full disk gives: the reader already there gets the whole
// body, the key is no longer found, and Commit returns ErrNotStored
// wrapping the caller's cause.
func TestRelayAsked(t *testing.T) {
	s := openStore(t, testOptions(t, 1<<30))
	body := randomBody(3*relayWindow/2, 7)
	m := testMeta(string(body))
	w, err := s.Create("k", m)
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	r, ok := s.Get("k")
	if !ok {
		t.Fatal("no reader for the write in progress")
	}
	defer r.Close()
	got := make(chan []byte)
	go func() {
		b, _ := io.ReadAll(r)
		got <- b
	}()
	half := len(body) / 3
	if _, err := w.Write(body[:half]); err != nil {
		t.Fatal(err)
	}
	cause := errors.New("the caller's reason")
	w.Relay(cause)
	w.Relay(cause) // a second time does nothing
	if !w.Relaying() {
		t.Fatal("Relaying() false after Relay")
	}
	if r2, ok := s.Get("k"); ok {
		r2.Close()
		t.Error("Get found a relayed write")
	}
	if _, err := w.Write(body[half:]); err != nil {
		t.Fatal(err)
	}
	if err := w.Commit(m); !errors.Is(err, ErrNotStored) || !errors.Is(err, cause) {
		t.Fatalf("Commit: %v, want ErrNotStored wrapping the cause", err)
	}
	if b := <-got; !bytes.Equal(b, body) {
		t.Errorf("the reader got %d bytes, want the %d written", len(b), len(body))
	}
}
