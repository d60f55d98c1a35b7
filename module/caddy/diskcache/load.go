package diskcache

import (
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"sync/atomic"
)

// load prepares the directory and rebuilds the index.
func (s *Store) load() error {
	migrate := false
	switch b, err := os.ReadFile(filepath.Join(s.dir, formatFile)); {
	case err == nil && string(b) == formatContent1:
		migrate = true
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
	for i := range 256 {
		d := filepath.Join(s.dir, objectsDir, fmt.Sprintf("%02x", i))
		if err := os.MkdirAll(d, 0o700); err != nil {
			return fmt.Errorf("diskcache: %w", err)
		}
	}
	if _, err := os.Stat(filepath.Join(s.dir, formatFile)); err != nil || migrate {
		// Format 1's objects are format 2's two-file objects (those whose
		// key is neither 40 hex digits nor hashed are removed by the scan
		// below as files of no known name), so the new format can be
		// declared before the scan: a crash in between changes nothing.
		if migrate {
			s.log.Info("diskcache: migrating a format 1 cache: its objects stay as they are (two files each); new versions of small ones take one file",
				"dir", s.dir)
		}
		if err := s.writeFileAtomic(filepath.Join(s.dir, formatFile), []byte(formatContent)); err != nil {
			return fmt.Errorf("diskcache: writing %s: %w", formatFile, err)
		}
	}
	os.Remove(filepath.Join(s.dir, lruFile)) // format 1's
	if err := s.syncDir(s.dir); err != nil {
		return fmt.Errorf("diskcache: %w", err)
	}
	maxGen, err := s.scan()
	if err != nil {
		return err
	}
	s.order()
	s.gen.Store(max(maxGen, uint64(s.now().UnixNano())))
	victims, _ := s.evictLocked(0, nil) // no one else yet: s.mu is free
	s.removeVersions(victims)
	return nil
}

// order links the scanned entries into the LRU list: in the order the
// last Close saved (the checkpoint, read and removed here), then the rest
// most recently stored first.
func (s *Store) order() {
	path := filepath.Join(s.dir, checkpointFile)
	if f, err := os.Open(path); err == nil {
		apply := func(r checkpointRecord) {
			if e := s.idx.lookup(r.name); e != nil && e.gen == r.gen && !e.listed {
				e.used = r.used
				s.pushBack(e)
			}
		}
		// Two passes, so that a damaged file changes nothing and a
		// million records need no memory of their own.
		err := readCheckpoint(f, nil)
		if err == nil {
			if _, err = f.Seek(0, io.SeekStart); err == nil {
				err = readCheckpoint(f, apply)
			}
		}
		if err != nil {
			s.log.Warn("diskcache: ignoring the saved LRU order", "file", path, "err", err)
		}
		f.Close()
	}
	os.Remove(path) // stale after this run's first change
	var rest []int32
	s.idx.each(func(e *entry) bool {
		if !e.listed {
			rest = append(rest, e.slot)
		}
		return true
	})
	slices.SortFunc(rest, func(a, b int32) int { return cmp.Compare(s.idx.at(b).used, s.idx.at(a).used) })
	for _, i := range rest {
		s.pushBack(s.idx.at(i))
	}
}

// writeCheckpoint saves the LRU order for the next Open.
func (s *Store) writeCheckpoint() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	recs := func(yield func(checkpointRecord) bool) {
		for e := s.entryAt(s.head); e != nil; e = s.entryAt(e.next) {
			if !yield(checkpointRecord{e.objName(), e.gen, e.used}) {
				return
			}
		}
	}
	f, err := os.CreateTemp(filepath.Join(s.dir, tmpDir), "index-*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	err = writeCheckpointTo(f, s.count, recs)
	if err == nil && !s.opt.NoSync {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp, filepath.Join(s.dir, checkpointFile))
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}

// found is a complete version found by scan.
type found struct {
	name    objName
	gen     uint64
	size    int64
	used    int64
	metaLen int32
	inline  bool
}

// scan walks objects/, keeping the newest valid version of every name in
// the index and removing everything else. Shards are scanned in
// parallel; the index is filled as each is done.
func (s *Store) scan() (uint64, error) {
	objDir := filepath.Join(s.dir, objectsDir)
	des, err := os.ReadDir(objDir)
	if err != nil {
		return 0, fmt.Errorf("diskcache: %w", err)
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
		found  []found
		maxGen uint64
		err    error
	}
	results := make(chan result)
	var next atomic.Int64
	var wg sync.WaitGroup
	for range min(8, len(shards)) {
		wg.Go(func() {
			for {
				i := int(next.Add(1) - 1)
				if i >= len(shards) {
					return
				}
				var r result
				r.found, r.maxGen, r.err = s.scanShard(shards[i])
				results <- r
			}
		})
	}
	go func() { wg.Wait(); close(results) }()
	var maxGen uint64
	var firstErr error
	for r := range results {
		if r.err != nil {
			firstErr = cmp.Or(firstErr, r.err)
			continue
		}
		maxGen = max(maxGen, r.maxGen)
		for _, f := range r.found {
			e := s.idx.add(f.name) // names are unique: one shard each, one version each
			e.gen, e.size, e.metaLen, e.inline, e.used = f.gen, f.size, f.metaLen, f.inline, f.used
			s.bytes += s.accounted(e)
		}
	}
	return maxGen, firstErr
}

// shardGroup is the files of one object name found in a shard: its
// inline files, its metadata files and its bodies' sizes by generation.
type shardGroup struct {
	inlines []objectFile
	metas   []shardFile
	bodies  map[uint64]int64
}

// shardFile is a metadata file of an object found in a shard.
type shardFile struct {
	gen   uint64
	size  int64
	mtime int64
}

// scanShard scans one objects/xx directory. An inline file is taken on
// its name (a file only gets it once complete and synced; Get checks the
// file against it); a two-file version has its metadata read and checked
// against its body.
func (s *Store) scanShard(shard string) ([]found, uint64, error) {
	dir := filepath.Join(s.dir, objectsDir, shard)
	groups, maxGen, err := s.groupShard(dir, shard)
	if err != nil {
		return nil, 0, err
	}
	now := s.now().UnixNano()
	var out []found
	for name, g := range groups {
		// Newest first, whichever the layout.
		type cand struct {
			gen uint64
			i   int // inlines[i], or metas[-1-i]
		}
		cands := make([]cand, 0, len(g.inlines)+len(g.metas))
		for i, f := range g.inlines {
			cands = append(cands, cand{f.gen, i})
		}
		for i, f := range g.metas {
			cands = append(cands, cand{f.gen, -1 - i})
		}
		slices.SortFunc(cands, func(a, b cand) int { return cmp.Compare(b.gen, a.gen) })
		var chosen uint64
		chosenPair := false
		for _, c := range cands {
			if c.i >= 0 {
				f := g.inlines[c.i]
				path := s.inlinePath(name, f.gen, f.size, f.metaLen)
				if chosen != 0 {
					s.discard(path, "superseded version", false)
					continue
				}
				chosen = f.gen
				out = append(out, found{name: name, gen: f.gen, size: f.size, metaLen: f.metaLen, inline: true,
					used: min(int64(f.gen), now)})
				continue
			}
			mf := g.metas[-1-c.i]
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
			case err == nil && (gen != mf.gen || nameOf(m.Key) != name):
				err = fmt.Errorf("%w: holds key %q generation %x", ErrCorrupt, m.Key, gen)
			case err == nil && m.Size != size:
				err = fmt.Errorf("%w: size %d, body has %d bytes", ErrCorrupt, m.Size, size)
			}
			if err != nil {
				s.log.Warn("diskcache: discarding object", "file", path, "err", err)
				s.discard(path, "", true)
				continue
			}
			chosen, chosenPair = mf.gen, true
			out = append(out, found{name: name, gen: gen, size: size, metaLen: int32(mf.size), used: mf.mtime})
		}
		for gen := range g.bodies {
			if gen != chosen || !chosenPair {
				s.discard(s.bodyPath(name, gen), "body without valid metadata", false)
			}
		}
	}
	return out, maxGen, nil
}

// groupShard sorts a shard directory's entries by object name, discarding
// files that do not belong there, and returns the highest generation seen.
// Only two-file versions cost a stat each; inline files are known by
// their names.
func (s *Store) groupShard(dir, shard string) (map[objName]*shardGroup, uint64, error) {
	d, err := os.Open(dir)
	if err != nil {
		return nil, 0, fmt.Errorf("diskcache: %w", err)
	}
	defer d.Close()
	groups := make(map[objName]*shardGroup)
	var maxGen uint64
	for {
		des, err := d.ReadDir(1024)
		for _, de := range des {
			path := filepath.Join(dir, de.Name())
			of, ok := parseObjectFile(de.Name())
			if !ok || shardOf(of.name) != shard || !de.Type().IsRegular() {
				s.discard(path, "unexpected file", false)
				continue
			}
			maxGen = max(maxGen, of.gen)
			g := groups[of.name]
			if g == nil {
				g = &shardGroup{}
				groups[of.name] = g
			}
			if of.kind == kindInline {
				g.inlines = append(g.inlines, of)
				continue
			}
			info, err := de.Info()
			if err != nil {
				if errors.Is(err, fs.ErrNotExist) {
					continue
				}
				return nil, 0, fmt.Errorf("diskcache: %w", err)
			}
			if of.kind == kindMeta {
				g.metas = append(g.metas, shardFile{of.gen, info.Size(), info.ModTime().UnixNano()})
			} else {
				if g.bodies == nil {
					g.bodies = make(map[uint64]int64, 1)
				}
				g.bodies[of.gen] = info.Size()
			}
		}
		if err == io.EOF {
			return groups, maxGen, nil
		}
		if err != nil {
			return nil, 0, fmt.Errorf("diskcache: %w", err)
		}
	}
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
