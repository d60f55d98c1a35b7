package diskcache

import (
	"errors"
	"io"
	"os"
	"syscall"
	"time"
)

// When the file system fills before MaxBytes does.
//
// MaxBytes is what the operator allows; the file system under Dir may
// hold less (a cache_size larger than the disk, other files on the same
// disk, quotas). A write that fails with ENOSPC or EDQUOT then means the
// count is wrong, not that the object is: the Store lowers its bound to
// what the disk really holds (diskLimit: what the Store holds now, by its
// own count, plus what the file system still has free), evicts least
// recently used objects down to it, and writes the rest again. The lowered
// bound is read again from the file system at most every diskRecheck while
// it applies (the disk may have been freed), and always at the next full
// disk. A write that still fails, or fails with any other error (EIO, a
// read-only file system), is not stored: the Writer relays what it is
// given to the Readers it has, without the disk (relay.go), so nobody who
// is reading it gets a short body.

// diskRecheck is how often a lowered bound (diskLimit) is read again from
// the file system.
const diskRecheck = 30 * time.Second

// bodyFile is what a Writer writes a body to: the *os.File in tmp/, or in
// tests a file that fails on demand (wrapBody).
type bodyFile interface {
	io.Writer
	Sync() error
	Close() error
}

// diskFull reports whether err says the file system (or the user's quota)
// has no room: the errors that evicting objects can cure.
func diskFull(err error) bool {
	return errors.Is(err, syscall.ENOSPC) || errors.Is(err, syscall.EDQUOT)
}

// openBody opens the file of a new body.
func (s *Store) openBody(path string) (bodyFile, error) {
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err != nil {
		return nil, err
	}
	if s.wrapBody != nil {
		return s.wrapBody(f), nil
	}
	return f, nil
}

// limitLocked is the bound in effect: MaxBytes, or less while the file
// system has been found to hold less (diskLimit).
func (s *Store) limitLocked() int64 {
	if s.diskLimit > 0 && s.diskLimit < s.opt.MaxBytes {
		return s.diskLimit
	}
	return s.opt.MaxBytes
}

// recheckDiskLocked lets a lowered bound follow the file system again once
// diskRecheck has passed: freed disk space becomes cache space again.
func (s *Store) recheckDiskLocked() {
	if s.diskLimit == 0 || time.Since(s.diskCheckedAt) < diskRecheck {
		return
	}
	s.diskCheckedAt = time.Now()
	free, ok := s.freeBytes()
	if !ok {
		return
	}
	s.diskLimit = s.bytes + s.pending + s.orphaned + free
	if s.diskLimit >= s.opt.MaxBytes {
		s.diskLimit = 0 // the disk holds MaxBytes again
	}
}

// fitToDisk handles a write that found the file system full: it lowers
// the bound to what the disk holds and evicts down to it, and reports
// whether that unlinked anything (so a retry may succeed).
func (s *Store) fitToDisk() bool {
	free, ok := s.freeBytes()
	s.mu.Lock()
	held := s.bytes + s.pending + s.orphaned
	if !ok {
		free = 0
	}
	// Two blocks of slack: the metadata files written through tmp/ and
	// the directories take room the count leaves out.
	limit := max(held+free-2*s.block, s.block)
	if s.diskLimit == 0 || limit < s.diskLimit || time.Since(s.diskCheckedAt) >= diskRecheck {
		s.diskLimit = limit
	}
	if s.diskLimit >= s.opt.MaxBytes {
		s.diskLimit = 0 // full, but not below MaxBytes: the count was right
	}
	s.diskCheckedAt = time.Now()
	victims, _ := s.evictLocked(0, nil)
	s.mu.Unlock()
	s.log.Warn("diskcache: file system full; bound lowered to what it holds",
		"dir", s.dir, "bound", limit, "max_bytes", s.opt.MaxBytes, "evicting", len(victims))
	s.removeVersions(victims)
	return len(victims) > 0
}

// diskBound reports whether the file system's bound (diskLimit) is in
// effect: then a write that finds no room fails for the disk's sake, and
// is relayed rather than aborted.
func (s *Store) diskBound() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.diskLimit > 0 && s.diskLimit < s.opt.MaxBytes
}
