package diskcache

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"sync/atomic"
)

// Reader reads one version of an object, from its own file descriptor, or
// from the copy in memory of a small hot body (see hot.go).
//
// A Reader of a complete object reads the file directly. A Reader of an
// object being written (cut-through) returns the bytes already on disk at
// once and then blocks for more until the writer commits (then io.EOF at
// the end, as for a complete object) or aborts (then an *AbortError, never
// a silent io.EOF). Blocking ends early when the Reader is closed (ErrClosed)
// or its context, from GetContext or ReadContext, is done (ctx.Err()).
//
// Read, ReadContext, Seek and WriteTo share an offset and must not be
// called concurrently; ReadAt may be called concurrently with anything;
// Close may be called from any goroutine, also to unblock a read.
type Reader struct {
	s      *Store
	key    string
	gen    uint64   // the version read, counted until Close (held.go)
	f      *os.File // nil when reading mem
	mem    []byte   // the body in memory, shared: never modified
	ctx    context.Context
	w      *Writer // nil if complete when opened
	meta   Meta    // if complete when opened
	off    int64
	pos    atomic.Int64  // off, for a relayed write's window (relay.go); only with w
	buf    []byte        // WriteTo's copy buffer, for writers without ReadFrom
	done   atomic.Bool   // closed
	closed chan struct{} // closed on Close; only for readers of a write in progress
	mark   uint64        // the entry's mark at the Get (Mark)
	once   sync.Once
}

var _ interface {
	io.ReadSeekCloser
	io.ReaderAt
	io.WriterTo
} = (*Reader)(nil)

func (s *Store) newReader(ctx context.Context, key string, gen uint64, f *os.File, w *Writer, m Meta) *Reader {
	if ctx == nil {
		ctx = context.Background()
	}
	s.readers.Add(1)
	r := &Reader{s: s, key: key, gen: gen, f: f, ctx: ctx, w: w, meta: m}
	if w != nil {
		r.closed = make(chan struct{})
	}
	return r
}

// newMemReader reads body, the in-memory body of key's complete version
// described by m. It holds no file and no version (Close releases nothing).
func (s *Store) newMemReader(key string, m Meta, body []byte) *Reader {
	s.readers.Add(1)
	return &Reader{s: s, key: key, mem: body, ctx: context.Background(), meta: m}
}

// readAt reads the body at off, from memory or the file.
func (r *Reader) readAt(p []byte, off int64) (int, error) {
	if r.f != nil {
		return r.f.ReadAt(p, off)
	}
	if off >= int64(len(r.mem)) {
		return 0, io.EOF
	}
	n := copy(p, r.mem[off:])
	if n < len(p) {
		return n, io.EOF
	}
	return n, nil
}

// Meta returns the object's metadata: for an object still being written
// the Meta given to Create (Size -1 unless declared), once committed the
// final one. Treat it as read-only (see Meta).
func (r *Reader) Meta() Meta {
	if r.w == nil {
		return r.meta
	}
	return r.w.currentMeta()
}

// Size returns the body length if known: always for a complete object,
// the declared length for one being written, else -1.
func (r *Reader) Size() int64 { return r.Meta().Size }

// Complete reports whether the object is complete: committed when opened or
// since.
func (r *Reader) Complete() bool {
	if r.w == nil {
		return true
	}
	r.w.mu.Lock()
	defer r.w.mu.Unlock()
	return r.w.state == committed
}

// Content returns the body of a complete object as an io.ReadSeeker of its
// own, for callers such as http.ServeContent (nil while it is being
// written): the *os.File itself, so that copies to a TCP connection use
// sendfile (a body of at most InlineMaxSize bytes, whose file may hold
// its metadata too: an io.SectionReader of the body's bytes), or for a
// body in memory a bytes.Reader of it. Do not close it;
// the Reader uses positional reads and keeps its own offset, but WriteTo
// seeks the file. WriteTo already copies with sendfile/copy_file_range when
// the destination supports it.
func (r *Reader) Content() io.ReadSeeker {
	switch {
	case r.mem != nil:
		return bytes.NewReader(r.mem)
	case !r.Complete():
		return nil
	}
	if size := r.Size(); size <= InlineMaxSize {
		return io.NewSectionReader(r.f, 0, size)
	}
	return r.f
}

// Close releases the file and unblocks any blocked read, which returns
// ErrClosed. It is idempotent and always returns nil.
func (r *Reader) Close() error {
	r.once.Do(func() {
		r.done.Store(true)
		if r.closed != nil {
			close(r.closed)
		}
		if w := r.w; w != nil {
			w.mu.Lock()
			delete(w.rdrs, r)
			w.mu.Unlock()
			w.moved()
		}
		if r.f != nil {
			r.f.Close()
			r.s.release(nameOf(r.key), r.gen)
		}
		r.s.readers.Add(-1)
	})
	return nil
}

// avail returns how many bytes of the body may be read: at least off+1
// unless the object is complete (then its size). It blocks while off is at
// or beyond what the writer has written.
func (r *Reader) avail(ctx context.Context, off int64) (int64, error) {
	if r.done.Load() {
		return 0, ErrClosed
	}
	w := r.w
	if w == nil {
		return r.meta.Size, nil
	}
	for {
		w.mu.Lock()
		state, written, err := w.state, w.written, w.err
		var ch chan struct{}
		if (state == relaying || state == relayedState) && off >= written {
			w.mu.Unlock()
			return 0, errInRelay // past the file: in the window
		}
		if state == writing && off >= written {
			if w.notify == nil {
				w.notify = make(chan struct{})
			}
			ch = w.notify
		}
		w.mu.Unlock()
		switch {
		case state == aborted:
			return 0, err
		case ch == nil:
			return written, nil
		}
		if err := r.waitWriter(ctx, ch); err != nil {
			return 0, err
		}
	}
}

// waitWriter waits for the writer's next change (ch, its notify channel),
// the Reader's Close or the end of either context.
func (r *Reader) waitWriter(ctx context.Context, ch <-chan struct{}) error {
	select {
	case <-ch:
		return nil
	case <-r.closed:
		return ErrClosed
	case <-r.ctx.Done():
		return r.ctx.Err()
	case <-ctx.Done():
		return ctx.Err()
	}
}

// Read reads from the current offset, blocking while the object is being
// written and no bytes are available there yet.
func (r *Reader) Read(p []byte) (int, error) {
	return r.ReadContext(context.Background(), p)
}

// ReadContext is Read that also gives up, with ctx.Err(), when ctx is done.
func (r *Reader) ReadContext(ctx context.Context, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	end, err := r.avail(ctx, r.off)
	if err == errInRelay {
		n, err := r.relayRead(ctx, p, r.off)
		r.advance(int64(n))
		return n, err
	}
	if err != nil {
		return 0, err
	}
	if r.off >= end {
		return 0, io.EOF
	}
	n, err := r.readAt(p[:min(int64(len(p)), end-r.off)], r.off)
	r.advance(int64(n))
	if err == io.EOF { // shorter than its metadata or the writer says
		err = fmt.Errorf("diskcache: %q: %w", r.key, io.ErrUnexpectedEOF)
	}
	return n, err
}

// ReadAt reads len(p) bytes at off, blocking until they are written, the
// object completes (then io.EOF if it ends before off+len(p)), or the
// write is aborted. It does not use or change the offset of Read.
func (r *Reader) ReadAt(p []byte, off int64) (int, error) {
	if off < 0 {
		return 0, fmt.Errorf("diskcache: negative offset %d", off)
	}
	total := 0
	for total < len(p) {
		pos := off + int64(total)
		end, err := r.avail(context.Background(), pos)
		if err == errInRelay {
			var n int
			n, err = r.relayRead(context.Background(), p[total:], pos)
			total += n
			if err != nil {
				return total, err
			}
			continue
		}
		if err != nil {
			return total, err
		}
		if pos >= end {
			return total, io.EOF
		}
		n, err := r.readAt(p[total:total+int(min(int64(len(p)-total), end-pos))], pos)
		total += n
		if err == io.EOF {
			return total, fmt.Errorf("diskcache: %q: %w", r.key, io.ErrUnexpectedEOF)
		}
		if err != nil {
			return total, err
		}
	}
	return total, nil
}

// Seek sets the offset of Read and WriteTo. Offsets beyond what has been
// written are allowed (reads wait for them). io.SeekEnd needs a known size
// (ErrSizeUnknown otherwise; see Wait).
func (r *Reader) Seek(offset int64, whence int) (int64, error) {
	var base int64
	switch whence {
	case io.SeekStart:
	case io.SeekCurrent:
		base = r.off
	case io.SeekEnd:
		if base = r.Size(); base < 0 {
			return 0, ErrSizeUnknown
		}
	default:
		return 0, fmt.Errorf("diskcache: invalid whence %d", whence)
	}
	if offset+base < 0 {
		return 0, fmt.Errorf("diskcache: negative position %d", offset+base)
	}
	r.off = base + offset
	if r.w != nil {
		r.pos.Store(r.off)
		r.w.moved()
	}
	return r.off, nil
}

// smallWrite is the most WriteTo copies through a buffer of its own.
const smallWrite = 16 << 10

var smallBufs = sync.Pool{New: func() any { return new([smallWrite]byte) }}

// WriteTo copies the body from the current offset to dst until the end of
// the object, following a write in progress as it grows. The copy goes
// through dst's ReadFrom when it has one, so an *os.File source reaches
// sendfile(2) on a TCP connection (net/http's ResponseWriter does this).
// The rest of a complete object, when at most 16 KiB, is instead read with
// one pread into a pooled buffer and written with one Write: cheaper than
// net/http's ReadFrom (a seek, a read of the first 512 bytes, a write of
// the header with them, a sendfile), and the response leaves in one
// segment when it fits net/http's buffer.
func (r *Reader) WriteTo(dst io.Writer) (int64, error) {
	var total int64
	for {
		end, err := r.avail(context.Background(), r.off)
		if err == errInRelay {
			n, err := r.writeRelayed(dst)
			total += n
			if err == io.EOF {
				return total, nil
			}
			if err != nil {
				return total, err
			}
			continue
		}
		if err != nil {
			return total, err
		}
		if r.off >= end {
			return total, nil
		}
		want := end - r.off
		if r.mem != nil {
			// In memory: one write, however large.
			n, err := dst.Write(r.mem[r.off:end])
			r.off += int64(n)
			if err == nil && int64(n) < want {
				err = io.ErrShortWrite
			}
			return total + int64(n), err
		}
		complete := r.Complete()
		if want <= smallWrite && complete {
			n, err := r.writeSmall(dst, want)
			return total + n, err
		}
		if _, err := r.f.Seek(r.off, io.SeekStart); err != nil {
			return total, err
		}
		var n int64
		if complete {
			// The rest of the file is the rest of the object: copy the
			// file itself, not a LimitedReader of it, so that a writer
			// adding a LimitedReader of its own (Caddy's write timeout
			// does, per chunk) still lets net's sendfile find the file
			// under it. (File.WriteTo passes the file on to dst's
			// ReadFrom.)
			n, err = io.Copy(dst, r.f)
			if err == nil && n > want {
				err = fmt.Errorf("%w: %s has more bytes than its metadata says", ErrCorrupt, r.f.Name())
			}
		} else {
			if _, ok := dst.(io.ReaderFrom); !ok && r.buf == nil {
				r.buf = make([]byte, 64<<10)
			}
			n, err = io.CopyBuffer(dst, &io.LimitedReader{R: r.f, N: want}, r.buf)
		}
		r.advance(n)
		total += n
		if err != nil {
			if errors.Is(err, os.ErrClosed) {
				err = ErrClosed
			}
			return total, err
		}
		if n < want {
			return total, fmt.Errorf("diskcache: %q: %w", r.key, io.ErrUnexpectedEOF)
		}
	}
}

// writeSmall writes the last want bytes (at most smallWrite) of a complete
// object to dst.
func (r *Reader) writeSmall(dst io.Writer, want int64) (int64, error) {
	buf := smallBufs.Get().(*[smallWrite]byte)
	defer smallBufs.Put(buf)
	p := buf[:want]
	n, err := r.readAt(p, r.off)
	switch {
	case n < len(p) && (err == nil || err == io.EOF):
		err = fmt.Errorf("diskcache: %q: %w", r.key, io.ErrUnexpectedEOF)
		fallthrough
	case err != nil:
		if errors.Is(err, os.ErrClosed) {
			err = ErrClosed
		}
		return 0, err
	}
	n, err = dst.Write(p)
	r.off += int64(n)
	if err == nil && n < len(p) {
		err = io.ErrShortWrite
	}
	return int64(n), err
}

// Wait blocks until the object is complete and returns its final metadata,
// or returns the write's *AbortError, ErrClosed, or ctx.Err(); for a write
// the disk refused and relayed, an error matching ErrNotStored once the
// relay has ended.
func (r *Reader) Wait(ctx context.Context) (Meta, error) {
	_, err := r.avail(ctx, math.MaxInt64)
	if err != errInRelay {
		if err != nil {
			return Meta{}, err
		}
		return r.Meta(), nil
	}
	// A relay: it ends with the write (the caller did not ask for its
	// bytes, which stay in the window for the Readers).
	if _, err := r.relayRead(ctx, nil, math.MaxInt64); err != io.EOF {
		return Meta{}, err
	}
	w := r.w
	w.mu.Lock()
	err = w.err
	w.mu.Unlock()
	return Meta{}, err
}
