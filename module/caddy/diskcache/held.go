package diskcache

// Versions held open by Readers.
//
// A file that is unlinked while a Reader has it open keeps its blocks
// until the last descriptor closes, so a version replaced, deleted,
// evicted or aborted while it is being read still takes its space. The
// Store counts every open Reader against its version: a complete version
// with Readers is held (Store.held, charged in Store.bytes as before,
// and never evicted for room, which would free nothing), and a version
// unlinked with Readers becomes an orphan whose body stays charged
// (Store.orphaned) until its last Reader closes. makeRoomLocked keeps
// bytes + pending + orphaned within MaxBytes, so what the disk really
// holds is bounded however long readers keep files open; and since
// replacing, deleting or aborting a version only moves its charge (from
// bytes or pending to orphaned), none of them can take the count over.
// Space taken by orphans is only given back when their Readers close,
// which the caller bounds (coral_proxy drops clients that stop reading).

// orphan is a version unlinked while Readers had it open.
type orphan struct {
	readers int
	bytes   int64 // its body's charge, in whole blocks
}

// holdLocked counts a new Reader of e's complete version.
func (s *Store) holdLocked(e *entry) {
	if e.readers == 0 {
		s.held += s.accounted(e)
	}
	e.readers++
}

// orphanLocked records that version v, which readers Readers have open,
// was unlinked with bytes still charged for it.
func (s *Store) orphanLocked(v version, readers int, bytes int64) {
	if readers <= 0 || bytes <= 0 {
		return
	}
	if s.orphans == nil {
		s.orphans = make(map[version]*orphan)
	}
	s.orphans[v] = &orphan{readers: readers, bytes: bytes}
	s.orphaned += bytes
}

// release ends a Reader's count on version gen of key (after its file is
// closed).
func (s *Store) release(key string, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o := s.orphans[version{key, gen}]; o != nil {
		if o.readers--; o.readers == 0 {
			s.orphaned -= o.bytes
			delete(s.orphans, version{key, gen})
		}
		return
	}
	e := s.index[key]
	switch {
	case e == nil:
	case e.gen == gen && e.readers > 0:
		if e.readers--; e.readers == 0 {
			s.held -= s.accounted(e)
		}
	case e.w != nil && e.w.gen == gen && e.w.readers > 0:
		e.w.readers--
	}
}

// setMetaLenLocked changes the metadata length charged for e's complete
// version.
func (s *Store) setMetaLenLocked(e *entry, n int32) {
	delta := s.blocks(int64(n)) - s.blocks(int64(e.metaLen))
	s.bytes += delta
	if e.readers > 0 {
		s.held += delta
	}
	e.metaLen = n
}
