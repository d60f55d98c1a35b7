package diskcache

import (
	"slices"
	"time"
)

// Stats are counters and gauges of a Store.
type Stats struct {
	Entries      int   // complete objects
	Bytes        int64 // their bodies and metadata files, in whole blocks
	Writing      int   // writes in progress
	WritingBytes int64 // held by them: written so far, in whole blocks
	// UnlinkedBytes are what versions removed (replaced, deleted,
	// evicted, aborted) still take, in whole blocks: their files until
	// they are unlinked (a moment after the removal), and the bodies of
	// those Readers had open until the Readers close. They count against
	// MaxBytes meanwhile. UnlinkedVersions is how many.
	UnlinkedBytes    int64
	UnlinkedVersions int
	MaxBytes         int64
	// DiskLimitBytes, when not 0, is the bound in effect instead of
	// MaxBytes because the file system was found full below it (see the
	// package docs, "A full disk").
	DiskLimitBytes int64
	MaxEntries     int   // in effect: Options.MaxEntries or its default
	Readers        int64 // open Readers
	Hits           int64 // Gets that returned a Reader
	Misses         int64
	Evictions      int64 // complete objects evicted for room (not replaced or deleted)
	EvictedBytes   int64
	Commits        int64
	Aborts         int64
	Corrupt        int64 // damaged objects discarded, at Open or on Get
	// DiskWriteErrors counts writes of bodies and commits that the file
	// system failed (ENOSPC, EDQUOT, EIO...); Relays the objects that
	// were therefore not stored but relayed whole to their Readers.
	DiskWriteErrors int64
	Relays          int64
	// The bounds in effect, defaults applied (see Options), and the unit
	// each file is charged in (see the package docs, "Bounds and
	// eviction").
	MaxObjectBytes  int64
	MaxWritingBytes int64
	BlockBytes      int64
	// MetaReads counts metadata files read by Get and Peek: those of
	// objects whose metadata was not in the hot set.
	MetaReads int64
	// HotEntries objects have their metadata in memory, an estimated
	// HotBytes of heap (within Options.HotMetaBytes).
	HotEntries int
	HotBytes   int64
	// HotBodies of them also have their body in memory, HotBodyBytes in
	// all (within Options.HotBodyBytes).
	HotBodies    int
	HotBodyBytes int64
	// IndexBytes is the memory of the index (its entries' chunks and its
	// table; see the package docs, "Memory"): about 90 bytes per object.
	IndexBytes int64
}

// Stats returns a snapshot of the store's counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	st := Stats{
		Entries: s.count, Bytes: s.bytes, Writing: s.writing, WritingBytes: s.pending,
		UnlinkedBytes: s.orphaned, UnlinkedVersions: len(s.orphans),
		MaxBytes: s.opt.MaxBytes, MaxEntries: s.maxEntries,
		DiskLimitBytes: s.diskLimit,
		MaxObjectBytes: s.maxObject, MaxWritingBytes: s.maxWriting, BlockBytes: s.block,
		HotEntries: len(s.hot) - len(s.hotFree), HotBytes: s.hotBytes,
		HotBodies: s.hotBodies, HotBodyBytes: s.hotBody,
		IndexBytes: s.idx.bytes(),
	}
	s.mu.Unlock()
	st.MetaReads = s.metaReads.Load()
	st.DiskWriteErrors, st.Relays = s.diskWriteErrors.Load(), s.relays.Load()
	st.Readers = s.readers.Load()
	st.Hits, st.Misses = s.hits.Load(), s.misses.Load()
	st.Evictions, st.EvictedBytes = s.evictions.Load(), s.evictedBytes.Load()
	st.Commits, st.Aborts, st.Corrupt = s.commits.Load(), s.aborts.Load(), s.corrupt.Load()
	return st
}

// Info describes one key for Range.
type Info struct {
	Key string
	// Size is the complete version's body length, -1 if there is none.
	Size int64
	// LastUsed is the complete version's last Get or Commit (after a
	// restart: its metadata file's modification time).
	LastUsed time.Time
	// Writing: a new version is being written; Written bytes so far, of
	// WriteSize (-1 while unknown).
	Writing   bool
	Written   int64
	WriteSize int64
}

// Recent returns up to n complete objects, most recently used first. It
// holds the store's lock for those n only, unlike Range, which copies the
// whole index: use it for "what is hot" views of large caches.
func (s *Store) Recent(n int) []Info {
	var b infoBatch
	s.mu.Lock()
	for e := s.entryAt(s.head); e != nil && len(b.infos) < n; e = s.entryAt(e.next) {
		b.addLocked(s, e)
	}
	s.mu.Unlock()
	return b.resolve(s)
}

// Range calls fn for every key, most recently used complete objects first
// and keys that only have a write in progress last, until fn returns false.
// It iterates over a snapshot taken at the start (memory proportional to
// the number of keys), so fn may call the Store. The keys of objects whose
// name is not their key (any key but 40 lowercase hex digits) are read
// from their metadata. Use Peek for a key's full metadata.
func (s *Store) Range(fn func(Info) bool) {
	var b infoBatch
	s.mu.Lock()
	for e := s.entryAt(s.head); e != nil; e = s.entryAt(e.next) {
		b.addLocked(s, e)
	}
	b.addWritersLocked(s)
	s.mu.Unlock()
	for _, in := range b.resolve(s) {
		if !fn(in) {
			return
		}
	}
}

// infoBatch collects Infos under s.mu; resolve fills in, without the
// lock, the keys that the index does not hold.
type infoBatch struct {
	infos []Info
	refs  []keyRef
}

// keyRef is where to read the key of infos[i].
type keyRef struct {
	i    int
	name objName
	gen  uint64
	path string
}

func (b *infoBatch) addLocked(s *Store, e *entry) {
	in := Info{Size: e.size, LastUsed: time.Unix(0, e.used)}
	name := e.objName()
	if w := s.writerOf(name); w != nil {
		in.Key = w.key
		w.infoOf(&in)
	} else if k, ok := name.key(); ok {
		in.Key = k
	} else {
		b.refs = append(b.refs, keyRef{len(b.infos), name, e.gen, s.entryPath(e)})
	}
	b.infos = append(b.infos, in)
}

// addWritersLocked adds the keys that only have a write in progress.
func (b *infoBatch) addWritersLocked(s *Store) {
	for name, w := range s.writers {
		if s.idx.lookup(name) == nil {
			in := Info{Key: w.key, Size: -1}
			w.infoOf(&in)
			b.infos = append(b.infos, in)
		}
	}
}

// resolve reads the missing keys and returns the Infos, leaving out
// objects removed meanwhile.
func (b *infoBatch) resolve(s *Store) []Info {
	if len(b.refs) == 0 {
		return b.infos
	}
	for _, r := range b.refs {
		if m, err := s.peekVersion(r.name, r.gen, r.path); err == nil {
			b.infos[r.i].Key = m.Key
		}
	}
	return slices.DeleteFunc(b.infos, func(in Info) bool { return in.Key == "" })
}

func (w *Writer) infoOf(in *Info) {
	w.mu.Lock()
	in.Writing, in.Written, in.WriteSize = true, w.written, w.meta.Size
	w.mu.Unlock()
}
