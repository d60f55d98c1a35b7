package diskcache

import (
	"fmt"
	"io"
	"strings"
	"testing"
)

// BenchmarkGetHit: Get, read a 4 KiB body, Close. hot: the metadata is in
// the hot set (an open, a read, a close); cold: without a hot set (also an
// open, read and decode of the metadata file, and a stat).
func BenchmarkGetHit(b *testing.B) {
	for _, hot := range []bool{true, false} {
		name := "hot"
		o := testOptions(b, 1<<30)
		if !hot {
			name, o.HotMetaBytes = "cold", -1
		}
		b.Run(name, func(b *testing.B) {
			s := openStore(b, o)
			body := strings.Repeat("x", 4096)
			keys := make([]string, 100)
			for i := range keys {
				keys[i] = fmt.Sprintf("%040x", i)
				put(b, s, keys[i], body)
			}
			buf := make([]byte, 8192)
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				r, ok := s.Get(keys[i%len(keys)])
				if !ok {
					b.Fatal("miss")
				}
				if n, err := io.ReadFull(r, buf[:4096]); n != 4096 || err != nil {
					b.Fatal(n, err)
				}
				r.Close()
			}
		})
	}
}

// BenchmarkPut: Create, write 4 KiB, Commit, replacing earlier versions;
// with and without fsync.
func BenchmarkPut(b *testing.B) {
	for _, sync := range []bool{false, true} {
		b.Run(fmt.Sprintf("sync=%v", sync), func(b *testing.B) {
			o := testOptions(b, 1<<30)
			o.NoSync = !sync
			s := openStore(b, o)
			body := make([]byte, 4096)
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				w, err := s.Create(fmt.Sprintf("%040x", i%1000), Meta{Status: 200, Size: int64(len(body))})
				if err != nil {
					b.Fatal(err)
				}
				w.Write(body)
				if err := w.Commit(w.Meta()); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}

// BenchmarkIndexMemory reports the index's bytes per object.
func BenchmarkIndexMemory(b *testing.B) {
	for b.Loop() {
		b.ReportMetric(indexBytesPerEntry(b, 100000), "bytes/object")
	}
}
