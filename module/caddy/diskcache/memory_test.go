package diskcache

import (
	"bufio"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"io"
	"os"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"testing"

	"github.com/coralcdn/coral/module/caddy/internal/offheap"
)

// heapStats returns HeapInuse and TotalAlloc after a GC.
func heapStats() (inuse, total uint64) {
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	return ms.HeapInuse, ms.TotalAlloc
}

// rssKiB returns the process's resident set size from /proc (0 elsewhere).
func rssKiB() int64 {
	f, err := os.Open("/proc/self/status")
	if err != nil {
		return 0
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), "VmRSS:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(v), "kB")), 10, 64)
			return n
		}
	}
	return 0
}

// largeObject writes size bytes through the store while one reader follows
// the write (WriteTo, cut-through) and another reads the complete object
// afterwards (Read), and returns the heap growth and the bytes allocated
// meanwhile. Neither may depend on size.
func largeObject(t *testing.T, size int64) (inuseDelta int64, allocated uint64) {
	o := testOptions(t, size+1<<20)
	o.MaxObjectBytes = size // not the default, an eighth of the cache
	s := openStore(t, o)
	chunk := make([]byte, 1<<20)
	for i := range chunk {
		chunk[i] = byte(i * 7)
	}
	readBuf := make([]byte, 256<<10)
	inuse0, total0 := heapStats()
	rss0 := rssKiB()

	m := testMeta("")
	m.Size = size
	w, err := s.Create(key1, m)
	if err != nil {
		t.Fatal(err)
	}
	follower, _ := s.Get(key1)
	var wg sync.WaitGroup
	var followerSum uint32
	var followerErr error
	wg.Go(func() {
		defer follower.Close()
		h := crc32.NewIEEE()
		_, followerErr = follower.WriteTo(h)
		followerSum = h.Sum32()
	})
	var sum uint32
	for off := int64(0); off < size; off += int64(len(chunk)) {
		binary.LittleEndian.PutUint64(chunk, uint64(off)) // every chunk differs
		p := chunk[:min(int64(len(chunk)), size-off)]
		sum = crc32.Update(sum, crc32.IEEETable, p)
		if _, err := w.Write(p); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Commit(w.Meta()); err != nil {
		t.Fatal(err)
	}
	wg.Wait()
	if followerErr != nil || followerSum != sum {
		t.Fatalf("follower: %v, checksum %x want %x", followerErr, followerSum, sum)
	}
	r, _ := s.Get(key1)
	var readSum uint32
	for {
		n, err := r.Read(readBuf)
		readSum = crc32.Update(readSum, crc32.IEEETable, readBuf[:n])
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
	}
	r.Close()
	if readSum != sum {
		t.Fatalf("reader checksum %x want %x", readSum, sum)
	}
	inuse1, total1 := heapStats()
	t.Logf("%d MiB object: heap in use %+d KiB, allocated %d KiB, RSS %+d KiB",
		size>>20, (int64(inuse1)-int64(inuse0))>>10, (total1-total0)>>10, rssKiB()-rss0)
	runtime.KeepAlive(chunk)
	runtime.KeepAlive(readBuf)
	return int64(inuse1) - int64(inuse0), total1 - total0
}

// TestLargeObjectMemory: a 256 MiB object goes through the store (written,
// followed by a cut-through reader, read again) with little heap growth
// and, more to the point, little allocation at all: no part of the body is
// ever buffered in memory.
func TestLargeObjectMemory(t *testing.T) {
	if testing.Short() {
		t.Skip("writes 256 MiB")
	}
	inuse, allocated := largeObject(t, 256<<20)
	if inuse > 16<<20 || allocated > 16<<20 {
		t.Fatalf("heap grew %d bytes, %d allocated", inuse, allocated)
	}
}

// TestHugeObjectMemory is the 1 GiB case; set DISKCACHE_HUGE=1.
func TestHugeObjectMemory(t *testing.T) {
	if os.Getenv("DISKCACHE_HUGE") == "" {
		t.Skip("set DISKCACHE_HUGE=1 to write a 1 GiB object")
	}
	rss0 := rssKiB()
	inuse, allocated := largeObject(t, 1<<30)
	if grew := (rssKiB() - rss0) << 10; grew > 64<<20 || inuse > 16<<20 || allocated > 16<<20 {
		t.Fatalf("RSS grew %d bytes, heap %d, %d allocated", grew, inuse, allocated)
	}
}

// indexBytesPerEntry measures the memory taken by n index entries with
// 40-hex-digit keys (the proxy's SHA-1 keys): the Go heap's growth and
// the arrays mapped outside it.
func indexBytesPerEntry(tb testing.TB, n int) float64 {
	s := openStore(tb, testOptions(tb, 1<<50))
	keys := make([]string, n)
	for i := range keys {
		keys[i] = fmt.Sprintf("%040x", i*2654435761)
	}
	keyBytes := 0
	for _, k := range keys {
		keyBytes += len(k)
	}
	before, _ := heapStats()
	before += uint64(offheap.MappedBytes())
	s.mu.Lock()
	for i, k := range keys {
		e := s.idx.add(nameOf(k))
		e.gen, e.size, e.metaLen, e.used, e.inline = uint64(i+1), 1000, 300, int64(i), true
		s.pushFront(e)
		s.bytes += s.accounted(e)
	}
	s.mu.Unlock()
	after, _ := heapStats()
	after += uint64(offheap.MappedBytes())
	runtime.KeepAlive(keys)
	if got, want := s.Stats().IndexBytes, int64(after)-int64(before); got < want*9/10 || got > want*11/10 {
		tb.Errorf("Stats.IndexBytes %d, the heap grew %d", got, want)
	}
	// Not a real store any more: drop the fake entries before Close.
	s.mu.Lock()
	s.idx = newIndex()
	s.head, s.tail, s.count, s.bytes = -1, -1, 0, 0
	s.mu.Unlock()
	_ = keyBytes
	return float64(int64(after)-int64(before)) / float64(n)
}

// TestIndexMemory measures the index's memory per object (about 90 bytes:
// an 80-byte entry and its share of the table) and fails if it bloats
// beyond the 200 bytes per object the design promises.
func TestIndexMemory(t *testing.T) {
	per := indexBytesPerEntry(t, 100000)
	t.Logf("index: %.0f bytes per object (100k objects, 40-byte keys)", per)
	if per > 120 {
		t.Fatalf("%.0f bytes per index entry", per)
	}
}
