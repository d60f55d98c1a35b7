//go:build unix

package diskcache

import (
	"fmt"
	"io/fs"
	"math/rand/v2"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// realUsage sums the space the file system allocated (st_blocks) to the
// regular files under dir, and separately to its directories.
func realUsage(t *testing.T, dir string) (files, dirs int64) {
	t.Helper()
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		var st syscall.Stat_t
		if err := syscall.Lstat(p, &st); err != nil {
			return err
		}
		if d.IsDir() {
			dirs += int64(st.Blocks) * 512
		} else {
			files += int64(st.Blocks) * 512
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files, dirs
}

// TestDiskUsageSmallObjects is the issue's "a 1 MiB cache of small objects
// took 37.8 MiB on disk": thousands of objects far smaller than a block
// (some empty) must not take more room than MaxBytes, counted as the file
// system counts it. Slack: the Store's own files (FORMAT, lock, and lru
// after Close), three blocks, and as much again for file-system
// bookkeeping (an extent block). Directories are not counted: objects/
// and its 256 shards take a block each however small the cache (1 MiB
// with 4 KiB blocks), and their entries about 2% of MaxBytes (two names of
// some 70 bytes per object of at least 8 KiB).
func TestDiskUsageSmallObjects(t *testing.T) {
	o := testOptions(t, 1<<20)
	s := openStore(t, o)
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 3000 {
		put(t, s, fmt.Sprintf("%040x", rng.Uint64()), strings.Repeat("s", i%200))
	}
	const slack = 6 * 4096
	check := func(when string) {
		t.Helper()
		files, dirs := realUsage(t, o.Dir)
		st := s.Stats()
		t.Logf("%s: %d objects, %d bytes accounted; files take %d bytes, directories %d", when, st.Entries, st.Bytes, files, dirs)
		if files > o.MaxBytes+slack {
			t.Errorf("%s: a %d-byte cache takes %d bytes in files (%.1f times)", when, o.MaxBytes, files, float64(files)/float64(o.MaxBytes))
		}
		if objects, _ := realUsage(t, filepath.Join(o.Dir, objectsDir)); objects > st.Bytes {
			t.Errorf("%s: objects take %d bytes, accounted %d", when, objects, st.Bytes)
		}
	}
	check("after 3000 puts")
	before := s.Stats()
	s.Close()
	s = openStore(t, o)
	if st := s.Stats(); st.Entries != before.Entries || st.Bytes != before.Bytes {
		t.Errorf("after reopen %+v, before %+v", st, before)
	}
	check("after reopen")
}
