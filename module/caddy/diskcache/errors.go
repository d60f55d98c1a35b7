package diskcache

import (
	"errors"
	"fmt"
)

// Errors returned by Store, Writer and Reader methods. Test with errors.Is;
// most are wrapped with details (key, sizes, file names).
var (
	// ErrClosed: the Store, Reader or Writer has been closed.
	ErrClosed = errors.New("diskcache: closed")
	// ErrLocked: another Store (in this or another process) has the
	// directory open. Share one Store per directory (see the package docs).
	ErrLocked = errors.New("diskcache: directory in use by another Store")
	// ErrFormat: the directory was written by an incompatible version of
	// this package (its FORMAT file names another layout). Nothing in it is
	// touched; move it away or delete it.
	ErrFormat = errors.New("diskcache: unsupported on-disk format")
	// ErrNotFound: no complete object is stored under the key.
	ErrNotFound = errors.New("diskcache: not found")
	// ErrInProgress: Create was called for a key that already has a write in
	// progress. Read that one (Get) instead of downloading the object twice.
	ErrInProgress = errors.New("diskcache: write already in progress")
	// ErrFull: the writes in progress already hold (nearly) all of
	// Options.MaxWritingBytes, so this one cannot start or grow: complete
	// objects are not evicted for downloads beyond that. Serve the
	// response without caching it.
	ErrFull = errors.New("diskcache: cache full of in-progress writes")
	// ErrTooLarge: the object is larger than Options.MaxObjectBytes (by
	// default an eighth of MaxBytes), declared so at Create or found so by
	// Write.
	ErrTooLarge = errors.New("diskcache: object too large")
	// ErrSizeMismatch: the bytes written do not match Meta.Size declared at
	// Create or passed to Commit (a truncated or overlong download).
	ErrSizeMismatch = errors.New("diskcache: size mismatch")
	// ErrInvalidKey: the key is empty or longer than MaxKeyLen.
	ErrInvalidKey = errors.New("diskcache: invalid key")
	// ErrInvalidMeta: a Meta argument is inconsistent (wrong Key, bad Size,
	// unencodable times, too large once encoded).
	ErrInvalidMeta = errors.New("diskcache: invalid metadata")
	// ErrCorrupt: a metadata file failed to decode or does not match its body.
	ErrCorrupt = errors.New("diskcache: corrupt metadata")
	// ErrAborted: the write of an object was abandoned. Readers of the
	// in-progress object get an *AbortError, which matches ErrAborted and
	// wraps the writer's cause.
	ErrAborted = errors.New("diskcache: write aborted")
	// ErrAbandoned is the cause of an abort by Writer.Close without Commit,
	// or Writer.Abort(nil).
	ErrAbandoned = errors.New("diskcache: writer closed without commit")
	// ErrDeleted is the cause of an abort by Store.Delete.
	ErrDeleted = errors.New("diskcache: object deleted")
	// ErrCommitted: Write or Commit after a successful Commit.
	ErrCommitted = errors.New("diskcache: already committed")
	// ErrSizeUnknown: Seek relative to the end of an object whose size is
	// not known yet (chunked and still being written).
	ErrSizeUnknown = errors.New("diskcache: size not known yet")
)

// AbortError is what readers of an in-progress object get once its write is
// aborted, instead of a silent io.EOF that would look like a complete body.
// errors.Is(err, ErrAborted) holds, and Unwrap returns the writer's cause
// (for example ErrAbandoned, ErrDeleted, ErrClosed, ErrSizeMismatch, an I/O
// error or whatever the caller passed to Writer.Abort).
type AbortError struct {
	Key string
	Err error
}

func (e *AbortError) Error() string {
	return fmt.Sprintf("diskcache: write of %q aborted: %v", e.Key, e.Err)
}

// Unwrap returns the cause.
func (e *AbortError) Unwrap() error { return e.Err }

// Is reports whether target is ErrAborted.
func (e *AbortError) Is(target error) bool { return target == ErrAborted }
