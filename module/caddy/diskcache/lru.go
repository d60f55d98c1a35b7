package diskcache

// evictLocked evicts least recently used complete versions (never keep)
// until need more bytes fit within MaxBytes once the victims' files are
// unlinked, and the entry count is within MaxEntries. The victims stay
// charged (orphans, held.go) until removeVersions unlinks them, since
// their blocks are on disk until then. fits reports whether need fits
// now, the victims still charged: if it does not, the caller must unlink
// the victims (after unlocking s.mu) before it takes the room, and try
// again; with no victims either, need cannot fit until something else
// frees room (nothing if unlinking is 0). Writes in progress are held to
// MaxWritingBytes by their callers (reserve), not here.
func (s *Store) evictLocked(need int64, keep *entry) (victims []version, fits bool) {
	floor := int64(0)
	if keep != nil && keep.gen != 0 && keep.readers == 0 {
		floor = s.accounted(keep)
	}
	limit := s.limitLocked() - need // no overflow: need is at most a few objects
	// Versions with Readers take their space however they are removed
	// (held.go): evicting them frees nothing.
	if s.pending+s.orphaned+s.held+floor > limit {
		return nil, false
	}
	freeing := int64(0) // what unlinking the victims gives back
	for s.bytes+s.pending+s.orphaned-freeing > limit || s.count > s.maxEntries {
		bytesOver := s.bytes+s.pending+s.orphaned-freeing > limit
		e := s.entryAt(s.tail)
		for e != nil && (e == keep || (bytesOver && e.readers > 0)) {
			e = s.entryAt(e.prev)
		}
		if e == nil {
			break
		}
		s.evictions.Add(1)
		s.evictedBytes.Add(s.accounted(e))
		s.log.Debug("diskcache: evicting", "name", e.objName().String(), "bytes", s.accounted(e))
		v := s.dropLocked(e)
		if o := s.orphans[v.gen]; o != nil {
			freeing += o.meta
			if o.readers == 0 {
				freeing += o.body
			}
		}
		victims = append(victims, v)
	}
	return victims, s.bytes+s.pending+s.orphaned <= limit
}

// dropLocked removes e's complete version from the index and accounting,
// and e with it.
func (s *Store) dropLocked(e *entry) version {
	v := s.retireLocked(e)
	s.idx.remove(e)
	return v
}

// retireLocked takes e's complete version out of the LRU list and the
// accounting, keeping e (for a new version to take its place).
func (s *Store) retireLocked(e *entry) version {
	v := e.version()
	s.hotDropLocked(e)
	s.unlink(e)
	s.bytes -= s.accounted(e)
	if e.readers > 0 {
		s.held -= s.accounted(e)
	}
	// On disk until removeVersions unlinks it, its body until its Readers
	// close too.
	body, meta := s.blocks(e.size), s.blocks(int64(e.metaLen))
	if e.inline {
		body, meta = s.accounted(e), 0 // one file, held whole by its Readers
	}
	s.orphanLocked(v, int(e.readers), body, meta)
	e.readers = 0
	e.gen, e.size, e.metaLen = 0, 0, 0
	return v
}

// detachLocked ends w's claim on the index and on reserved space; its
// next Write or Commit fails with cause. Its Abort cleans up the files.
func (s *Store) detachLocked(w *Writer, cause error) {
	if w.detached != nil {
		return
	}
	w.detached = cause
	// Its files are unlinked by Abort (which then calls unlinkedLocked);
	// what was written stays on disk until then, and until the write's
	// Readers close. The reservation covers a Write under way, whose
	// bytes may land after this.
	s.orphanLocked(version{name: w.name, gen: w.gen}, w.readers, w.reserved, 0)
	w.readers = 0
	s.roomChangedLocked() // a Write of w waiting in reserve must see this
	if s.writers[w.name] == w {
		delete(s.writers, w.name)
	}
	s.pending -= w.reserved
	w.reserved = 0
	s.writing--
}

// LRU list, of slot numbers.

// entryAt returns entry i, nil for -1.
func (s *Store) entryAt(i int32) *entry {
	if i < 0 {
		return nil
	}
	return s.idx.at(i)
}

func (s *Store) pushFront(e *entry) {
	e.prev, e.next = -1, s.head
	if s.head >= 0 {
		s.idx.at(s.head).prev = e.slot
	} else {
		s.tail = e.slot
	}
	s.head = e.slot
	e.listed = true
	s.count++
}

func (s *Store) pushBack(e *entry) {
	e.prev, e.next = s.tail, -1
	if s.tail >= 0 {
		s.idx.at(s.tail).next = e.slot
	} else {
		s.head = e.slot
	}
	s.tail = e.slot
	e.listed = true
	s.count++
}

func (s *Store) unlink(e *entry) {
	if e.prev >= 0 {
		s.idx.at(e.prev).next = e.next
	} else {
		s.head = e.next
	}
	if e.next >= 0 {
		s.idx.at(e.next).prev = e.prev
	} else {
		s.tail = e.prev
	}
	e.prev, e.next = -1, -1
	e.listed = false
	s.count--
}

func (s *Store) moveToFront(e *entry) {
	if s.head != e.slot {
		s.unlink(e)
		s.pushFront(e)
	}
}
