package diskcache

// Versions held open by Readers, and versions being unlinked.
//
// A file that is unlinked while a Reader has it open keeps its blocks
// until the last descriptor closes, so a version replaced, deleted,
// evicted or aborted while it is being read still takes its space. The
// Store counts every open Reader against its version: a complete version
// with Readers is held (Store.held, charged in Store.bytes as before,
// and never evicted for room, which would free nothing). A version taken
// out of the index becomes an orphan whose charge (Store.orphaned) stays
// until its files are unlinked, and its body's until its last Reader
// closes too. Room is granted only within MaxBytes - (bytes + pending +
// orphaned) (evictLocked; a writer that evicted unlinks its victims
// before it takes their room, see reserve), and every file is charged
// before its bytes land and until its blocks are gone, so the count
// bounds what the disk really holds at every instant, however long
// readers keep files open and however late an unlink runs. Replacing,
// deleting or aborting a version only moves its charge (from bytes or
// pending to orphaned), so none of them can take the count over. Space
// taken by orphans is only given back when their Readers close, which
// the caller bounds (coral_proxy drops clients that stop reading).

// orphan is a version taken out of the index (replaced, deleted, evicted,
// aborted) whose blocks may still be on disk: its files are not unlinked
// yet, or Readers have them open. Its charge leaves the count only when
// its blocks leave the disk: the metadata file's once unlinked, the
// body's once unlinked and closed by its last Reader. Counting a version
// free when it leaves the index instead let other writes fill its room
// while its files were still there, waiting to be unlinked.
type orphan struct {
	readers  int
	body     int64 // the body's charge, in whole blocks
	meta     int64 // the metadata file's charge, in whole blocks
	unlinked bool
}

// orphanLocked moves the charge of version v, taken out of the index with
// readers Readers open, to s.orphaned until unlinkedLocked (and, for the
// body, the last release).
func (s *Store) orphanLocked(v version, readers int, body, meta int64) {
	if s.orphans == nil {
		s.orphans = make(map[uint64]*orphan)
	}
	s.orphans[v.gen] = &orphan{readers: readers, body: body, meta: meta}
	s.orphaned += body + meta
	s.unlinking++
}

// unlinkedLocked records that the files of v are gone from the directory
// (or never will be: removal failed and was logged): the metadata file's
// charge is given back, and the body's too if no Reader has it open.
func (s *Store) unlinkedLocked(v version) {
	o := s.orphans[v.gen]
	if o == nil || o.unlinked {
		return
	}
	o.unlinked = true
	s.unlinking--
	s.orphaned -= o.meta
	o.meta = 0
	if o.readers <= 0 {
		s.orphaned -= o.body
		delete(s.orphans, v.gen)
	}
	s.roomChangedLocked()
}

// roomChangedLocked wakes the writes waiting for an unlink (reserve).
func (s *Store) roomChangedLocked() {
	if s.roomFreed != nil {
		close(s.roomFreed)
		s.roomFreed = nil
	}
}

// holdLocked counts a new Reader of e's complete version.
func (s *Store) holdLocked(e *entry) {
	if e.readers == 0 {
		s.held += s.accounted(e)
	}
	e.readers++
}

// release ends a Reader's count on version gen of name (after its file
// is closed). Generations are unique across names.
func (s *Store) release(name objName, gen uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if o := s.orphans[gen]; o != nil {
		if o.readers--; o.readers <= 0 && o.unlinked {
			s.orphaned -= o.body
			delete(s.orphans, gen)
		}
		return
	}
	if e := s.idx.lookup(name); e != nil && e.gen == gen && e.readers > 0 {
		if e.readers--; e.readers == 0 {
			s.held -= s.accounted(e)
		}
		return
	}
	if w := s.writerOf(name); w != nil && w.gen == gen && w.readers > 0 {
		w.readers--
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
