package main

import (
	"io"
	"strings"
	"testing"

	"github.com/coralcdn/coral/eval/internal/evaltest"
)

// TestShort runs the experiment at small counts with bin/caddy, nginx and
// Varnish, and checks coral_proxy's bounds there: the index within 200
// bytes per object, a 1 KiB object within 5 KB of disk and one inode
// (its shard directories included), and a restart serving hits within 10
// seconds; and that every server's figures were taken.
func TestShort(t *testing.T) {
	bin := evaltest.LabBinary(t, "caddy", "nginx", "varnishd")
	p := params{Counts: []int{1000, 4000}, Concurrency: 16, ObjectBytes: objectBytes,
		Servers: []string{"coral", "nginx", "varnish"}, Caddy: bin, Nginx: "nginx", Varnishd: "varnishd", Dir: t.TempDir()}
	res, err := run(t.Context(), p, io.Discard, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Log("\n" + res.table())
	if len(res.Servers) != 3 || !res.Complete {
		t.Fatalf("%d servers measured", len(res.Servers))
	}
	for _, s := range res.Servers {
		if len(s.Points) != len(p.Counts) {
			t.Fatalf("%s: %d points", s.Name, len(s.Points))
		}
		for _, pt := range s.Points {
			if pt.MissPerSecond <= 0 || pt.ResidentBytes <= 0 || pt.DiskBytes <= 0 {
				t.Errorf("%s at %d: %+v", s.Name, pt.Objects, pt)
			}
		}
	}
	coral := res.Servers[0]
	pt := coral.Points[len(coral.Points)-1]
	// The store's own count: the heap profile's estimate of a few chunks
	// is a sample (one 288 KiB chunk is in it with probability 0.43).
	if pt.IndexBytes <= 0 || pt.IndexBytesPerObj > 200 || pt.HeapInuseBytes <= 0 {
		t.Errorf("index: %d bytes, %.0f per object; heap in use %d bytes", pt.IndexBytes, pt.IndexBytesPerObj, pt.HeapInuseBytes)
	}
	// 256 shard directories are a fixed 1 MiB; at 4,000 objects they
	// are a quarter of a KB per object.
	if pt.DiskPerObj > 5000 || pt.InodesPerObj > 1.1 {
		t.Errorf("disk: %.0f bytes and %.2f inodes per object", pt.DiskPerObj, pt.InodesPerObj)
	}
	if pt.RestartSeconds <= 0 || pt.RestartSeconds > 10 || pt.KillRestartSecs <= 0 || pt.KillRestartSecs > 10 {
		t.Errorf("restart to a hit: %.2fs, after SIGKILL %.2fs", pt.RestartSeconds, pt.KillRestartSecs)
	}
}

func TestParseHeapProfile(t *testing.T) {
	// Rate 1: every record's bytes are far above it, so scaling leaves
	// them as they are.
	const profile = `heap profile: 3: 3000 [9: 9000] @ heap/2
1: 1000 [1: 1000] @ 0x1 0x2
#	0x1	github.com/coralcdn/coral/module/caddy/diskcache.(*index).add+0x1	/x/index.go:1
#	0x2	github.com/coralcdn/coral/module/caddy/diskcache.(*index).grow+0x1	/x/index.go:2

1: 200 [1: 200] @ 0x3
#	0x3	github.com/coralcdn/coral/module/caddy/proxy.(*References).put+0x1	/x/refs.go:1

1: 30 [1: 30] @ 0x4 0x5
#	0x4	github.com/coralcdn/coral/coraldht.(*store).put+0x1	/x/store.go:1
#	0x5	github.com/coralcdn/coral/module/caddy/diskcache.(*index).add+0x1	/x/index.go:1

# runtime.MemStats
# HeapInuse = 8192
`
	h, err := parseHeapProfile(strings.NewReader(profile))
	if err != nil {
		t.Fatal(err)
	}
	if h.index != 1000 || h.refs != 200 || h.dsht != 30 || h.inuse != 8192 {
		t.Fatalf("%+v", h)
	}
	// At the default rate a 288 KiB chunk is sampled with probability
	// 1-exp(-288/512): one sampled counts for about 2.3.
	h, err = parseHeapProfile(strings.NewReader("heap profile: 1: 294912 [1: 294912] @ heap/1048576\n1: 294912 [1: 294912] @ 0x1\n#\t0x1\tgithub.com/coralcdn/coral/module/caddy/diskcache.(*index).add+0x1\t/x:1\n# HeapInuse = 1\n"))
	if err != nil || h.index < 685000 || h.index > 686000 {
		t.Fatalf("scaled: %+v, %v", h, err)
	}
}
