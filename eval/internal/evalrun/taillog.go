package evalrun

import (
	"slices"
	"strings"
	"sync"
)

// TailLog is an io.Writer that keeps the last Max lines written to it: a
// server's output, shown when it fails.
type TailLog struct {
	Max int

	mu      sync.Mutex
	lines   []string
	partial string
}

func (t *TailLog) Write(p []byte) (int, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	parts := strings.Split(t.partial+string(p), "\n")
	t.partial = parts[len(parts)-1]
	t.lines = append(t.lines, parts[:len(parts)-1]...)
	if over := len(t.lines) - t.Max; over > 0 {
		t.lines = slices.Delete(t.lines, 0, over)
	}
	return len(p), nil
}

// String is the lines kept, and the unfinished last one.
func (t *TailLog) String() string {
	t.mu.Lock()
	defer t.mu.Unlock()
	return strings.Join(append(slices.Clone(t.lines), t.partial), "\n")
}
