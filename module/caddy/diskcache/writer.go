package diskcache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
)

// Writer writes a new version of an object. Write, Commit, Abort and Close
// may be called from different goroutines (they are serialized), but the
// bytes of one object must come from one writer in order. Every Writer
// must end with Commit or Abort; deferring Close is the easy way to make
// sure (it aborts unless committed).
type Writer struct {
	s       *Store
	key     string
	name    objName
	gen     uint64
	meta    Meta // from Create; read-only
	tmpPath string

	wmu       sync.Mutex // serializes Write, Commit, Abort
	f         bodyFile   // nil once closed
	n         int64      // bytes written
	metaFinal string     // the metadata file, once Commit has renamed it into place

	// Guarded by s.mu.
	reserved int64 // bytes of s.pending held for this write: its body so far, in whole blocks
	detached error // set when Delete or Close took the write away
	readers  int   // open Readers of this version while it is written (held.go)

	// Guarded by mu; shared with readers.
	mu      sync.Mutex
	state   writerState
	written int64 // bytes readers may read
	err     error // *AbortError once aborted
	final   Meta  // once committed
	path    string
	notify  chan struct{}        // closed on every change; created by waiters
	rl      *relay               // once relaying (relay.go)
	rdrs    map[*Reader]struct{} // Readers of the write in progress, for the relay window

	relaying atomic.Bool // the write is relayed, not stored (relay.go)
}

var _ io.WriteCloser = (*Writer)(nil)

type writerState uint8

const (
	writing writerState = iota
	committed
	aborted
	relaying     // not stored: bytes go to the Readers through memory (relay.go)
	relayedState // a relay that ended with the whole body: Readers get io.EOF
)

// Create starts writing a new version of the object under key, with the
// metadata of the response being stored (m.Size: the declared body length,
// or -1 if unknown). From now on Get returns readers of the new version,
// which see m at once and the body bytes as they are written. Readers that
// already have the previous complete version keep it; it is removed when
// the new one commits.
//
// Create reserves no space and evicts nothing: the body is charged, and
// complete objects evicted for it, as its bytes are written (see Write), so
// a declared size that never arrives costs nothing. Create fails with
// ErrInProgress if the key already has a write in progress, ErrTooLarge if
// m.Size exceeds MaxObjectBytes, ErrFull if the space held by writes in
// progress leaves less than m.Size (or one block, if m.Size is -1 or 0)
// within MaxWritingBytes, or as many writes are in progress as that has
// blocks, or when the versions Readers hold open leave no room for m.Size
// within MaxBytes even after evicting everything else. Passing those
// checks reserves nothing: a later Write may still find the room taken.
func (s *Store) Create(key string, m Meta) (*Writer, error) {
	m, err := s.createMeta(key, m)
	if err != nil {
		return nil, err
	}
	if !s.beginOp() {
		return nil, ErrClosed
	}
	defer s.ops.Done()
	name := nameOf(key)
	s.mu.Lock()
	if s.writers[name] != nil {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %q", ErrInProgress, key)
	}
	s.mu.Unlock()

	w := &Writer{s: s, key: key, name: name, gen: s.gen.Add(1), meta: m}
	w.tmpPath = filepath.Join(s.dir, tmpDir, versionBase(w.name, w.gen)+bodySuffix)
	w.path = w.tmpPath
	f, err := s.openBody(w.tmpPath)
	if err != nil {
		return nil, fmt.Errorf("diskcache: create %q: %w", key, err)
	}
	w.f = f
	fail := func(err error) (*Writer, error) {
		f.Close()
		os.Remove(w.tmpPath)
		return nil, err
	}
	want := s.blocks(max(m.Size, 0))
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return fail(ErrClosed)
	}
	if s.writers[name] != nil {
		s.mu.Unlock()
		return fail(fmt.Errorf("%w: %q", ErrInProgress, key))
	}
	if s.writing >= s.maxWriters || want > s.maxWriting-s.pending {
		pending, writing := s.pending, s.writing
		s.mu.Unlock()
		return fail(fmt.Errorf("%w: %d writes in progress hold %d bytes, %d more wanted, limit %d",
			ErrFull, writing, pending, want, s.maxWriting))
	}
	// Nor when what Readers hold (complete versions being read, which are
	// never evicted, and unlinked ones still open) leaves no room for the
	// declared size: this write would fail midway and cut off the clients
	// reading it, where failing now lets them get it whole, uncached.
	s.recheckDiskLocked()
	if room := s.limitLocked() - s.pending - s.orphaned - s.held; want > room {
		// The counts are read under the lock: other writers change them.
		err := fmt.Errorf("%w: readers hold %d bytes, writes %d; no room for %d more, limit %d",
			ErrFull, s.held+s.orphaned, s.pending, want, s.limitLocked())
		s.mu.Unlock()
		return fail(err)
	}
	s.writers[name] = w
	s.writing++
	s.mu.Unlock()
	return w, nil
}

// createMeta checks the key and metadata of a Create and returns the
// metadata a Writer starts from: a copy, with the key and the time stored.
// Metadata that could not be stored fails now, not at Commit.
func (s *Store) createMeta(key string, m Meta) (Meta, error) {
	if err := checkKey(key); err != nil {
		return m, err
	}
	if m.Key != "" && m.Key != key {
		return m, fmt.Errorf("%w: Meta.Key %q for key %q", ErrInvalidMeta, m.Key, key)
	}
	if m.Size < -1 {
		return m, fmt.Errorf("%w: Meta.Size %d", ErrInvalidMeta, m.Size)
	}
	if m.Size > s.maxObject {
		return m, fmt.Errorf("%w: %d bytes, limit %d", ErrTooLarge, m.Size, s.maxObject)
	}
	m = m.Clone()
	m.Key = key
	if m.Stored.IsZero() {
		m.Stored = s.now()
	}
	probe := m
	probe.Size = max(m.Size, 0)
	if _, err := encodeMeta(probe, 1); err != nil {
		return m, err
	}
	return m, nil
}

// Key returns the key being written.
func (w *Writer) Key() string { return w.key }

// Meta returns a copy of the metadata given to Create, with Key and Stored
// filled in: a starting point for Commit's final metadata.
func (w *Writer) Meta() Meta { return w.meta.Clone() }

// Written returns the number of body bytes written so far.
func (w *Writer) Written() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.written
}

// Write appends p to the body and wakes readers waiting for it. Before
// writing it charges the body's new length (in whole blocks) to the space
// held by writes in progress, evicting least recently used complete
// objects as needed to stay within MaxBytes. On any error the write is
// aborted (readers get an *AbortError wrapping the error) and Commit will
// fail; the caller may still pass the response through to its own client
// uncached. Errors: ErrSizeMismatch past a declared size, ErrTooLarge past
// MaxObjectBytes (declared size or not), ErrFull when writes in progress
// would hold more than MaxWritingBytes, and the cause of an earlier abort.
//
// A file system that is full (ENOSPC, EDQUOT) makes the Store evict down
// to what the disk holds and write again (diskfull.go); one that stays
// full, or fails otherwise (EIO), turns the write into a relay (relay.go):
// Write goes on taking bytes and handing them to the Readers it has, and
// Commit returns ErrNotStored.
func (w *Writer) Write(p []byte) (int, error) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if err := w.usableLocked(); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	if w.relaying.Load() {
		if end := w.relayEnd() + int64(len(p)); w.meta.Size >= 0 && end > w.meta.Size {
			return 0, w.abortLocked(fmt.Errorf("%w: %d bytes written, %d declared", ErrSizeMismatch, end, w.meta.Size))
		}
		return w.relayWrite(p)
	}
	end := w.n + int64(len(p))
	if w.meta.Size >= 0 && end > w.meta.Size {
		return 0, w.abortLocked(fmt.Errorf("%w: %d bytes written, %d declared", ErrSizeMismatch, end, w.meta.Size))
	}
	if end > w.s.maxObject {
		return 0, w.abortLocked(fmt.Errorf("%w: more than %d bytes", ErrTooLarge, w.s.maxObject))
	}
	if err := w.s.reserve(w, w.s.blocks(end), false); err != nil {
		if !errors.Is(err, ErrFull) || !w.s.diskBound() {
			return 0, w.abortLocked(err)
		}
		// The file system, not MaxBytes, leaves no room (diskfull.go):
		// not stored, but its Readers get it all.
		w.startRelayLocked(err)
		return w.relayWrite(p)
	}
	n, err := w.f.Write(p)
	for try := 0; err != nil; try++ {
		w.s.diskWriteErrors.Add(1)
		if try == 3 || !diskFull(err) || !w.s.fitToDisk() {
			break
		}
		var k int
		k, err = w.f.Write(p[n:])
		n += k
	}
	w.n += int64(n)
	w.mu.Lock()
	w.written = w.n
	w.wakeLocked()
	w.mu.Unlock()
	if err != nil {
		w.startRelayLocked(fmt.Errorf("diskcache: write %s: %w", w.tmpPath, err))
		k, err := w.relayWrite(p[n:])
		return n + k, err
	}
	return n, nil
}

// reserve makes w's reservation cover total bytes, evicting complete
// objects for the difference. Within MaxWritingBytes unless commit: the
// metadata file of a finished download may go beyond it (by a block or so
// per commit in progress) rather than throw the download away. The room
// of evicted objects is taken only once their files are unlinked, and
// room that other writers' evictions are about to free is waited for
// (never long: an unlink), so no byte of w lands on a block the count
// calls free while another file still takes it.
func (s *Store) reserve(w *Writer, total int64, commit bool) error {
	for {
		s.mu.Lock()
		if w.detached != nil {
			s.mu.Unlock()
			return w.detached
		}
		if total <= w.reserved {
			s.mu.Unlock()
			return nil
		}
		need := total - w.reserved
		s.recheckDiskLocked()
		if !commit && need > s.maxWriting-s.pending {
			pending := s.pending
			s.mu.Unlock()
			return fmt.Errorf("%w: writes in progress hold %d bytes, %d more needed, limit %d",
				ErrFull, pending, need, s.maxWriting)
		}
		victims, fits := s.evictLocked(need, nil)
		if fits {
			w.reserved += need
			s.pending += need
		}
		var freed chan struct{}
		if !fits && len(victims) == 0 && s.unlinking > 0 {
			if s.roomFreed == nil {
				s.roomFreed = make(chan struct{})
			}
			freed = s.roomFreed
		}
		pending, unlinked := s.pending, s.orphaned
		s.mu.Unlock()
		s.removeVersions(victims)
		switch {
		case fits:
			return nil
		case freed != nil:
			s.at("reserve:waiting-for-unlink")
			<-freed
		case len(victims) == 0:
			return fmt.Errorf("%w: writes in progress hold %d bytes and removed versions %d, %d more needed, limit %d",
				ErrFull, pending, unlinked, need, s.limitLocked())
		}
	}
}

// Abort abandons the write: the files are removed and readers of the
// in-progress object get an *AbortError wrapping err (ErrAbandoned if nil).
// It does nothing after Commit or a previous Abort.
func (w *Writer) Abort(err error) {
	w.mu.Lock()
	if rl := w.rl; rl != nil && !rl.stopped {
		close(rl.stop) // a relay Write waiting for its Readers gives up wmu
		rl.stopped = true
	}
	w.mu.Unlock()
	w.wmu.Lock()
	defer w.wmu.Unlock()
	w.abortLocked(err)
}

// Close aborts the write unless it was committed; it always returns nil.
// Deferring it right after Create guarantees that a failed download is
// never left in progress.
func (w *Writer) Close() error {
	w.Abort(ErrAbandoned)
	return nil
}

// usableLocked returns nil while writing, else why not.
func (w *Writer) usableLocked() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	switch w.state {
	case committed, relayedState:
		return ErrCommitted
	case aborted:
		return w.err
	}
	return nil
}

// abortLocked aborts the write (if still writing) and returns the error
// readers get.
func (w *Writer) abortLocked(cause error) error {
	return w.endLocked(cause, false)
}

// endLocked ends a write that will not be stored: aborted (Readers get an
// *AbortError), or a relay that delivered the whole body (relayed: Readers
// get io.EOF at its end, and the error returned is ErrNotStored with the
// cause). Its files are removed either way.
func (w *Writer) endLocked(cause error, relayed bool) error {
	if cause == nil {
		cause = ErrAbandoned
	}
	w.mu.Lock()
	if w.state != writing && w.state != relaying {
		err := w.err
		w.mu.Unlock()
		if err == nil {
			err = ErrCommitted
		}
		return err
	}
	w.mu.Unlock()
	s := w.s
	// Leave the index first so no new reader finds the write.
	s.mu.Lock()
	s.detachLocked(w, cause)
	s.mu.Unlock()
	var ae error = &AbortError{Key: w.key, Err: cause}
	w.mu.Lock()
	w.state, w.err = aborted, ae
	if relayed {
		if w.rl == nil { // the whole body is in the file
			w.rl = &relay{start: w.written, end: w.written, stop: make(chan struct{}), cause: cause}
		}
		ae = fmt.Errorf("%w: %w", ErrNotStored, w.rl.cause)
		w.state, w.err = relayedState, ae
	}
	path := w.path
	w.wakeLocked()
	w.mu.Unlock()
	s.at("abort:detached")
	if w.f != nil {
		w.f.Close()
		w.f = nil
	}
	if w.metaFinal != "" {
		os.Remove(w.metaFinal)
	}
	os.Remove(path)
	s.mu.Lock()
	s.unlinkedLocked(version{name: w.name, gen: w.gen})
	s.mu.Unlock()
	if relayed {
		s.relays.Add(1)
		return ae
	}
	s.aborts.Add(1)
	s.log.Debug("diskcache: write aborted", "key", w.key, "written", w.n, "cause", cause)
	return ae
}

func (w *Writer) wakeLocked() {
	if w.notify != nil {
		close(w.notify)
		w.notify = nil
	}
}

func (w *Writer) currentMeta() Meta {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state == committed {
		return w.final
	}
	return w.meta
}

// newReader opens a reader of the write; after Commit it is an ordinary
// reader of the complete version. The caller counted it in w.readers
// (held.go).
func (w *Writer) newReader(ctx context.Context) (*Reader, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.state == aborted {
		return nil, w.err
	}
	f, err := openRead(w.path)
	if err != nil {
		return nil, err
	}
	if w.state == committed {
		return w.s.newReader(ctx, w.key, w.gen, f, nil, w.final), nil
	}
	r := w.s.newReader(ctx, w.key, w.gen, f, w, Meta{})
	if w.rdrs == nil {
		w.rdrs = make(map[*Reader]struct{})
	}
	w.rdrs[r] = struct{}{}
	return r, nil
}
