package diskcache

// makeRoomLocked evicts least recently used complete versions (never keep)
// until need more bytes fit within MaxBytes and the entry count is within
// MaxEntries. It evicts nothing and returns false if need cannot fit even
// with every other complete version gone. The caller removes the returned
// versions' files after unlocking s.mu. Writes in progress are held to
// MaxWritingBytes by their callers (reserve), not here.
func (s *Store) makeRoomLocked(need int64, keep *entry) ([]version, bool) {
	floor := int64(0)
	if keep != nil && keep.gen != 0 && keep.readers == 0 {
		floor = s.accounted(keep)
	}
	limit := s.opt.MaxBytes - need // no overflow: need is at most a few objects
	// Versions with Readers take their space however they are removed
	// (held.go): evicting them frees nothing.
	if s.pending+s.orphaned+s.held+floor > limit {
		return nil, false
	}
	var out []version
	for s.bytes+s.pending+s.orphaned > limit || s.count > s.maxEntries {
		bytesOver := s.bytes+s.pending+s.orphaned > limit
		e := s.tail
		for e != nil && (e == keep || (bytesOver && e.readers > 0)) {
			e = e.prev
		}
		if e == nil {
			break
		}
		s.evictions.Add(1)
		s.evictedBytes.Add(s.accounted(e))
		s.log.Debug("diskcache: evicting", "key", e.key, "bytes", s.accounted(e))
		out = append(out, s.dropLocked(e))
	}
	return out, true
}

// dropLocked removes e's complete version from the index and accounting;
// e itself goes too unless a write is in progress.
func (s *Store) dropLocked(e *entry) version {
	v := version{e.key, e.gen}
	s.hotDropLocked(e)
	s.unlink(e)
	s.bytes -= s.accounted(e)
	if e.readers > 0 {
		// Unlinked, but its body stays on disk until its Readers close.
		s.held -= s.accounted(e)
		s.orphanLocked(v, int(e.readers), s.blocks(e.size))
		e.readers = 0
	}
	e.gen, e.size, e.metaLen = 0, 0, 0
	if e.w == nil {
		delete(s.index, e.key)
	}
	return v
}

// detachLocked ends w's claim on the index and on reserved space; its
// next Write or Commit fails with cause. Its Abort cleans up the files.
func (s *Store) detachLocked(w *Writer, cause error) {
	if w.detached != nil {
		return
	}
	w.detached = cause
	// Its body is unlinked by Abort; what was written stays on disk
	// until the write's Readers close.
	s.orphanLocked(version{w.key, w.gen}, w.readers, w.reserved)
	w.readers = 0
	if e := s.index[w.key]; e != nil && e.w == w {
		e.w = nil
		if e.gen == 0 {
			delete(s.index, e.key)
		}
	}
	s.pending -= w.reserved
	w.reserved = 0
	s.writing--
}

// LRU list.

func (s *Store) pushFront(e *entry) {
	e.prev, e.next = nil, s.head
	if s.head != nil {
		s.head.prev = e
	} else {
		s.tail = e
	}
	s.head = e
	s.count++
}

func (s *Store) pushBack(e *entry) {
	e.prev, e.next = s.tail, nil
	if s.tail != nil {
		s.tail.next = e
	} else {
		s.head = e
	}
	s.tail = e
	s.count++
}

func (s *Store) unlink(e *entry) {
	if e.prev != nil {
		e.prev.next = e.next
	} else {
		s.head = e.next
	}
	if e.next != nil {
		e.next.prev = e.prev
	} else {
		s.tail = e.prev
	}
	e.prev, e.next = nil, nil
	s.count--
}

func (s *Store) moveToFront(e *entry) {
	if s.head != e {
		s.unlink(e)
		s.pushFront(e)
	}
}
