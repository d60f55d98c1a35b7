package diskcache

import (
	"strings"
	"testing"
)

// TestRoomFreedOnlyOnceUnlinked provokes the window between a version
// leaving the index and its files leaving the disk (removeVersions after
// an eviction, an abort's unlink), and writes into the room meanwhile, as
// concurrent downloads do. The room used to count as free as soon as the
// version left the index, so another write's bytes landed while the old
// files still took their blocks: the disk held more than MaxBytes (once
// 72.4 MiB for a 64 MiB cache plus 8 MiB of slack, in a loaded make
// test). Now the other write waits for the unlink, and the files under
// the cache directory never take more than MaxBytes.
func TestRoomFreedOnlyOnceUnlinked(t *testing.T) {
	for _, tc := range []struct {
		name  string
		point string // where the window is open
		// provoke fills the cache and opens the window: the hook runs at
		// point, in the test's goroutine.
		provoke func(t *testing.T, s *Store, block int64)
	}{
		{"evicted", "remove:meta-removed", func(t *testing.T, s *Store, block int64) {
			put(t, s, "x", strings.Repeat("x", int(10*block))) // 11 blocks with its metadata
			w, err := s.Create("a", testMeta(""))
			if err != nil {
				t.Fatal(err)
			}
			defer w.Close()
			// 11 + 6 blocks > 16: evicts x.
			if _, err := w.Write([]byte(strings.Repeat("a", int(6*block)))); err != nil {
				t.Fatalf("the write that evicts: %v", err)
			}
		}},
		{"aborted", "abort:detached", func(t *testing.T, s *Store, block int64) {
			w, err := s.Create("x", testMeta(""))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := w.Write([]byte(strings.Repeat("x", int(10*block)))); err != nil {
				t.Fatal(err)
			}
			w.Abort(nil)
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := testOptions(t, 1) // sized below, in blocks
			o.MaxBytes = 16 * blockSize(o.Dir)
			o.MaxObjectBytes, o.MaxWritingBytes = o.MaxBytes, o.MaxBytes
			s := openStore(t, o)
			block := s.Stats().BlockBytes
			waiting := make(chan struct{}, 1)
			other := make(chan error, 1)
			var inWindow int64 = -1
			opened := false
			s.hook = func(point string) {
				switch {
				case point == "reserve:waiting-for-unlink":
					select {
					case waiting <- struct{}{}:
					default:
					}
				case point == tc.point && !opened:
					opened = true
					// Another download writes 9 blocks now: it must
					// wait for the unlink, not take the room.
					go func() { other <- tryPutSized(s, "b", int(9*block)) }()
					select {
					case err := <-other:
						other <- err
					case <-waiting:
					}
					inWindow = diskBytes(t, o.Dir)
				}
			}
			tc.provoke(t, s, block)
			if !opened {
				t.Fatalf("the window (%s) never opened", tc.point)
			}
			if inWindow > o.MaxBytes {
				t.Errorf("while a removed version's files were still on disk, the files took %d bytes (%d blocks) of a %d-byte cache: another write used its room before it was unlinked",
					inWindow, inWindow/block, o.MaxBytes)
			}
			if err := <-other; err != nil {
				t.Errorf("the other write, once the room was free: %v", err)
			}
			if got := diskBytes(t, o.Dir); got > o.MaxBytes {
				t.Errorf("afterwards the files take %d bytes, limit %d", got, o.MaxBytes)
			}
			st := s.Stats()
			if st.UnlinkedBytes != 0 || st.UnlinkedVersions != 0 {
				t.Errorf("nothing is open or being unlinked, yet Stats says %d bytes in %d removed versions", st.UnlinkedBytes, st.UnlinkedVersions)
			}
		})
	}
}

// tryPutSized stores n bytes under key.
func tryPutSized(s *Store, key string, n int) error {
	return tryPut(s, key, strings.Repeat("b", n))
}
