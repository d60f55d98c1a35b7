package diskcache

import (
	"context"
	"errors"
	"fmt"
	"io"
)

// Relaying a write that cannot be stored.
//
// When a body's bytes can no longer go to disk (the file system is full
// even after evicting, or it fails: EIO, read-only), the object is not
// stored, but its Readers, clients already receiving it, must still get
// all of it. The Writer then leaves the index (new Gets miss, and a new
// Create may start afresh) and relays: what reached the file stays there
// for its Readers, and every later byte goes through a window in memory
// of at most relayWindow bytes, from which each Reader takes it as it
// reads. The window only drops bytes that every Reader has passed, so a
// Write waits while the slowest Reader is relayWindow behind (the origin
// is read at the pace of the slowest client, as an uncached relay is);
// a Reader that closes stops holding it. Commit then ends the relay with
// ErrNotStored: Readers get io.EOF after the last byte, as for a
// committed object, and the file is removed. Abort ends it with an
// *AbortError, as for any write.

// relayWindow bounds the memory of one relayed write.
const relayWindow = 1 << 20

// relay is the window of a relayed write. Guarded by Writer.mu.
type relay struct {
	start   int64  // body offset of buf[0]; at least Writer.written (the file's bytes)
	buf     []byte // bytes start .. end-1
	end     int64
	room    chan struct{} // closed when a Reader moves on or closes; created by a waiting Write
	stop    chan struct{} // closed by Abort, to end a waiting Write
	stopped bool
	cause   error // why the bytes are not stored
}

// ErrNotStored is what Commit returns for a write that was relayed to its
// Readers instead of stored (a full or failing disk); errors.Is matches it
// and the cause, wrapped.
var ErrNotStored = errors.New("diskcache: not stored; relayed to its readers")

// errRelayStopped is what a relay Write waiting for its Readers returns
// when Abort ends it.
var errRelayStopped = errors.New("diskcache: relay aborted")

// errInRelay tells a Reader that the bytes at its offset are in the relay
// window, not the file.
var errInRelay = errors.New("diskcache: in the relay window")

// Relaying reports whether the write is being relayed to its Readers
// rather than stored (see ErrNotStored): new requests should not wait for
// it.
func (w *Writer) Relaying() bool { return w.relaying.Load() }

// Relay turns w into a relay, as a full disk does, because the caller
// will not have its bytes stored (cause says why; Commit then returns
// ErrNotStored wrapping it): the bytes written so far stay in the file
// for w's Readers, the rest goes through the relay window. It does
// nothing once w is relaying or has ended.
func (w *Writer) Relay(cause error) {
	w.wmu.Lock()
	defer w.wmu.Unlock()
	if w.usableLocked() != nil || w.relaying.Load() {
		return
	}
	w.beginRelayLocked(cause)
}

// startRelayLocked turns w (writing, under wmu) into a relay because
// cause kept its bytes from the disk; the file keeps what it has. The
// Writer leaves the index, its space counted as removed until its file
// is unlinked and its Readers close (held.go).
func (w *Writer) startRelayLocked(cause error) {
	w.beginRelayLocked(cause)
	w.s.log.Warn("diskcache: write not stored; relaying it to its readers", "key", w.key, "written", w.n, "err", cause)
}

// beginRelayLocked is startRelayLocked without the log line: Relay's
// caller decides whether its cause is worth one.
func (w *Writer) beginRelayLocked(cause error) {
	s := w.s
	s.mu.Lock()
	s.detachLocked(w, cause)
	s.mu.Unlock()
	w.mu.Lock()
	w.state = relaying
	w.rl = &relay{start: w.written, end: w.written, stop: make(chan struct{}), cause: cause}
	w.relaying.Store(true)
	w.wakeLocked()
	w.mu.Unlock()
}

// relayWrite hands p to the Readers through the window.
func (w *Writer) relayWrite(p []byte) (int, error) {
	total := 0
	for len(p) > 0 {
		w.mu.Lock()
		if w.state != relaying {
			err := w.err
			w.mu.Unlock()
			return total, err
		}
		rl := w.rl
		low := rl.end // the slowest Reader's offset
		for r := range w.rdrs {
			low = min(low, r.pos.Load())
		}
		if drop := low - rl.start; drop > 0 {
			rl.buf = append(rl.buf[:0], rl.buf[drop:]...)
			rl.start = low
		}
		room := relayWindow - (rl.end - low)
		if room <= 0 {
			if rl.room == nil {
				rl.room = make(chan struct{})
			}
			ch, stop := rl.room, rl.stop
			w.mu.Unlock()
			select {
			case <-ch:
			case <-stop:
				return total, &AbortError{Key: w.key, Err: errRelayStopped}
			}
			continue
		}
		k := int(min(room, int64(len(p))))
		rl.buf = append(rl.buf, p[:k]...)
		rl.end += int64(k)
		w.wakeLocked()
		w.mu.Unlock()
		p = p[k:]
		total += k
	}
	return total, nil
}

// relayEnd is the relayed body's length so far.
func (w *Writer) relayEnd() int64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.rl.end
}

// moved tells a waiting relay Write that a Reader has moved on or gone.
func (w *Writer) moved() {
	if !w.relaying.Load() {
		return
	}
	w.mu.Lock()
	if rl := w.rl; rl != nil && rl.room != nil {
		close(rl.room)
		rl.room = nil
	}
	w.mu.Unlock()
}

// relayRead reads the relayed bytes at off into p, waiting for them like
// avail does for the file's.
func (r *Reader) relayRead(ctx context.Context, p []byte, off int64) (int, error) {
	w := r.w
	for {
		if r.done.Load() {
			return 0, ErrClosed
		}
		w.mu.Lock()
		if w.state == aborted {
			err := w.err
			w.mu.Unlock()
			return 0, err
		}
		rl := w.rl
		switch {
		case off < rl.start:
			// Only a Seek backwards gets here: the window keeps what
			// every Reader has yet to read.
			w.mu.Unlock()
			return 0, &AbortError{Key: r.key, Err: fmt.Errorf("%w: offset %d no longer held (relay at %d)", ErrNotStored, off, rl.start)}
		case off < rl.end:
			n := copy(p, rl.buf[off-rl.start:])
			w.mu.Unlock()
			return n, nil
		case w.state == relayedState:
			w.mu.Unlock()
			return 0, io.EOF
		}
		if w.notify == nil {
			w.notify = make(chan struct{})
		}
		ch := w.notify
		w.mu.Unlock()
		if err := r.waitWriter(ctx, ch); err != nil {
			return 0, err
		}
	}
}

// advance moves the Reader's offset by n, and tells a relayed write.
func (r *Reader) advance(n int64) {
	r.off += n
	if r.w != nil && n != 0 {
		r.pos.Store(r.off)
		r.w.moved()
	}
}

// writeRelayed writes the relayed bytes at the Reader's offset to dst:
// one window read's worth; io.EOF once the relay has delivered them all.
func (r *Reader) writeRelayed(dst io.Writer) (int64, error) {
	buf := smallBufs.Get().(*[smallWrite]byte)
	defer smallBufs.Put(buf)
	n, err := r.relayRead(context.Background(), buf[:], r.off)
	if n == 0 {
		return 0, err
	}
	k, werr := dst.Write(buf[:n])
	r.advance(int64(k))
	if werr == nil && k < n {
		werr = io.ErrShortWrite
	}
	return int64(k), werr
}
