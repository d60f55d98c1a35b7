package diskcache

import "time"

// Walk calls fn with every key of the store, batch keys at a time (in no
// particular order), until fn returns false. Unlike Range it copies no
// snapshot of the index: it holds the store's lock only while it collects
// one batch (batch entries of the index, no I/O; the keys the index does
// not hold, those not of 40 hex digits, are then read from the objects'
// metadata without the lock), and calls fn without it,
// so fn may call the Store (Peek, Delete, ...) and a walk over a million
// keys neither blocks other users for long nor takes memory beyond one
// batch. fn must not keep the slice it is given.
//
// Keys stored and removed while the walk runs are seen or not: a key
// present from start to end is seen exactly once; one added meanwhile may
// be seen or missed, one removed before it was reached is not seen, and
// one removed and stored again may be seen twice. (The walk goes through
// the index's entries by number, and an entry keeps its number while its
// key is in the index; keys with only a write in progress come last.)
// batch <= 0 means 1024.
func (s *Store) Walk(batch int, fn func([]Info) bool) {
	if batch <= 0 {
		batch = 1024
	}
	if !s.beginOp() {
		return
	}
	defer s.ops.Done()
	var b infoBatch
	b.infos = make([]Info, 0, batch)
	flush := func() bool {
		infos := b.resolve(s)
		more := len(infos) == 0 || fn(infos)
		b.infos, b.refs = b.infos[:0], b.refs[:0]
		return more
	}
	// Slot by slot: an entry keeps its slot while it is in the index.
	s.mu.Lock()
	for i := 0; i < s.idx.slots(); i++ {
		if e := s.idx.at(int32(i)); e.live {
			b.addLocked(s, e)
		}
		if len(b.infos) < batch {
			continue
		}
		s.mu.Unlock()
		if !flush() {
			return
		}
		s.mu.Lock()
	}
	b.addWritersLocked(s)
	s.mu.Unlock()
	if len(b.infos) > 0 {
		flush()
	}
}

// Stat returns what Range and Walk report about key (its complete version
// and any write in progress), without marking it used or counting a hit or
// miss; false if the store holds neither.
func (s *Store) Stat(key string) (Info, bool) {
	name := nameOf(key)
	s.mu.Lock()
	defer s.mu.Unlock()
	in := Info{Key: key, Size: -1}
	e, w := s.idx.lookup(name), s.writerOf(name)
	if e == nil && w == nil {
		return Info{}, false
	}
	if e != nil {
		in.Size, in.LastUsed = e.size, time.Unix(0, e.used)
	}
	if w != nil {
		w.infoOf(&in)
	}
	return in, true
}
