package coralcaddy

import (
	"runtime"
	"strings"
	"testing"
)

// TestCacheSizeWarning (issue 22, defect 7): a cache_size larger than the
// free disk is warned about; one that fits is not.
func TestCacheSizeWarning(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("free space is not read on this platform")
	}
	dir := t.TempDir()
	if msg := cacheSizeWarning(dir, 1<<62, 0); !strings.Contains(msg, "cache_size") || !strings.Contains(msg, dir) {
		t.Errorf("a 4 EiB cache on %s: %q, want a warning", dir, msg)
	}
	if msg := cacheSizeWarning(dir, 1<<20, 0); msg != "" {
		t.Errorf("a 1 MiB cache: %q", msg)
	}
}
