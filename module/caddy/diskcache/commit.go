package diskcache

import (
	"fmt"
	"os"
)

// Commit publishes the object as complete with the final metadata (for
// example with trailers merged into Header; final.Size must be -1 or the
// number of bytes written, and equal the size declared at Create if there
// was one). It fsyncs the body, renames it into place, writes the metadata
// file atomically and fsyncs the directory; only then is the object
// complete, in the index and on disk. Readers of the in-progress object
// then see io.EOF at its end and Complete() == true. The previous version,
// if any, is removed. On error the write is aborted, except when the
// disk fails it: a write relayed to its Readers (see Write), or one whose
// body or metadata the disk cannot take at the end, is not stored, and
// its Readers get the whole body all the same; Commit then returns
// ErrNotStored.
func (w *Writer) Commit(final Meta) error {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if err := w.usableLocked(); err != nil {
		return err
	}
	if w.relaying.Load() {
		if end := w.relayEnd(); w.meta.Size >= 0 && end != w.meta.Size {
			return w.abortLocked(fmt.Errorf("%w: %d bytes written, %d declared", ErrSizeMismatch, end, w.meta.Size))
		}
		return w.endLocked(nil, true)
	}
	s := w.s
	switch {
	case final.Key != "" && final.Key != w.key:
		return w.abortLocked(fmt.Errorf("%w: Meta.Key %q for key %q", ErrInvalidMeta, final.Key, w.key))
	case w.meta.Size >= 0 && w.n != w.meta.Size:
		return w.abortLocked(fmt.Errorf("%w: %d bytes written, %d declared", ErrSizeMismatch, w.n, w.meta.Size))
	case final.Size != -1 && final.Size != w.n:
		return w.abortLocked(fmt.Errorf("%w: %d bytes written, Commit says %d", ErrSizeMismatch, w.n, final.Size))
	}
	final = final.Clone()
	final.Key, final.Size = w.key, w.n
	if final.Stored.IsZero() {
		final.Stored = w.meta.Stored
	}
	mb, err := encodeMeta(final, w.gen)
	if err != nil {
		return w.abortLocked(err)
	}
	// A small body takes its metadata in its own file; a larger one gets
	// a metadata file, which counts against MaxBytes too (and an empty
	// body's one block).
	inline := w.n <= InlineMaxSize
	total := s.blocks(w.n) + s.blocks(int64(len(mb)))
	if inline {
		total = s.blocks(w.n + int64(len(mb)))
	}
	if err := s.reserve(w, total, true); err != nil {
		return w.abortLocked(err)
	}
	persist := w.persistLocked
	if inline {
		persist = w.persistInlineLocked
	}
	if err := persist(mb); err != nil {
		// The body is all written (its Readers may read it to the end);
		// the disk would not keep it.
		s.diskWriteErrors.Add(1)
		if diskFull(err) {
			s.fitToDisk()
		}
		s.log.Warn("diskcache: commit failed; not stored", "key", w.key, "err", err)
		return w.endLocked(err, true)
	}
	return w.publishLocked(final, mb, inline)
}

// persistLocked makes the written body and its metadata mb durable under
// the object's final names, in the order a crash can leave safely: the
// body synced, renamed into objects/, then the metadata file (the commit
// record) written atomically next to it and the directory synced.
func (w *Writer) persistLocked(mb []byte) error {
	s := w.s
	var err error
	// 1. The body's bytes are durable before anything names it complete.
	if !s.opt.NoSync {
		err = w.f.Sync()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.f = nil
	if err != nil {
		return fmt.Errorf("diskcache: sync %s: %w", w.tmpPath, err)
	}
	s.at("commit:synced")
	// 2. Move it into objects/ (under w.mu: new readers open w.path).
	body := s.bodyPath(w.name, w.gen)
	w.mu.Lock()
	if err = os.Rename(w.tmpPath, body); err == nil {
		w.path = body
	}
	w.mu.Unlock()
	if err != nil {
		return fmt.Errorf("diskcache: commit %q: %w", w.key, err)
	}
	s.at("commit:body-renamed")
	// 3. The metadata file is the commit record: written to tmp/, fsynced,
	// renamed next to the body, and the directory fsynced.
	metaPath := s.metaPath(w.name, w.gen)
	if err := s.writeFileAtomic(metaPath, mb); err != nil {
		return fmt.Errorf("diskcache: commit %q: %w", w.key, err)
	}
	w.metaFinal = metaPath
	s.at("commit:meta-renamed")
	if err := s.syncDir(s.shardDir(w.name)); err != nil {
		return fmt.Errorf("diskcache: commit %q: %w", w.key, err)
	}
	s.at("commit:dir-synced")
	return nil
}

// persistInlineLocked makes the written body durable with its metadata
// mb after it, in one file under its final name: the metadata appended,
// the file synced, then renamed into objects/ (the rename is the commit
// record: nothing in objects/ was ever partly written) and the directory
// synced.
func (w *Writer) persistInlineLocked(mb []byte) error {
	s := w.s
	_, err := w.f.Write(mb)
	if err == nil && !s.opt.NoSync {
		err = w.f.Sync()
	}
	if cerr := w.f.Close(); err == nil {
		err = cerr
	}
	w.f = nil
	if err != nil {
		return fmt.Errorf("diskcache: commit %q: %w", w.key, err)
	}
	s.at("commit:synced")
	final := s.inlinePath(w.name, w.gen, w.n, int32(len(mb)))
	w.mu.Lock()
	if err = os.Rename(w.tmpPath, final); err == nil {
		w.path = final
	}
	w.mu.Unlock()
	if err != nil {
		return fmt.Errorf("diskcache: commit %q: %w", w.key, err)
	}
	s.at("commit:body-renamed")
	if err := s.syncDir(s.shardDir(w.name)); err != nil {
		return fmt.Errorf("diskcache: commit %q: %w", w.key, err)
	}
	s.at("commit:dir-synced")
	return nil
}

// publishLocked puts the committed version in the index, replacing the
// previous one, hands its readers over to it and wakes whoever waits on
// the writer.
func (w *Writer) publishLocked(final Meta, mb []byte, inline bool) error {
	s := w.s
	s.mu.Lock()
	if w.detached != nil {
		cause := w.detached
		s.mu.Unlock()
		return w.abortLocked(cause)
	}
	delete(s.writers, w.name) // w's while not detached
	var remove []version
	e := s.idx.lookup(w.name)
	if e != nil {
		remove = append(remove, s.retireLocked(e))
	} else {
		e = s.idx.add(w.name)
	}
	s.pending -= w.reserved
	w.reserved = 0
	s.writing--
	e.gen, e.size, e.metaLen, e.used = w.gen, w.n, int32(len(mb)), s.now().UnixNano()
	e.inline = inline
	s.pushFront(e)
	s.bytes += s.accounted(e) // what w.reserved was: moved, not added
	if w.readers > 0 {
		// Its Readers read the complete version now.
		e.readers = int32(w.readers)
		w.readers = 0
		s.held += s.accounted(e)
	}
	victims, _ := s.evictLocked(0, e) // no more bytes land: unlinked below
	s.mu.Unlock()
	s.commits.Add(1)

	w.mu.Lock()
	w.state, w.final = committed, final
	w.wakeLocked()
	w.mu.Unlock()
	s.removeVersions(append(remove, victims...))
	return nil
}
