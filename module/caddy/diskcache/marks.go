package diskcache

// Marks: one 64-bit word of the caller's own per object, kept in the
// object's index entry. The proxy keeps there the renewal state of the
// DSHT reference it put for the object, which would otherwise take a
// table of its own as large as the index (a key per object). A mark is
// kept across the object's versions and goes with the object (eviction,
// removal, purge); it is not kept across restarts. Only objects whose key
// is its own name (40 lowercase hex digits, as the proxy's keys are) can
// be marked: a pass (UpdateMarks) reports the key, and the index keeps no
// other key.

// markBatch is how many index slots UpdateMarks looks at under one hold
// of the store's lock: hits wait for at most that many.
const markBatch = entryChunk

// SetMark sets key's mark to m (0 clears it) and returns the mark it
// had; false if key's complete version is not in the index to hold it. A
// key that is not 40 lowercase hex digits is never marked.
func (s *Store) SetMark(key string, m uint64) (old uint64, ok bool) {
	name := nameOf(key)
	if name.hashed {
		return 0, false
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.idx.lookup(name)
	if e == nil {
		return 0, false
	}
	old = e.mark
	s.idx.setMark(e, m)
	return old, true
}

// AddMarkBits sets bits in key's mark if it has one that lacks any of
// them (a hit noting that it was requested): it allocates nothing, and
// writes only when something changes.
func (s *Store) AddMarkBits(key string, bits uint64) {
	name := nameOf(key)
	if name.hashed {
		return
	}
	s.mu.Lock()
	if e := s.idx.lookup(name); e != nil && e.mark != 0 && e.mark&bits != bits {
		e.mark |= bits
	}
	s.mu.Unlock()
}

// Mark is key's mark, 0 if it has none or is not in the index.
func (s *Store) Mark(key string) uint64 {
	name := nameOf(key)
	if name.hashed {
		return 0
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if e := s.idx.lookup(name); e != nil {
		return e.mark
	}
	return 0
}

// Mark is the mark the object had when Get found its complete version (0
// for a write in progress): the caller can tell without the store's lock
// whether a note like AddMarkBits's is already there.
func (r *Reader) Mark() uint64 { return r.mark }

// Marked is how many objects have a mark.
func (s *Store) Marked() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.idx.marked
}

// A MarkedObject is an object UpdateMarks visits.
type MarkedObject struct{ name objName }

// Key is the object's key (it allocates).
func (o MarkedObject) Key() string { return o.name.String() }

// UpdateMarks calls fn for every marked object in a few thousand index
// slots from slot from (0 to start), with its mark, and sets the mark to
// what fn returns (0 clears it). It returns the slot to go on from, or -1
// after the last. It holds the store's lock throughout, fn included: fn
// must be quick and must not call the Store. An object marked, replaced
// or removed between calls may or may not be visited.
func (s *Store) UpdateMarks(from int, fn func(o MarkedObject, mark uint64) uint64) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	end := min(from+markBatch, s.idx.slots())
	for i := from; i < end; i++ {
		if e := s.idx.at(int32(i)); e.live && e.mark != 0 {
			s.idx.setMark(e, fn(MarkedObject{e.objName()}, e.mark))
		}
	}
	if end >= s.idx.slots() {
		return -1
	}
	return end
}

// setMark sets e's mark, counting the marked entries.
func (x *index) setMark(e *entry, m uint64) {
	switch {
	case e.mark == 0 && m != 0:
		x.marked++
	case e.mark != 0 && m == 0:
		x.marked--
	}
	e.mark = m
}
