package diskcache

import (
	"bufio"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Options configure a Store.
type Options struct {
	// Dir is the cache directory; Open creates it. The Store owns the
	// names FORMAT, lock, lru, objects/ and tmp/ in it and touches nothing
	// else.
	Dir string
	// MaxBytes bounds the disk space of the stored objects: complete
	// bodies plus their metadata files, plus the bodies of writes in
	// progress as far as written, each file charged in whole file-system
	// blocks, at least one (see the package docs, "Bounds and eviction").
	// Least recently used complete objects are evicted to stay within it.
	// Required; with less than two blocks (8 KiB) nothing can be stored.
	MaxBytes int64
	// MaxEntries bounds the number of complete objects, and with it the
	// index's memory (about 165 bytes per object; see the package docs).
	// Default (0): MaxBytes / 8 KiB (DefaultBytesPerEntry), the number of
	// objects that fit if each takes its minimum of two 4 KiB blocks, so
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

	mu         sync.Mutex
	closed     bool
	index      map[string]*entry
	head, tail *entry // LRU list of entries with a complete version; head = most recent
	count      int    // entries in the list
	bytes      int64  // charged bytes of complete versions (files in whole blocks)
	pending    int64  // bytes held by writes in progress (written so far, in whole blocks)
	writing    int    // writes in progress
	ops        sync.WaitGroup

	// The hot set (hot.go): decoded metadata of recently read versions.
	hot      []hotSlot
	hotFree  []int32 // free slots in hot
	hand     int     // CLOCK hand
	hotBytes int64   // estimated bytes held
	hotMax   int64
	// metaEpoch changes whenever UpdateMeta replaces a metadata file, so a
	// Get that read the file before cannot cache what it read.
	metaEpoch uint64

	hits, misses, evictions, evictedBytes atomic.Int64
	commits, aborts, corrupt, readers     atomic.Int64
	metaReads                             atomic.Int64
}

// entry is one key in the index: its complete version (gen != 0), which is
// then in the LRU list, and/or a write in progress (w != nil). It is the
// per-object memory cost of the Store (see TestIndexMemory).
type entry struct {
	prev, next *entry
	key        string
	w          *Writer
	gen        uint64 // complete version's generation; 0 = none
	size       int64  // its body length
	used       int64  // last Get or Commit, Unix nanoseconds
	metaLen    int32  // its metadata file length
	hot        int32  // 1 + its slot in the hot set; 0 or hotSeen: metadata not cached
}

// accounted is what e's complete version is charged: its body and its
// metadata file, each in whole blocks.
func (s *Store) accounted(e *entry) int64 {
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

// version names the files of one complete version, for removal.
type version struct {
	key string
	gen uint64
}

// Open opens (creating if needed) the cache in o.Dir. It removes leftovers
// of writes that never committed (everything in tmp/, versions without a
// valid metadata file, metadata without a matching body, superseded
// versions), rebuilds the index by scanning objects/, and evicts down to
// the bounds if they shrank. The LRU order is the one saved by the last
// Close; after a crash it falls back to the metadata files' modification
// times. Only one Store may have a directory open at a time (ErrLocked).
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
		block: blockSize(dir), index: make(map[string]*entry),
	}
	s.setBounds()
	switch s.hotMax = o.HotMetaBytes; {
	case s.hotMax == 0:
		s.hotMax = DefaultHotMetaBytes
	case s.hotMax < 0:
		s.hotMax = 0
	}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	if s.now == nil {
		s.now = time.Now
	}
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
	// this, two 4 KiB blocks (a body and a metadata file).
	DefaultBytesPerEntry = 8 << 10
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

// load prepares the directory and rebuilds the index.
func (s *Store) load() error {
	switch b, err := os.ReadFile(filepath.Join(s.dir, formatFile)); {
	case err == nil && string(b) != formatContent:
		return fmt.Errorf("%w: %s/%s says %q, want %q", ErrFormat, s.dir, formatFile, b, formatContent)
	case err != nil && !errors.Is(err, fs.ErrNotExist):
		return fmt.Errorf("diskcache: %w", err)
	}
	// Nothing in tmp/ can be live: only a Store holding the lock writes there.
	if err := os.RemoveAll(filepath.Join(s.dir, tmpDir)); err != nil {
		return fmt.Errorf("diskcache: clearing leftovers: %w", err)
	}
	if err := os.Mkdir(filepath.Join(s.dir, tmpDir), 0o700); err != nil {
		return fmt.Errorf("diskcache: %w", err)
	}
	if _, err := os.Stat(filepath.Join(s.dir, formatFile)); err != nil {
		if err := s.writeFileAtomic(filepath.Join(s.dir, formatFile), []byte(formatContent)); err != nil {
			return fmt.Errorf("diskcache: writing %s: %w", formatFile, err)
		}
	}
	for i := range 256 {
		d := filepath.Join(s.dir, objectsDir, fmt.Sprintf("%02x", i))
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("diskcache: %w", err)
		}
	}
	if err := s.syncDir(s.dir); err != nil {
		return fmt.Errorf("diskcache: %w", err)
	}
	rank := s.readLRU()
	found, maxGen, err := s.scan()
	if err != nil {
		return err
	}
	// Most recently used first: ranked names in saved order, then the rest
	// by modification time, newest first.
	slices.SortFunc(found, func(a, b scanned) int {
		ra, oka := rank[a.name]
		rb, okb := rank[b.name]
		switch {
		case oka && okb:
			return cmp.Compare(ra, rb)
		case oka != okb:
			if oka {
				return -1
			}
			return 1
		}
		return cmp.Compare(b.mtime, a.mtime)
	})
	for _, f := range found {
		e := &entry{key: f.key, gen: f.gen, size: f.size, metaLen: int32(f.metaLen), used: f.mtime}
		s.index[f.key] = e
		s.pushBack(e)
		s.bytes += s.accounted(e)
	}
	s.gen.Store(max(maxGen, uint64(s.now().UnixNano())))
	victims, _ := s.makeRoomLocked(0, nil)
	s.removeVersions(victims)
	return nil
}

// readLRU reads and removes the LRU order saved by Close: name → rank.
func (s *Store) readLRU() map[string]int {
	path := filepath.Join(s.dir, lruFile)
	f, err := os.Open(path)
	if err != nil {
		return nil
	}
	defer os.Remove(path) // stale after this run's first change
	defer f.Close()
	sc := bufio.NewScanner(f)
	if !sc.Scan() || sc.Text() != lruHeader {
		return nil
	}
	rank := make(map[string]int)
	for sc.Scan() {
		if name := sc.Text(); validName(name) {
			if _, dup := rank[name]; !dup {
				rank[name] = len(rank)
			}
		}
	}
	return rank
}

// writeLRU saves the LRU order for the next Open.
func (s *Store) writeLRU() error {
	s.mu.Lock()
	names := make([]string, 0, s.count)
	for e := s.head; e != nil; e = e.next {
		names = append(names, fileName(e.key))
	}
	s.mu.Unlock()
	var b strings.Builder
	b.Grow(len(names) * 42)
	b.WriteString(lruHeader + "\n")
	for _, n := range names {
		b.WriteString(n)
		b.WriteByte('\n')
	}
	return s.writeFileAtomic(filepath.Join(s.dir, lruFile), []byte(b.String()))
}

// scanned is a valid complete version found by scan.
type scanned struct {
	key, name string
	gen       uint64
	size      int64
	metaLen   int64
	mtime     int64
}

// scan walks objects/, keeping the newest valid version of every name and
// removing everything else. Shards are scanned in parallel.
func (s *Store) scan() ([]scanned, uint64, error) {
	objDir := filepath.Join(s.dir, objectsDir)
	des, err := os.ReadDir(objDir)
	if err != nil {
		return nil, 0, fmt.Errorf("diskcache: %w", err)
	}
	var shards []string
	for _, de := range des {
		if de.IsDir() && len(de.Name()) == 2 && isLowerHex(de.Name()) {
			shards = append(shards, de.Name())
		} else {
			s.discard(filepath.Join(objDir, de.Name()), "unexpected file", false)
		}
	}
	type result struct {
		found  []scanned
		maxGen uint64
		err    error
	}
	results := make([]result, len(shards))
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(8, len(shards)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(shards) {
					return
				}
				r := &results[i]
				r.found, r.maxGen, r.err = s.scanShard(shards[i])
			}
		})
	}
	wg.Wait()
	var all []scanned
	var maxGen uint64
	for _, r := range results {
		if r.err != nil {
			return nil, 0, r.err
		}
		all = append(all, r.found...)
		maxGen = max(maxGen, r.maxGen)
	}
	return all, maxGen, nil
}

// scanShard scans one objects/xx directory.
func (s *Store) scanShard(shard string) ([]scanned, uint64, error) {
	dir := filepath.Join(s.dir, objectsDir, shard)
	des, err := os.ReadDir(dir)
	if err != nil {
		return nil, 0, fmt.Errorf("diskcache: %w", err)
	}
	type file struct {
		gen   uint64
		size  int64
		mtime int64
	}
	type group struct {
		metas  []file
		bodies map[uint64]int64
	}
	groups := make(map[string]*group)
	var maxGen uint64
	for _, de := range des {
		path := filepath.Join(dir, de.Name())
		name, gen, isMeta, ok := parseObjectFile(de.Name())
		if !ok || shardOf(name) != shard || !de.Type().IsRegular() {
			s.discard(path, "unexpected file", false)
			continue
		}
		maxGen = max(maxGen, gen)
		info, err := de.Info()
		if err != nil {
			if errors.Is(err, fs.ErrNotExist) {
				continue
			}
			return nil, 0, fmt.Errorf("diskcache: %w", err)
		}
		g := groups[name]
		if g == nil {
			g = &group{bodies: make(map[uint64]int64, 1)}
			groups[name] = g
		}
		if isMeta {
			g.metas = append(g.metas, file{gen, info.Size(), info.ModTime().UnixNano()})
		} else {
			g.bodies[gen] = info.Size()
		}
	}
	var found []scanned
	for name, g := range groups {
		slices.SortFunc(g.metas, func(a, b file) int { return cmp.Compare(b.gen, a.gen) })
		var chosen uint64
		for _, mf := range g.metas {
			path := s.metaPath(name, mf.gen)
			if chosen != 0 {
				s.discard(path, "superseded version", false)
				continue
			}
			size, ok := g.bodies[mf.gen]
			if !ok {
				s.discard(path, "metadata without body", true)
				continue
			}
			m, gen, err := readMetaFile(path)
			switch {
			case errors.Is(err, fs.ErrNotExist):
				continue
			case err == nil && (gen != mf.gen || fileName(m.Key) != name):
				err = fmt.Errorf("%w: holds key %q generation %x", ErrCorrupt, m.Key, gen)
			case err == nil && m.Size != size:
				err = fmt.Errorf("%w: size %d, body has %d bytes", ErrCorrupt, m.Size, size)
			}
			if err != nil {
				s.log.Warn("diskcache: discarding object", "file", path, "err", err)
				s.discard(path, "", true)
				continue
			}
			chosen = mf.gen
			found = append(found, scanned{key: m.Key, name: name, gen: gen, size: size, metaLen: mf.size, mtime: mf.mtime})
		}
		for gen := range g.bodies {
			if gen != chosen {
				s.discard(s.bodyPath(name, gen), "body without valid metadata", false)
			}
		}
	}
	return found, maxGen, nil
}

// discard removes a file or directory found by scan.
func (s *Store) discard(path, why string, corrupt bool) {
	if why != "" {
		s.log.Info("diskcache: removing leftover", "file", path, "reason", why)
	}
	if corrupt {
		s.corrupt.Add(1)
	}
	if err := os.RemoveAll(path); err != nil {
		s.log.Warn("diskcache: removing leftover failed", "file", path, "err", err)
	}
}

// readMetaFile reads and decodes a metadata file.
func readMetaFile(path string) (Meta, uint64, error) {
	f, err := openRead(path)
	if err != nil {
		return Meta{}, 0, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, metaHeaderLen+MaxMetaSize+1))
	if err != nil {
		return Meta{}, 0, err
	}
	return decodeMeta(b)
}

// Close aborts the writes in progress (their readers get an *AbortError
// wrapping ErrClosed), waits for running operations, saves the LRU order
// and releases the directory. Readers of complete objects keep working
// until they are closed. Close is idempotent; a new Store may then Open the
// same directory.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var ws []*Writer
	for _, e := range s.index {
		if e.w != nil {
			ws = append(ws, e.w)
			s.detachLocked(e.w, ErrClosed)
		}
	}
	s.mu.Unlock()
	for _, w := range ws {
		w.Abort(ErrClosed)
	}
	s.ops.Wait()
	err := s.writeLRU()
	if cerr := s.lock.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("diskcache: close: %w", err)
	}
	return nil
}

// beginOp registers a running operation unless the store is closed.
func (s *Store) beginOp() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.ops.Add(1)
	return true
}

func (s *Store) at(point string) {
	if s.hook != nil {
		s.hook(point)
	}
}

func (s *Store) keyLock(name string) *sync.Mutex {
	h := uint32(2166136261)
	for i := 0; i < len(name); i++ {
		h = (h ^ uint32(name[i])) * 16777619
	}
	return &s.keyLocks[h%uint32(len(s.keyLocks))]
}

func checkKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: length %d", ErrInvalidKey, len(key))
	}
	return nil
}

// Get returns a reader of the object stored under key: the version being
// written if there is one (see Reader), else the complete one. It marks the
// object recently used. Misses (and I/O errors, which are logged) return
// false. Blocking reads of an in-progress object wait without a deadline;
// use GetContext to tie them to a request.
func (s *Store) Get(key string) (*Reader, bool) {
	return s.GetContext(context.Background(), key)
}

// GetContext is Get with a context that ends the Reader's blocking reads
// (Read, ReadAt, WriteTo, Wait): once ctx is done they return ctx.Err().
// The context is not used after GetContext returns for anything else; the
// Reader must still be closed.
func (s *Store) GetContext(ctx context.Context, key string) (*Reader, bool) {
	if checkKey(key) != nil {
		s.misses.Add(1)
		return nil, false
	}
	s.mu.Lock() // beginOp and the first look-up under one lock
	if s.closed {
		s.mu.Unlock()
		s.misses.Add(1)
		return nil, false
	}
	s.ops.Add(1)
	defer s.ops.Done()
	for attempt := range 4 { // retries cover a version replaced or removed meanwhile
		if attempt > 0 {
			s.mu.Lock()
		}
		e := s.index[key]
		if e == nil {
			s.mu.Unlock()
			break
		}
		if w := e.w; w != nil {
			s.mu.Unlock()
			if r, err := w.newReader(ctx); err == nil {
				s.hits.Add(1)
				return r, true
			}
			continue
		}
		gen := e.gen
		e.used = s.now().UnixNano()
		s.moveToFront(e)
		m, hot := s.hotGetLocked(e)
		epoch := s.metaEpoch
		s.mu.Unlock()
		var r *Reader
		var err error
		if hot {
			r, err = s.openHot(ctx, key, gen, m)
		} else {
			r, err = s.openVersion(ctx, key, gen, e, epoch)
		}
		if err == nil {
			s.hits.Add(1)
			return r, true
		}
		if !errors.Is(err, fs.ErrNotExist) {
			s.log.Warn("diskcache: dropping unreadable object", "key", key, "err", err)
			s.corrupt.Add(1)
		}
		// Gone (replaced, evicted, deleted, or removed behind our back) or
		// broken: if the index still names this version, forget it.
		s.mu.Lock()
		var vs []version
		if e := s.index[key]; e != nil && e.gen == gen {
			vs = append(vs, s.dropLocked(e))
		}
		s.mu.Unlock()
		s.removeVersions(vs)
	}
	s.misses.Add(1)
	return nil, false
}

// openHot opens the body of a complete version whose metadata is in the hot
// set: no metadata file, no stat. The metadata is what this Store wrote or
// checked itself, and the Store owns the directory.
func (s *Store) openHot(ctx context.Context, key string, gen uint64, m Meta) (*Reader, error) {
	f, err := openRead(s.bodyPath(fileName(key), gen))
	if err != nil {
		return nil, err
	}
	return s.newReader(ctx, key, f, nil, m), nil
}

// openVersion opens a complete version: body first, so that the metadata
// read after it describes a body we hold. The metadata is offered to the
// hot set if e still holds that version and no UpdateMeta replaced a
// metadata file since epoch.
func (s *Store) openVersion(ctx context.Context, key string, gen uint64, e *entry, epoch uint64) (*Reader, error) {
	name := fileName(key)
	f, err := openRead(s.bodyPath(name, gen))
	if err != nil {
		return nil, err
	}
	s.metaReads.Add(1)
	m, mgen, err := readMetaFile(s.metaPath(name, gen))
	if err == nil && (m.Key != key || mgen != gen) {
		err = fmt.Errorf("%w: %s holds key %q generation %x", ErrCorrupt, s.metaPath(name, gen), m.Key, mgen)
	}
	if err == nil {
		var fi os.FileInfo
		if fi, err = f.Stat(); err == nil && fi.Size() != m.Size {
			err = fmt.Errorf("%w: %s has %d bytes, metadata says %d", ErrCorrupt, f.Name(), fi.Size(), m.Size)
		}
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	if s.readHook != nil {
		s.readHook()
	}
	m.Key = e.key // share the index's copy
	s.mu.Lock()
	if e.hot <= 0 && e.gen == gen && s.index[key] == e && s.metaEpoch == epoch {
		s.hotAdmitLocked(e, m)
	}
	s.mu.Unlock()
	return s.newReader(ctx, key, f, nil, m), nil
}

// Peek returns the metadata Get would return (of the write in progress, if
// any), without marking the object used or counting a hit or miss.
func (s *Store) Peek(key string) (Meta, bool) {
	if checkKey(key) != nil || !s.beginOp() {
		return Meta{}, false
	}
	defer s.ops.Done()
	s.mu.Lock()
	e := s.index[key]
	if e == nil {
		s.mu.Unlock()
		return Meta{}, false
	}
	if w := e.w; w != nil {
		s.mu.Unlock()
		return w.currentMeta(), true
	}
	if e.hot > 0 { // not hotGetLocked: a Peek is no use
		m := s.hot[e.hot-1].m
		s.mu.Unlock()
		return m, true
	}
	gen := e.gen
	s.mu.Unlock()
	s.metaReads.Add(1)
	m, mgen, err := readMetaFile(s.metaPath(fileName(key), gen))
	if err != nil || m.Key != key || mgen != gen {
		return Meta{}, false
	}
	return m, true
}

// UpdateMeta replaces the metadata of the complete version of key (for
// example a new Expires after a revalidation) without touching the body.
// m.Size must be -1 or the body's length. The replacement is atomic and
// durable: after a crash the object has the old or the new metadata. A
// write in progress for the key is not affected; without a complete
// version UpdateMeta returns ErrNotFound.
func (s *Store) UpdateMeta(key string, m Meta) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if m.Key != "" && m.Key != key {
		return fmt.Errorf("%w: Meta.Key %q for key %q", ErrInvalidMeta, m.Key, key)
	}
	if !s.beginOp() {
		return ErrClosed
	}
	defer s.ops.Done()
	name := fileName(key)
	kl := s.keyLock(name)
	kl.Lock()
	victims, err := s.updateMeta(key, name, m)
	kl.Unlock()
	s.removeVersions(victims)
	return err
}

// updateMeta does UpdateMeta's work under the key's file lock, which keeps
// a removal of this version from running between our checks and rename.
func (s *Store) updateMeta(key, name string, m Meta) ([]version, error) {
	s.mu.Lock()
	e := s.index[key]
	if e == nil || e.gen == 0 {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	gen, size, oldLen := e.gen, e.size, e.metaLen
	s.mu.Unlock()
	if m.Size != -1 && m.Size != size {
		return nil, fmt.Errorf("%w: Meta.Size %d, stored body has %d bytes", ErrInvalidMeta, m.Size, size)
	}
	m = m.Clone()
	m.Key, m.Size = key, size
	b, err := encodeMeta(m, gen)
	if err != nil {
		return nil, err
	}
	delta := s.blocks(int64(len(b))) - s.blocks(int64(oldLen))
	s.mu.Lock()
	if e.gen != gen || s.index[key] != e {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: %q was removed meanwhile", ErrNotFound, key)
	}
	victims, ok := s.makeRoomLocked(delta, e)
	if !ok {
		s.mu.Unlock()
		return nil, fmt.Errorf("%w: no room for %d more bytes of metadata", ErrFull, delta)
	}
	s.bytes += delta
	e.metaLen = int32(len(b))
	s.mu.Unlock()
	err = s.writeFileAtomic(s.metaPath(name, gen), b)
	s.at("update:renamed")
	if err == nil {
		err = s.syncDir(s.shardDir(name))
	}
	s.mu.Lock()
	// A Get that read the old file while this one was written must not
	// cache it (see openVersion).
	s.metaEpoch++
	current := e.gen == gen && s.index[key] == e
	if err != nil {
		// The old or the new file is in place; account for the old one
		// (the difference is a few header bytes either way), and let the
		// next Get read whichever it is.
		if current {
			s.bytes -= delta
			e.metaLen = oldLen
			s.hotDropLocked(e)
		}
		s.mu.Unlock()
		return victims, fmt.Errorf("diskcache: update metadata of %q: %w", key, err)
	}
	if current {
		// Updated because it was requested: keep it hot. m is our own
		// copy, never modified from now on.
		m.Key = e.key
		s.hotPutLocked(e, m)
	}
	s.mu.Unlock()
	return victims, nil
}

// Delete removes the object stored under key: its complete version (files
// unlinked; open Readers keep reading it) and any write in progress (its
// readers get an *AbortError wrapping ErrDeleted). ErrNotFound if there
// was neither.
func (s *Store) Delete(key string) error {
	if err := checkKey(key); err != nil {
		return err
	}
	if !s.beginOp() {
		return ErrClosed
	}
	defer s.ops.Done()
	s.mu.Lock()
	e := s.index[key]
	if e == nil {
		s.mu.Unlock()
		return fmt.Errorf("%w: %q", ErrNotFound, key)
	}
	var vs []version
	if e.gen != 0 {
		vs = append(vs, s.dropLocked(e))
	}
	w := e.w
	if w != nil {
		s.detachLocked(w, ErrDeleted)
	}
	s.mu.Unlock()
	if w != nil {
		w.Abort(ErrDeleted)
	}
	s.removeVersions(vs)
	if len(vs) > 0 {
		// Make the removal durable: a purged object must not come back.
		if err := s.syncDir(s.shardDir(fileName(key))); err != nil {
			return fmt.Errorf("diskcache: delete %q: %w", key, err)
		}
	}
	return nil
}

// removeVersions unlinks the files of versions already dropped from the
// index: metadata first, so a crash in between leaves a body without
// metadata, which Open discards. Never call it holding a key lock.
func (s *Store) removeVersions(vs []version) {
	for _, v := range vs {
		name := fileName(v.key)
		kl := s.keyLock(name)
		kl.Lock()
		for i, p := range []string{s.metaPath(name, v.gen), s.bodyPath(name, v.gen)} {
			if err := os.Remove(p); err != nil && !errors.Is(err, fs.ErrNotExist) {
				s.log.Warn("diskcache: remove failed", "file", p, "err", err)
			}
			if i == 0 {
				s.at("remove:meta-removed")
			}
		}
		kl.Unlock()
	}
}

// makeRoomLocked evicts least recently used complete versions (never keep)
// until need more bytes fit within MaxBytes and the entry count is within
// MaxEntries. It evicts nothing and returns false if need cannot fit even
// with every other complete version gone. The caller removes the returned
// versions' files after unlocking s.mu. Writes in progress are held to
// MaxWritingBytes by their callers (reserve), not here.
func (s *Store) makeRoomLocked(need int64, keep *entry) ([]version, bool) {
	floor := int64(0)
	if keep != nil && keep.gen != 0 {
		floor = s.accounted(keep)
	}
	limit := s.opt.MaxBytes - need // no overflow: need is at most a few objects
	if s.pending+floor > limit {
		return nil, false
	}
	var out []version
	for s.bytes+s.pending > limit || s.count > s.maxEntries {
		e := s.tail
		if e == keep && e != nil {
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

// Stats are counters and gauges of a Store.
type Stats struct {
	Entries      int   // complete objects
	Bytes        int64 // their bodies and metadata files, in whole blocks
	Writing      int   // writes in progress
	WritingBytes int64 // held by them: written so far, in whole blocks
	MaxBytes     int64
	MaxEntries   int   // in effect: Options.MaxEntries or its default
	Readers      int64 // open Readers
	Hits         int64 // Gets that returned a Reader
	Misses       int64
	Evictions    int64 // complete objects evicted for room (not replaced or deleted)
	EvictedBytes int64
	Commits      int64
	Aborts       int64
	Corrupt      int64 // damaged objects discarded, at Open or on Get
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
}

// Stats returns a snapshot of the store's counters.
func (s *Store) Stats() Stats {
	s.mu.Lock()
	st := Stats{
		Entries: s.count, Bytes: s.bytes, Writing: s.writing, WritingBytes: s.pending,
		MaxBytes: s.opt.MaxBytes, MaxEntries: s.maxEntries,
		MaxObjectBytes: s.maxObject, MaxWritingBytes: s.maxWriting, BlockBytes: s.block,
		HotEntries: len(s.hot) - len(s.hotFree), HotBytes: s.hotBytes,
	}
	s.mu.Unlock()
	st.MetaReads = s.metaReads.Load()
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
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]Info, 0, min(n, len(s.index)))
	for e := s.head; e != nil && len(out) < n; e = e.next {
		out = append(out, s.infoLocked(e))
	}
	return out
}

// Range calls fn for every key, most recently used complete objects first
// and keys that only have a write in progress last, until fn returns false.
// It iterates over a snapshot taken at the start (memory proportional to
// the number of keys; no I/O), so fn may call the Store. Use Peek for a
// key's full metadata.
func (s *Store) Range(fn func(Info) bool) {
	s.mu.Lock()
	infos := make([]Info, 0, len(s.index))
	for e := s.head; e != nil; e = e.next {
		infos = append(infos, s.infoLocked(e))
	}
	for _, e := range s.index {
		if e.gen == 0 {
			infos = append(infos, s.infoLocked(e))
		}
	}
	s.mu.Unlock()
	for _, in := range infos {
		if !fn(in) {
			return
		}
	}
}

func (s *Store) infoLocked(e *entry) Info {
	in := Info{Key: e.key, Size: -1}
	if e.gen != 0 {
		in.Size, in.LastUsed = e.size, time.Unix(0, e.used)
	}
	if w := e.w; w != nil {
		w.mu.Lock()
		in.Writing, in.Written, in.WriteSize = true, w.written, w.meta.Size
		w.mu.Unlock()
	}
	return in
}
