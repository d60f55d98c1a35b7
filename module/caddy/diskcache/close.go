package diskcache

import (
	"fmt"
	"sync"
)

// Close aborts the writes in progress (their readers get an *AbortError
// wrapping ErrClosed), waits for running operations, saves the LRU order
// and releases the directory. Readers of complete objects keep working
// until they are closed. Close is idempotent; a new Store may then Open the
// same directory.
func (s *Store) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	var ws []*Writer
	for _, w := range s.writers {
		ws = append(ws, w)
	}
	for _, w := range ws {
		s.detachLocked(w, ErrClosed)
	}
	s.mu.Unlock()
	for _, w := range ws {
		w.Abort(ErrClosed)
	}
	s.ops.Wait()
	err := s.writeCheckpoint()
	if cerr := s.lock.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("diskcache: close: %w", err)
	}
	return nil
}

// beginOp registers a running operation unless the store is closed.
func (s *Store) beginOp() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return false
	}
	s.ops.Add(1)
	return true
}

func (s *Store) at(point string) {
	if s.hook != nil {
		s.hook(point)
	}
}

func (s *Store) keyLock(name objName) *sync.Mutex {
	h := uint32(2166136261)
	for _, c := range name.b {
		h = (h ^ uint32(c)) * 16777619
	}
	return &s.keyLocks[h%uint32(len(s.keyLocks))]
}

func checkKey(key string) error {
	if key == "" || len(key) > MaxKeyLen {
		return fmt.Errorf("%w: length %d", ErrInvalidKey, len(key))
	}
	return nil
}
