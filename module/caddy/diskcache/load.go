package diskcache

import (
	"bufio"
	"cmp"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
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
	victims, _ := s.evictLocked(0, nil) // no one else yet: s.mu is free
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
	groups, maxGen, err := s.groupShard(dir, shard, des)
	if err != nil {
		return nil, 0, err
	}
	var found []scanned
	for name, g := range groups {
		slices.SortFunc(g.metas, func(a, b shardFile) int { return cmp.Compare(b.gen, a.gen) })
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

// shardFile is a metadata file of an object found in a shard.
type shardFile struct {
	gen   uint64
	size  int64
	mtime int64
}

// shardGroup is the files of one object name found in a shard: its
// metadata files and its bodies' sizes by generation.
type shardGroup struct {
	metas  []shardFile
	bodies map[uint64]int64
}

// groupShard sorts a shard directory's entries by object name, discarding
// files that do not belong there, and returns the highest generation seen.
func (s *Store) groupShard(dir, shard string, des []os.DirEntry) (map[string]*shardGroup, uint64, error) {
	groups := make(map[string]*shardGroup)
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
			g = &shardGroup{bodies: make(map[uint64]int64, 1)}
			groups[name] = g
		}
		if isMeta {
			g.metas = append(g.metas, shardFile{gen, info.Size(), info.ModTime().UnixNano()})
		} else {
			g.bodies[gen] = info.Size()
		}
	}
	return groups, maxGen, nil
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
