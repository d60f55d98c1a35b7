package diskcache

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
)

// Get returns a reader of the object stored under key: the version being
// written if there is one (see Reader), else the complete one. It marks the
// object recently used. Misses (and I/O errors, which are logged) return
// false. Blocking reads of an in-progress object wait without a deadline;
// use GetContext to tie them to a request.
func (s *Store) Get(key string) (*Reader, bool) {
	return s.GetContext(context.Background(), key)
}

// GetContext is Get with a context that ends the Reader's blocking reads
// (Read, ReadAt, WriteTo, Wait): once ctx is done they return ctx.Err().
// The context is not used after GetContext returns for anything else; the
// Reader must still be closed.
func (s *Store) GetContext(ctx context.Context, key string) (*Reader, bool) {
	if checkKey(key) != nil {
		s.misses.Add(1)
		return nil, false
	}
	s.mu.Lock() // beginOp and the first look-up under one lock
	if s.closed {
		s.mu.Unlock()
		s.misses.Add(1)
		return nil, false
	}
	s.ops.Add(1)
	defer s.ops.Done()
	name := nameOf(key)
	for attempt := range 4 { // retries cover a version replaced or removed meanwhile
		if attempt > 0 {
			s.mu.Lock()
		}
		if w := s.writerOf(name); w != nil {
			w.readers++ // before the file is open: see held.go
			s.mu.Unlock()
			if r, err := w.newReader(ctx); err == nil {
				s.hits.Add(1)
				return r, true
			}
			s.release(name, w.gen)
			continue
		}
		e := s.idx.lookup(name)
		if e == nil {
			s.mu.Unlock()
			break
		}
		v := e.version()
		gen, mark := v.gen, e.mark
		e.used = s.now().UnixNano()
		s.moveToFront(e)
		m, body, hot := s.hotGetLocked(e)
		if body != nil {
			// In memory: no file, so no hold on the version either.
			s.mu.Unlock()
			s.hits.Add(1)
			r := s.newMemReader(key, m, body)
			r.mark = mark
			return r, true
		}
		s.holdLocked(e)
		epoch := s.metaEpoch
		s.mu.Unlock()
		path := s.versionFile(v)
		var r *Reader
		var err error
		if hot {
			r, err = s.openHot(ctx, key, name, gen, path, e, m)
		} else {
			r, err = s.openVersion(ctx, key, name, gen, path, e, epoch)
		}
		if err == nil {
			s.hits.Add(1)
			r.mark = mark
			return r, true
		}
		s.release(name, gen)
		if !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("diskcache: dropping unreadable object", "key", key, "err", err)
			s.corrupt.Add(1)
		}
		// Gone (replaced, evicted, deleted, or removed behind our back) or
		// broken: if the index still names this version, forget it.
		s.mu.Lock()
		var vs []version
		if e := s.idx.lookup(name); e != nil && e.gen == gen {
			vs = append(vs, s.dropLocked(e))
		}
		s.mu.Unlock()
		s.removeVersions(vs)
	}
	s.misses.Add(1)
	return nil, false
}

// openHot opens the body of a complete version whose metadata is in the hot
// set: no metadata file, no stat. The metadata is what this Store wrote or
// checked itself, and the Store owns the directory.
//
// A body small enough to keep in memory (wantsBody) is read whole from the
// file here and offered to the hot set, and the Reader reads that copy
// (the file is closed and the version's hold, taken by the caller,
// released): the body is read from disk once, not again to serve it.
func (s *Store) openHot(ctx context.Context, key string, name objName, gen uint64, path string, e *entry, m Meta) (*Reader, error) {
	f, err := openRead(path)
	if err != nil {
		return nil, err
	}
	if s.wantsBody(m.Size) {
		body := make([]byte, m.Size)
		n, err := f.ReadAt(body, 0)
		if n == len(body) && (err == nil || err == io.EOF) {
			s.mu.Lock()
			s.hotBodyPutLocked(e, gen, body)
			s.mu.Unlock()
			f.Close()
			s.release(name, gen)
			return s.newMemReader(key, m, body), nil
		}
		// On a short read the file Reader below reports it.
	}
	return s.newReader(ctx, key, gen, f, nil, m), nil
}

// openVersion opens a complete version (its file at path): body first, so
// that the metadata read after it describes a body we hold; for an inline
// version, one file, whose length and metadata are checked against what
// its name says. The metadata is offered to the hot set if e still holds
// that version and no UpdateMeta replaced a metadata file since epoch.
func (s *Store) openVersion(ctx context.Context, key string, name objName, gen uint64, path string, e *entry, epoch uint64) (*Reader, error) {
	f, err := openRead(path)
	if err != nil {
		return nil, err
	}
	s.metaReads.Add(1)
	m, err := s.readVersionMeta(f, path, name, gen)
	if err == nil && m.Key != key {
		err = fmt.Errorf("%w: %s holds key %q", ErrCorrupt, path, m.Key)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	if s.readHook != nil {
		s.readHook()
	}
	m.Key = key // share the caller's copy
	s.mu.Lock()
	if e.hot <= 0 && e.live && e.gen == gen && s.metaEpoch == epoch {
		s.hotAdmitLocked(e, m)
	}
	s.mu.Unlock()
	return s.newReader(ctx, key, gen, f, nil, m), nil
}

// readVersionMeta reads and checks the metadata of version gen of name,
// whose body (or inline file) f at path is open: from the inline file's
// end, or the metadata file. The body must have the length the metadata
// says (and an inline file the length its name says).
func (s *Store) readVersionMeta(f *os.File, path string, name objName, gen uint64) (Meta, error) {
	fi, err := f.Stat()
	if err != nil {
		return Meta{}, err
	}
	var m Meta
	var mgen uint64
	size := fi.Size()
	if of, ok := parseObjectFile(filepath.Base(path)); ok && of.kind == kindInline {
		if size != of.size+int64(of.metaLen) {
			return Meta{}, fmt.Errorf("%w: %s has %d bytes, its name says %d", ErrCorrupt, path, size, of.size+int64(of.metaLen))
		}
		b := make([]byte, of.metaLen)
		if _, err := f.ReadAt(b, of.size); err != nil {
			return Meta{}, fmt.Errorf("%w: %s: %w", ErrCorrupt, path, err)
		}
		m, mgen, err = decodeMeta(b)
		size = of.size
	} else {
		m, mgen, err = readMetaFile(s.metaPath(name, gen))
	}
	switch {
	case err != nil:
		return Meta{}, err
	case mgen != gen || nameOf(m.Key) != name:
		return Meta{}, fmt.Errorf("%w: %s holds key %q generation %x", ErrCorrupt, path, m.Key, mgen)
	case m.Size != size:
		return Meta{}, fmt.Errorf("%w: %s has %d bytes, metadata says %d", ErrCorrupt, path, size, m.Size)
	}
	return m, nil
}

// Peek returns the metadata Get would return (of the write in progress, if
// any), without marking the object used or counting a hit or miss.
func (s *Store) Peek(key string) (Meta, bool) {
	if checkKey(key) != nil || !s.beginOp() {
		return Meta{}, false
	}
	defer s.ops.Done()
	name := nameOf(key)
	s.mu.Lock()
	if w := s.writerOf(name); w != nil {
		s.mu.Unlock()
		return w.currentMeta(), true
	}
	e := s.idx.lookup(name)
	if e == nil {
		s.mu.Unlock()
		return Meta{}, false
	}
	if e.hot > 0 { // not hotGetLocked: a Peek is no use
		m := s.hot[e.hot-1].m
		s.mu.Unlock()
		return m, true
	}
	v := e.version()
	s.mu.Unlock()
	m, err := s.peekVersion(name, v.gen, s.versionFile(v))
	if err != nil || m.Key != key {
		return Meta{}, false
	}
	return m, true
}

// peekVersion reads the metadata of version gen of name, whose file Get
// would open is path.
func (s *Store) peekVersion(name objName, gen uint64, path string) (Meta, error) {
	s.metaReads.Add(1)
	f, err := openRead(path)
	if err != nil {
		return Meta{}, err
	}
	defer f.Close()
	return s.readVersionMeta(f, path, name, gen)
}

// UpdateMeta replaces the metadata of the complete version of key (for
// example a new Expires after a revalidation) without touching the body.
// m.Size must be -1 or the body's length. The replacement is atomic and
// durable: after a crash the object has the old or the new metadata. A
// write in progress for the key is not affected; without a complete
// version UpdateMeta returns ErrNotFound.
func (s *Store) UpdateMeta(key string, m Meta) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if m.Key != "" && m.Key != key {
		return fmt.Errorf("%w: Meta.Key %q for key %q", ErrInvalidMeta, m.Key, key)
	}
	if !s.beginOp() {
		return ErrClosed
	}
	defer s.ops.Done()
	name := nameOf(key)
	kl := s.keyLock(name)
	for {
		kl.Lock()
		victims, again, err := s.updateMeta(key, name, m)
		kl.Unlock()
		s.removeVersions(victims)
		if !again {
			return err
		}
	}
}

// updateMeta does UpdateMeta's work under the key's file lock, which keeps
// a removal of this version from running between our checks and rename.
// again: it evicted for room, and the victims must be unlinked (which
// needs key locks) before it tries again and takes their room.
func (s *Store) updateMeta(key string, name objName, m Meta) (victims []version, again bool, err error) {
	s.mu.Lock()
	e := s.idx.lookup(name)
	if e == nil {
		s.mu.Unlock()
		return nil, false, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	gen, size, oldLen, inline, path := e.gen, e.size, e.metaLen, e.inline, s.entryPath(e)
	s.mu.Unlock()
	if m.Size != -1 && m.Size != size {
		return nil, false, fmt.Errorf("%w: Meta.Size %d, stored body has %d bytes", ErrInvalidMeta, m.Size, size)
	}
	m = m.Clone()
	m.Key, m.Size = key, size
	if inline {
		return s.updateInline(key, name, e, gen, path, m)
	}
	b, err := encodeMeta(m, gen)
	if err != nil {
		return nil, false, err
	}
	delta := s.blocks(int64(len(b))) - s.blocks(int64(oldLen))
	s.mu.Lock()
	if !e.live || e.gen != gen {
		s.mu.Unlock()
		return nil, false, fmt.Errorf("%w: %q was removed meanwhile", ErrNotFound, key)
	}
	victims, fits := s.evictLocked(delta, e)
	if !fits {
		s.mu.Unlock()
		if len(victims) > 0 {
			return victims, true, nil
		}
		return nil, false, fmt.Errorf("%w: no room for %d more bytes of metadata", ErrFull, delta)
	}
	s.setMetaLenLocked(e, int32(len(b)))
	s.mu.Unlock()
	err = s.writeFileAtomic(s.metaPath(name, gen), b)
	s.at("update:renamed")
	if err == nil {
		err = s.syncDir(s.shardDir(name))
	}
	s.mu.Lock()
	// A Get that read the old file while this one was written must not
	// cache it (see openVersion).
	s.metaEpoch++
	current := e.live && e.gen == gen
	if err != nil {
		// The old or the new file is in place; account for the old one
		// (the difference is a few header bytes either way), and let the
		// next Get read whichever it is.
		if current {
			s.setMetaLenLocked(e, oldLen)
			s.hotDropLocked(e)
		}
		s.mu.Unlock()
		return victims, false, fmt.Errorf("diskcache: update metadata of %q: %w", key, err)
	}
	if current {
		// Updated because it was requested: keep it hot. m is our own
		// copy, never modified from now on.
		s.hotPutLocked(e, m)
	}
	s.mu.Unlock()
	return victims, false, nil
}

// updateInline is updateMeta for an inline version (gen, in its file at
// path): its file holds the metadata, so the update writes a new version,
// the body copied (at most InlineMaxSize bytes) with the new metadata m
// after it, the way Commit does, and replaces the old version with it. A
// crash leaves the old version or the new one (Open keeps the newest).
// Its room is charged as a write in progress until it is in place.
func (s *Store) updateInline(key string, name objName, e *entry, gen uint64, path string, m Meta) (victims []version, again bool, err error) {
	ngen := s.gen.Add(1)
	mb, err := encodeMeta(m, ngen)
	if err != nil {
		return nil, false, err
	}
	f, err := openRead(path)
	if err != nil {
		return nil, false, fmt.Errorf("%w: %q: %w", ErrNotFound, key, err)
	}
	buf := make([]byte, m.Size, m.Size+int64(len(mb)))
	_, err = f.ReadAt(buf, 0)
	f.Close()
	if err != nil {
		return nil, false, fmt.Errorf("diskcache: update metadata of %q: %w", key, err)
	}
	buf = append(buf, mb...)
	need := s.blocks(int64(len(buf)))
	s.mu.Lock()
	if !e.live || e.gen != gen {
		s.mu.Unlock()
		return nil, false, fmt.Errorf("%w: %q was removed meanwhile", ErrNotFound, key)
	}
	victims, fits := s.evictLocked(need, e)
	if !fits {
		s.mu.Unlock()
		if len(victims) > 0 {
			return victims, true, nil
		}
		return nil, false, fmt.Errorf("%w: no room for %d more bytes of metadata", ErrFull, need)
	}
	s.pending += need
	s.mu.Unlock()
	final := s.inlinePath(name, ngen, m.Size, int32(len(mb)))
	tmp := filepath.Join(s.dir, tmpDir, versionBase(name, ngen)+objSuffix)
	err = s.writeFile(tmp, buf)
	if err == nil {
		err = os.Rename(tmp, final)
	}
	s.at("update:renamed")
	if err == nil {
		err = s.syncDir(s.shardDir(name))
	}
	s.mu.Lock()
	s.pending -= need
	s.metaEpoch++
	if err != nil || !e.live || e.gen != gen {
		// Not in place, or the version changed meanwhile: drop ours.
		s.mu.Unlock()
		os.Remove(tmp)
		os.Remove(final)
		if err == nil {
			err = fmt.Errorf("%w: %q was removed meanwhile", ErrNotFound, key)
		} else {
			err = fmt.Errorf("diskcache: update metadata of %q: %w", key, err)
		}
		return victims, false, err
	}
	hadBody := e.hot > 0 && s.hot[e.hot-1].body != nil
	old := s.retireLocked(e)
	e.gen, e.size, e.metaLen, e.inline, e.used = ngen, m.Size, int32(len(mb)), true, s.now().UnixNano()
	s.pushFront(e)
	s.bytes += s.accounted(e)
	// Updated because it was requested: keep it hot (m is our own copy),
	// with the body in memory if it was.
	s.hotPutLocked(e, m)
	if hadBody {
		s.hotBodyPutLocked(e, ngen, slices.Clone(buf[:m.Size]))
	}
	s.mu.Unlock()
	return append(victims, old), false, nil
}

// Delete removes the object stored under key: its complete version (files
// unlinked; open Readers keep reading it) and any write in progress (its
// readers get an *AbortError wrapping ErrDeleted). ErrNotFound if there
// was neither.
func (s *Store) Delete(key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if !s.beginOp() {
		return ErrClosed
	}
	defer s.ops.Done()
	name := nameOf(key)
	s.mu.Lock()
	e, w := s.idx.lookup(name), s.writerOf(name)
	if e == nil && w == nil {
		s.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	var vs []version
	if e != nil {
		vs = append(vs, s.dropLocked(e))
	}
	if w != nil {
		s.detachLocked(w, ErrDeleted)
	}
	s.mu.Unlock()
	if w != nil {
		w.Abort(ErrDeleted)
	}
	s.removeVersions(vs)
	if len(vs) > 0 {
		// Make the removal durable: a purged object must not come back.
		if err := s.syncDir(s.shardDir(name)); err != nil {
			return fmt.Errorf("diskcache: delete %q: %w", key, err)
		}
	}
	return nil
}

// removeVersions unlinks the files of versions already dropped from the
// index: metadata first, so a crash in between leaves a body without
// metadata, which Open discards. Never call it holding a key lock.
func (s *Store) removeVersions(vs []version) {
	for _, v := range vs {
		name := v.name
		kl := s.keyLock(name)
		kl.Lock()
		paths := []string{s.metaPath(name, v.gen), s.bodyPath(name, v.gen)}
		if v.inline {
			paths = []string{s.inlinePath(name, v.gen, v.size, v.metaLen)}
		}
		for i, p := range paths {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				s.log.Warn("diskcache: remove failed", "file", p, "err", err)
			}
			if i == 0 {
				s.at("remove:meta-removed")
			}
		}
		kl.Unlock()
		s.mu.Lock()
		s.unlinkedLocked(v)
		s.mu.Unlock()
	}
}
