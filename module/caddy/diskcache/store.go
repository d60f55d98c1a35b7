package diskcache

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Store.
type Options struct {
	// Dir is the cache directory; Open creates it. The Store owns the
	// names FORMAT, lock, index, lru (format 1's), objects/ and tmp/ in it
	// and touches nothing else.
	Dir string
	// MaxBytes bounds the disk space of the stored objects: their files
	// (inline, or body and metadata), plus the bodies of writes in
	// progress as far as written, each file charged in whole file-system
	// blocks, at least one (see the package docs, "Bounds and eviction").
	// Least recently used complete objects are evicted to stay within it.
	// Required; with less than one block (4 KiB) nothing can be stored.
	MaxBytes int64
	// MaxEntries bounds the number of complete objects, and with it the
	// index's memory (about 90 bytes per object; see the package docs).
	// Default (0): MaxBytes / 4 KiB (DefaultBytesPerEntry), the number of
	// objects that fit if each takes its minimum of one 4 KiB block, so
	// the default never evicts before the byte bound would and keeps the
	// index within about 2% of MaxBytes (some 20 MiB for a 1 GiB cache).
	MaxEntries int
	// MaxObjectBytes bounds one object's body: a larger declared size fails
	// Create and a longer body fails its Write with ErrTooLarge. Default
	// (zero or negative): MaxBytes / 8 (DefaultMaxObjectFraction), so that
	// one object, declared or not, never displaces more than an eighth of
	// the cache. Upper limit MaxBytes.
	MaxObjectBytes int64
	// MaxWritingBytes bounds the space held by writes in progress (their
	// bodies as far as written, in whole blocks). A Write that would exceed
	// it fails with ErrFull (aborting its object), and so does a Create
	// when the space already held leaves no room for its declared size (or
	// one block), or when there are as many writes in progress as it has
	// blocks. Writes in progress never evict complete objects beyond it,
	// so however many downloads are running, and however slowly, the
	// complete objects keep MaxBytes - MaxWritingBytes. Default (zero or
	// negative): MaxBytes / 4 (DefaultMaxWritingFraction). It is raised to
	// MaxObjectBytes (in whole blocks) if smaller, so that an object of
	// the maximum size can be stored, and lowered to MaxBytes if larger.
	MaxWritingBytes int64
	// HotMetaBytes bounds the decoded metadata kept in memory for recently
	// read objects (estimated heap bytes; see the package docs, "Memory").
	// A Get of an object in this hot set reads no metadata file. Default
	// (0) 16 MiB; negative: none, every Get reads the metadata file.
	HotMetaBytes int64
	// HotBodyBytes bounds the bodies kept in memory for objects in the hot
	// set that are at most HotBodyMaxSize bytes long: a Get of one of them
	// opens no file at all (see the package docs, "Memory"). Default
	// (zero): DefaultHotBodyBytes; negative: none.
	HotBodyBytes int64
	// NoSync skips fsync. A process crash still never exposes a partial
	// object, but after a power failure a committed body may have lost
	// data. For tests and for caches on tmpfs.
	NoSync bool
	// Logger receives warnings (discarded corrupt files, I/O errors) and
	// debug events (evictions, aborts). Nil discards.
	Logger *slog.Logger
	// Now replaces time.Now (tests).
	Now func() time.Time
}

// Store is an on-disk, size-bounded LRU cache of HTTP objects. Its methods
// are safe for concurrent use. See the package docs.
type Store struct {
	dir        string
	opt        Options
	maxObject  int64 // effective bounds (see Options)
	maxWriting int64
	maxWriters int // writes in progress: maxWriting / block
	maxEntries int
	block      int64 // each file is charged in units of block (blockSize)
	log        *slog.Logger
	now        func() time.Time
	lock       *os.File
	gen        atomic.Uint64 // last generation handed out
	keyLocks   [64]sync.Mutex

	// hook, when set by tests, is called at named points of commits,
	// updates and removals (to simulate crashes there).
	hook func(point string)
	// readHook, when set by tests, is called by Get after it read a
	// metadata file and before it caches what it read.
	readHook func()
	// wrapBody, when set by tests, wraps the file of every new body (to
	// fail its writes); freeBytes reads the file system's free space
	// (diskfull.go; tests replace it).
	wrapBody  func(*os.File) bodyFile
	freeBytes func() (int64, bool)

	mu         sync.Mutex
	closed     bool
	idx        index               // complete objects (index.go)
	writers    map[objName]*Writer // writes in progress
	head, tail int32               // LRU list of the entries (slots); head = most recent; -1: none
	count      int                 // entries in the list
	bytes      int64               // charged bytes of complete versions (files in whole blocks)
	pending    int64               // bytes held by writes in progress (written so far, in whole blocks)
	writing    int                 // writes in progress
	// Versions Readers hold open, and versions being unlinked (held.go):
	// held is the part of bytes that complete versions with Readers take
	// (eviction cannot free it), orphaned what versions out of the index
	// still take (not unlinked yet, or open), each in orphans; unlinking
	// counts those not unlinked yet, and roomFreed, when not nil, is
	// closed by the next unlink (writes waiting for room, see reserve).
	held      int64
	orphaned  int64
	orphans   map[uint64]*orphan // by generation
	unlinking int
	roomFreed chan struct{}
	ops       sync.WaitGroup

	// The hot set (hot.go): decoded metadata of recently read versions.
	hot      []hotSlot
	hotFree  []int32 // free slots in hot
	hand     int     // CLOCK hand
	hotBytes int64   // estimated bytes held
	hotMax   int64
	// Bodies of small hot versions (hot.go), within hotBodyMax.
	hotBody    int64
	hotBodies  int
	hotBodyMax int64
	bodyHand   int
	// metaEpoch changes whenever UpdateMeta replaces a metadata file, so a
	// Get that read the file before cannot cache what it read.
	metaEpoch uint64
	// diskLimit, when not 0, is the bound the file system allows, below
	// MaxBytes (diskfull.go), as read at diskCheckedAt.
	diskLimit     int64
	diskCheckedAt time.Time

	hits, misses, evictions, evictedBytes atomic.Int64
	commits, aborts, corrupt, readers     atomic.Int64
	metaReads                             atomic.Int64
	diskWriteErrors, relays               atomic.Int64
}

// writerOf returns the write in progress of name, if any (without
// hashing name when there is none, the common case of a hit).
func (s *Store) writerOf(name objName) *Writer {
	if len(s.writers) == 0 {
		return nil
	}
	return s.writers[name]
}

// accounted is what e's complete version is charged: its file in whole
// blocks (inline), or its body and its metadata file, each in whole
// blocks.
func (s *Store) accounted(e *entry) int64 {
	if e.inline {
		return s.blocks(e.size + int64(e.metaLen))
	}
	return s.blocks(e.size) + s.blocks(int64(e.metaLen))
}

// blocks is what a file of n bytes is charged: n rounded up to whole
// blocks, and one block if empty. An empty file takes no data block on
// most file systems, but an inode and a directory entry; charging it a
// block keeps the count an upper bound and bounds the number of files.
func (s *Store) blocks(n int64) int64 {
	if n <= s.block {
		return s.block
	}
	return (n + s.block - 1) / s.block * s.block
}

// Open opens (creating if needed) the cache in o.Dir. It removes leftovers
// of writes that never committed (everything in tmp/, versions without a
// valid metadata file, metadata without a matching body, superseded
// versions), rebuilds the index by scanning objects/, and evicts down to
// the bounds if they shrank. The LRU order is the one saved by the last
// Close; after a crash, newest generation first (two-file objects: their
// metadata files' modification times). Only one Store may have a directory open at a time (ErrLocked).
func Open(o Options) (*Store, error) {
	if o.Dir == "" {
		return nil, errors.New("diskcache: Options.Dir is required")
	}
	if o.MaxBytes <= 0 {
		return nil, fmt.Errorf("diskcache: Options.MaxBytes must be positive, got %d", o.MaxBytes)
	}
	if o.MaxEntries < 0 {
		return nil, fmt.Errorf("diskcache: Options.MaxEntries must not be negative, got %d", o.MaxEntries)
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, fmt.Errorf("diskcache: %w", err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, fmt.Errorf("diskcache: %w", err)
	}
	lock, err := lockDir(filepath.Join(dir, lockFile))
	if err != nil {
		return nil, err
	}
	s := &Store{
		dir: dir, opt: o, log: o.Logger, now: o.Now, lock: lock,
		block: blockSize(dir), idx: newIndex(), writers: make(map[objName]*Writer),
		head: -1, tail: -1,
	}
	// The index's arrays are outside the Go heap: give them back when the
	// Store is unreachable (every Reader holds it).
	runtime.AddCleanup(s, (*indexArrays).release, s.idx.indexArrays)
	s.setBounds()
	switch s.hotMax = o.HotMetaBytes; {
	case s.hotMax == 0:
		s.hotMax = DefaultHotMetaBytes
	case s.hotMax < 0:
		s.hotMax = 0
	}
	switch s.hotBodyMax = o.HotBodyBytes; {
	case s.hotBodyMax == 0:
		s.hotBodyMax = DefaultHotBodyBytes
	case s.hotBodyMax < 0:
		s.hotBodyMax = 0
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
	s.freeBytes = func() (int64, bool) { return statfsFree(dir) }
	start := time.Now()
	if err := s.load(); err != nil {
		lock.Close()
		return nil, err
	}
	s.log.Info("diskcache: opened", "dir", dir, "entries", s.count, "bytes", s.bytes,
		"max_bytes", o.MaxBytes, "took", time.Since(start))
	return s, nil
}

// Defaults of the bounds in Options.
const (
	// DefaultMaxObjectFraction: MaxObjectBytes defaults to MaxBytes divided
	// by this.
	DefaultMaxObjectFraction = 8
	// DefaultMaxWritingFraction: MaxWritingBytes defaults to MaxBytes
	// divided by this.
	DefaultMaxWritingFraction = 4
	// DefaultBytesPerEntry: MaxEntries defaults to MaxBytes divided by
	// this, one 4 KiB block (a small object's one file).
	DefaultBytesPerEntry = 4 << 10
)

// setBounds derives the effective bounds from s.opt (see Options).
func (s *Store) setBounds() {
	o := s.opt
	s.maxObject = o.MaxObjectBytes
	if s.maxObject <= 0 {
		s.maxObject = max(o.MaxBytes/DefaultMaxObjectFraction, 1)
	}
	s.maxObject = min(s.maxObject, o.MaxBytes)
	s.maxWriting = o.MaxWritingBytes
	if s.maxWriting <= 0 {
		s.maxWriting = o.MaxBytes / DefaultMaxWritingFraction
	}
	s.maxWriting = min(max(s.maxWriting, s.blocks(s.maxObject)), o.MaxBytes)
	s.maxWriters = int(min(max(s.maxWriting/s.block, 1), int64(maxInt)))
	s.maxEntries = o.MaxEntries
	if s.maxEntries == 0 {
		s.maxEntries = int(min(max(o.MaxBytes/DefaultBytesPerEntry, 1), int64(maxInt)))
	}
}

const maxInt = int(^uint(0) >> 1)

// Bounds of the unit files are charged in (blockSize).
const (
	minBlock = 4 << 10
	maxBlock = 64 << 10
)
