package diskcache

// The hot set: decoded metadata of complete versions read again and again,
// so that a Get of one of them opens only the body file. It is bounded by
// Options.HotMetaBytes (estimated heap bytes), not by the number of objects:
// keeping every object's decoded Meta would cost about 1.2 KB per object
// (two maps and their strings), seven times the rest of the index. See the
// package docs ("Memory").
//
// Admission: a version enters on its second Get that reads its metadata
// file. The first one only marks the entry (hotSeen), so objects requested
// once, most of a CDN's (their one reader often arrives after the commit),
// never take room; Commit adds nothing either. UpdateMeta replaces or adds
// the decoded copy (a revalidation means the object is requested).
//
// Replacement is CLOCK (second chance): a Get sets its slot's reference bit,
// and the hand evicting for room clears set bits and takes the first slot
// whose bit is clear, so entries read again since the hand last passed stay.
//
// Small bodies: a version in the hot set of at most HotBodyMaxSize bytes
// also gets its body in memory at its next Get (read from the file that
// Get opened), within Options.HotBodyBytes, so that its hits open, read
// and close no file and take no hold on the version (a Reader of memory
// keeps no file on disk). The body goes with the slot, and also on its
// own, by a second CLOCK hand, when bodies need room.
//
// Everything here is guarded by s.mu.

// DefaultHotMetaBytes is Options.HotMetaBytes when zero.
const DefaultHotMetaBytes = 16 << 20

// DefaultHotBodyBytes is Options.HotBodyBytes when zero: 1,024 bodies of
// HotBodyMaxSize, many more of the small objects that make up most of a
// page.
const DefaultHotBodyBytes = 16 << 20

// HotBodyMaxSize is the largest body kept in memory. Larger ones go out
// with sendfile, whose cost does not grow with the body, from the page
// cache; below it a hit's open, read and close are most of its work.
const HotBodyMaxSize = 16 << 10

// hotSlot holds one entry's decoded metadata, and maybe its body.
type hotSlot struct {
	e    *entry // nil: free
	m    Meta
	body []byte // nil: not in memory; never modified once set
	cost int64
	ref  bool
}

// hotSeen is entry.hot for a version whose metadata file one Get has read:
// the next one caches it.
const hotSeen = -1

// hotGetLocked returns e's cached metadata and body (nil if not in
// memory) and marks them used.
func (s *Store) hotGetLocked(e *entry) (Meta, []byte, bool) {
	if e.hot <= 0 {
		return Meta{}, nil, false
	}
	h := &s.hot[e.hot-1]
	h.ref = true
	return h.m, h.body, true
}

// wantsBody reports whether a version of size bytes whose metadata is in
// the hot set should have its body read into memory.
func (s *Store) wantsBody(size int64) bool {
	return s.hotBodyMax > 0 && size >= 0 && size <= HotBodyMaxSize && size <= s.hotBodyMax/8
}

// hotBodyPutLocked keeps body as the body of e's version gen, if e still
// holds it in the hot set without one.
func (s *Store) hotBodyPutLocked(e *entry, gen uint64, body []byte) {
	if e.hot <= 0 || !e.live || e.gen != gen {
		return
	}
	h := &s.hot[e.hot-1]
	if h.body != nil || int64(len(body)) != h.m.Size {
		return
	}
	h.body = body
	s.hotBody += bodyCost(body)
	s.hotBodies++
	s.hotBodyEvictLocked(e)
}

// bodyCost is what a body kept in memory is charged: its allocation.
func bodyCost(b []byte) int64 { return allocSize(cap(b)) }

// hotBodyDropLocked forgets the body of slot h.
func (s *Store) hotBodyDropLocked(h *hotSlot) {
	if h.body == nil {
		return
	}
	s.hotBody -= bodyCost(h.body)
	s.hotBodies--
	h.body = nil
}

// hotBodyEvictLocked makes the bodies fit their budget, sparing keep's. Its
// hand passes over bodies read since it last came by once (clearing no
// reference bit: that is the metadata hand's job) and takes them on its
// second turn.
func (s *Store) hotBodyEvictLocked(keep *entry) {
	for turns := 2 * len(s.hot); s.hotBody > s.hotBodyMax && turns > 0; turns-- {
		if s.bodyHand >= len(s.hot) {
			s.bodyHand = 0
		}
		h := &s.hot[s.bodyHand]
		s.bodyHand++
		if h.body == nil || h.e == keep || (h.ref && turns > len(s.hot)) {
			continue
		}
		s.hotBodyDropLocked(h)
	}
}

// hotAdmitLocked is called with the metadata a Get read from e's file: the
// first time it only marks e, the second time it caches m.
func (s *Store) hotAdmitLocked(e *entry, m Meta) {
	switch e.hot {
	case 0:
		e.hot = hotSeen
	case hotSeen:
		s.hotPutLocked(e, m)
	}
}

// hotPutLocked caches m (the metadata of e's complete version, shared with
// readers from now on: never modified) in place of what e had. Metadata too
// large for an eighth of the budget is not kept.
func (s *Store) hotPutLocked(e *entry, m Meta) {
	cost := metaCost(m)
	if e.hot > 0 {
		h := &s.hot[e.hot-1]
		if cost <= s.hotMax/8 {
			s.hotBytes += cost - h.cost
			h.m, h.cost, h.ref = m, cost, true
			s.hotEvictLocked(e)
			return
		}
		s.hotDropLocked(e)
		return
	}
	if cost > s.hotMax/8 {
		return
	}
	s.hotBytes += cost
	s.hotEvictLocked(e)
	var i int
	if n := len(s.hotFree); n > 0 {
		i = int(s.hotFree[n-1])
		s.hotFree = s.hotFree[:n-1]
	} else {
		s.hot = append(s.hot, hotSlot{})
		i = len(s.hot) - 1
	}
	// New slots start unreferenced: a key read once goes before one read
	// again.
	s.hot[i] = hotSlot{e: e, m: m, cost: cost}
	e.hot = int32(i + 1)
}

// hotDropLocked forgets e's cached metadata, and that it was read. Every
// change of e's complete version (replacement, eviction, deletion) goes
// through dropLocked, which calls this.
func (s *Store) hotDropLocked(e *entry) {
	if e.hot <= 0 {
		e.hot = 0
		return
	}
	i := e.hot - 1
	s.hotBytes -= s.hot[i].cost
	s.hotBodyDropLocked(&s.hot[i])
	s.hot[i] = hotSlot{}
	s.hotFree = append(s.hotFree, i)
	e.hot = 0
}

// hotEvictLocked makes the hot set fit its budget, sparing keep.
func (s *Store) hotEvictLocked(keep *entry) {
	// Two turns of the hand clear every reference bit; a third finds
	// nothing left to take only if keep is all there is.
	for turns := 3 * len(s.hot); s.hotBytes > s.hotMax && turns > 0; turns-- {
		if s.hand >= len(s.hot) {
			s.hand = 0
		}
		h := &s.hot[s.hand]
		s.hand++
		switch {
		case h.e == nil || h.e == keep:
		case h.ref:
			h.ref = false
		default:
			e := h.e
			s.hotDropLocked(e)
			e.hot = hotSeen // the next read brings it back
		}
	}
}

// metaCost estimates the heap bytes a decoded Meta holds in the hot set:
// its slot, the maps (Go's maps take groups of 8 slots at 7/8 load, plus a header), the
// value slices and the strings, each rounded up to an allocation size.
func metaCost(m Meta) int64 {
	n := int64(128) // the slot (a hotSlot, 120 bytes) and its share of free list and growth
	if len(m.Header) > 0 {
		n += mapCost(len(m.Header), 16+24) // string → []string
		for k, vs := range m.Header {
			n += allocSize(len(k)) + allocSize(16*len(vs))
			for _, v := range vs {
				n += allocSize(len(v))
			}
		}
	}
	if len(m.Extra) > 0 {
		n += mapCost(len(m.Extra), 16+16)
		for k, v := range m.Extra {
			n += allocSize(len(k)) + allocSize(len(v))
		}
	}
	return n
}

// mapCost estimates a map of n entries of slotBytes each.
func mapCost(n int, slotBytes int) int64 {
	groups := (n*8/7 + 7) / 8
	if groups < 1 {
		groups = 1
	}
	return 48 + allocSize(groups*(8+8*slotBytes))
}

// allocSize rounds n up roughly as the allocator's size classes do (to 8
// bytes up to 64, to 16 up to 256, then to 1/8 of the power of two).
func allocSize(n int) int64 {
	switch {
	case n == 0:
		return 0
	case n <= 64:
		return int64((n + 7) &^ 7)
	case n <= 256:
		return int64((n + 15) &^ 15)
	}
	step := 1
	for step*16 <= n {
		step <<= 1
	}
	return int64((n + step - 1) / step * step)
}
