//go:build linux

package hostilelab

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestSampleCountsUnlinkedOpenFiles: the disk figure holds the blocks of a
// file that was unlinked but is still open, and only while it is open.
func TestSampleCountsUnlinkedOpenFiles(t *testing.T) {
	dir := t.TempDir()
	f, err := os.Create(filepath.Join(dir, "replaced"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if _, err := f.Write(make([]byte, 1<<20)); err != nil {
		t.Fatal(err)
	}
	if err := f.Sync(); err != nil {
		t.Fatal(err)
	}
	pid := os.Getpid()
	before, unlinked, err := openFiles(pid, dir)
	if err != nil || unlinked != 0 {
		t.Fatalf("before unlinking: %d unlinked bytes, %v", unlinked, err)
	}
	diskBefore, err := diskUsed(dir)
	if err != nil || diskBefore < 1<<20 {
		t.Fatalf("disk %d (%v), want at least 1 MiB", diskBefore, err)
	}
	if err := os.Remove(f.Name()); err != nil {
		t.Fatal(err)
	}
	n, unlinked, err := openFiles(pid, dir)
	if err != nil || n != before || unlinked < 1<<20 {
		t.Errorf("after unlinking: %d files (was %d), %d unlinked bytes (%v), want the 1 MiB", n, before, unlinked, err)
	}
	if d, _ := diskUsed(dir); d >= 1<<20 {
		t.Errorf("the directory still counts %d bytes", d)
	}
	f.Close()
	if _, unlinked, _ = openFiles(pid, dir); unlinked != 0 {
		t.Errorf("after closing: %d unlinked bytes", unlinked)
	}
	if rss, err := vmRSS(pid); err != nil || rss < 1<<20 {
		t.Errorf("VmRSS %d, %v", rss, err)
	}
}

func TestHonestSize(t *testing.T) {
	for _, p := range []string{"/c/0", "/c/1", "/n/3", ""} {
		if n := HonestSize(p); n < 1<<10 || n > 64<<10 || n != HonestSize(p) {
			t.Errorf("HonestSize(%q) = %d", p, n)
		}
	}
}

// TestCheck: each bound, broken, gives a violation naming it.
func TestCheck(t *testing.T) {
	b := DefaultBounds(64 << 20)
	ok := Result{CacheSize: 64 << 20, Idle: Sample{RSS: 50 << 20, FDs: 20, Goroutines: 50},
		Peak: Peaks{RSS: 100 << 20, Disk: 60 << 20}, After: Sample{FDs: 25, Goroutines: 60},
		Canary: map[string]CanaryStats{ProbeHonest: {Requests: 100, P99: time.Second}}}
	if v := ok.check(b); len(v) != 0 {
		t.Fatalf("within bounds: %q", v)
	}
	for name, tc := range map[string]struct {
		mod  func(r *Result)
		want string
	}{
		"rss":       {func(r *Result) { r.Peak.RSS = r.Idle.RSS + 257<<20 }, "peak RSS"},
		"disk":      {func(r *Result) { r.Peak.Disk = 64<<20 + b.DiskSlack + 1 }, "peak disk"},
		"canary":    {func(r *Result) { r.Canary[ProbeHonest] = CanaryStats{Requests: 10, Failures: 1} }, "canary failures"},
		"p99":       {func(r *Result) { r.Canary[ProbeHonest] = CanaryStats{Requests: 10, P99: 3 * time.Second} }, "canary p99"},
		"victim":    {func(r *Result) { r.Canary[ProbeVictim] = CanaryStats{Requests: 10, Failures: 2, Changed: 1} }, "victims changed"},
		"same-host": {func(r *Result) { r.SameOrigin = true; r.Canary[ProbeSameHost] = CanaryStats{Requests: 10, Failures: 2} }, "same-origin objects unavailable"},
		"unavailable victim": {func(r *Result) {
			r.SameOrigin = true
			r.Canary[ProbeVictim] = CanaryStats{Requests: 10, Failures: 2}
		}, "same-origin objects unavailable"},
		"leak": {func(r *Result) { r.After.Goroutines = 151 }, "goroutines"},
		"fds":  {func(r *Result) { r.After.FDs = 53 }, "open files"},
		"died": {func(r *Result) { r.Exited = "proxy exited: signal: killed\nlog" }, "a proxy died"},
		"idle": {func(r *Result) { r.Canary = map[string]CanaryStats{} }, "no request"},
	} {
		r := ok
		r.Canary = map[string]CanaryStats{ProbeHonest: ok.Canary[ProbeHonest]}
		tc.mod(&r)
		v := r.check(b)
		if len(v) != 1 || !strings.Contains(v[0], tc.want) {
			t.Errorf("%s: %q, want one violation about %q", name, v, tc.want)
		}
	}
	// Without SameOrigin, the evil origin's objects may be unavailable.
	r := ok
	r.Canary = map[string]CanaryStats{ProbeHonest: ok.Canary[ProbeHonest], ProbeSameHost: {Requests: 5, Failures: 5},
		ProbeVictim: {Requests: 5, Failures: 5}}
	if v := r.check(b); len(v) != 0 {
		t.Errorf("unavailable same-origin objects without SameOrigin: %q", v)
	}
	if !strings.Contains(Table([]Result{ok}), "ok") {
		t.Error("the table does not say ok")
	}
}

// TestClassesUseTheCatalogue: every class name is unique and every
// behaviour class of the catalogue is attacked by some class.
func TestClassesUseTheCatalogue(t *testing.T) {
	seen := map[string]bool{}
	for _, c := range Classes {
		if seen[c.Name] {
			t.Errorf("class %s twice", c.Name)
		}
		seen[c.Name] = true
		if got, ok := LookupClass(c.Name); !ok || got.Name != c.Name {
			t.Errorf("LookupClass(%s)", c.Name)
		}
	}
	for class := range CatalogueClasses() {
		if !seen[class] {
			t.Errorf("no lab class attacks with the %s behaviours", class)
		}
	}
}
