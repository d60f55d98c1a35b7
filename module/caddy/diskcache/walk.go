package diskcache

// Walk calls fn with every key of the store, batch keys at a time (in no
// particular order), until fn returns false. Unlike Range it copies no
// snapshot of the index: it holds the store's lock only while it collects
// one batch (batch entries of the index, no I/O), and calls fn without it,
// so fn may call the Store (Peek, Delete, ...) and a walk over a million
// keys neither blocks other users for long nor takes memory beyond one
// batch. fn must not keep the slice it is given.
//
// Keys stored and removed while the walk runs are seen or not: a key
// present from start to end is seen exactly once; one added meanwhile may
// be seen or missed, one removed before it was reached is not seen, and
// one removed and stored again may be seen twice. (Go's map iteration
// gives exactly these guarantees for a map changed during the loop, which
// is what the other users' changes are: they run only while the lock is
// released between batches.) batch <= 0 means 1024.
func (s *Store) Walk(batch int, fn func([]Info) bool) {
	if batch <= 0 {
		batch = 1024
	}
	if !s.beginOp() {
		return
	}
	defer s.ops.Done()
	buf := make([]Info, 0, batch)
	s.mu.Lock()
	for _, e := range s.index {
		buf = append(buf, s.infoLocked(e))
		if len(buf) < batch {
			continue
		}
		s.mu.Unlock()
		more := fn(buf)
		buf = buf[:0]
		s.mu.Lock()
		if !more {
			s.mu.Unlock()
			return
		}
	}
	s.mu.Unlock()
	if len(buf) > 0 {
		fn(buf)
	}
}

// Stat returns what Range and Walk report about key (its complete version
// and any write in progress), without marking it used or counting a hit or
// miss; false if the store holds neither.
func (s *Store) Stat(key string) (Info, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	e := s.index[key]
	if e == nil {
		return Info{}, false
	}
	return s.infoLocked(e), true
}
