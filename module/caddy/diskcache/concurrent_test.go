package diskcache

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"
)

// result of a read running in a goroutine.
type readResult struct {
	b   []byte
	err error
}

func readAsync(r *Reader, ctx context.Context, n int) <-chan readResult {
	ch := make(chan readResult, 1)
	go func() {
		buf := make([]byte, n)
		k, err := r.ReadContext(ctx, buf)
		ch <- readResult{buf[:k], err}
	}()
	return ch
}

// pending reports whether a read has not finished; call after
// synctest.Wait, when every goroutine in the bubble is blocked.
func pending(ch <-chan readResult) bool {
	select {
	case r := <-ch:
		panic(fmt.Sprintf("read finished: %q %v", r.b, r.err))
	default:
		return true
	}
}

// TestCutThrough follows one reader through a download: the bytes already
// written come at once, the next read blocks until the writer writes, and
// the end is io.EOF only after Commit.
func TestCutThrough(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := openStore(t, testOptions(t, 1<<20))
		w, err := s.Create(key1, testMeta("first second"))
		if err != nil {
			t.Fatal(err)
		}
		io.WriteString(w, "first")
		r, ok := s.Get(key1)
		if !ok {
			t.Fatal("in-progress object not found")
		}
		defer r.Close()
		if m := r.Meta(); m.Status != 200 || m.Size != -1 || r.Complete() || r.Size() != -1 {
			t.Fatalf("meta during write %+v", m)
		}
		if _, err := r.Seek(0, io.SeekEnd); !errors.Is(err, ErrSizeUnknown) {
			t.Fatalf("SeekEnd of unknown size: %v", err)
		}
		if res := <-readAsync(r, t.Context(), 100); string(res.b) != "first" || res.err != nil {
			t.Fatalf("first read %q %v", res.b, res.err)
		}
		ch := readAsync(r, t.Context(), 100)
		waitCh := make(chan error, 1)
		go func() { _, err := r.Wait(t.Context()); waitCh <- err }()
		synctest.Wait()
		pending(ch)
		io.WriteString(w, " second")
		if res := <-ch; string(res.b) != " second" || res.err != nil {
			t.Fatalf("second read %q %v", res.b, res.err)
		}
		ch = readAsync(r, t.Context(), 100)
		synctest.Wait()
		pending(ch)
		select {
		case err := <-waitCh:
			t.Fatalf("Wait returned %v before Commit", err)
		default:
		}
		if err := w.Commit(w.Meta()); err != nil {
			t.Fatal(err)
		}
		if res := <-ch; len(res.b) != 0 || res.err != io.EOF {
			t.Fatalf("read at the end: %q %v", res.b, res.err)
		}
		if err := <-waitCh; err != nil {
			t.Fatal(err)
		}
		if !r.Complete() || r.Size() != 12 || r.Content() == nil || r.Meta().Size != 12 {
			t.Fatalf("after commit: complete %v size %d", r.Complete(), r.Size())
		}
	})
}

// TestReadAtWaits: ReadAt of a range not yet written waits for all of it.
func TestReadAtWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := openStore(t, testOptions(t, 1<<20))
		m := testMeta("")
		m.Size = 10
		w, _ := s.Create(key1, m)
		io.WriteString(w, "0123")
		r, _ := s.Get(key1)
		defer r.Close()
		if pos, err := r.Seek(-2, io.SeekEnd); pos != 8 || err != nil { // declared size
			t.Fatalf("Seek: %d %v", pos, err)
		}
		done := make(chan readResult, 1)
		go func() {
			buf := make([]byte, 4)
			n, err := r.ReadAt(buf, 2)
			done <- readResult{buf[:n], err}
		}()
		synctest.Wait()
		pending(done)
		io.WriteString(w, "4")
		synctest.Wait()
		pending(done) // has 2 of 4 bytes
		io.WriteString(w, "56789")
		if res := <-done; string(res.b) != "2345" || res.err != nil {
			t.Fatalf("ReadAt: %q %v", res.b, res.err)
		}
		w.Commit(w.Meta())
	})
}

// TestBlockedReadEnds: a blocked read ends on Close, on its context, on the
// GetContext context, and on the writer's abort, without leaking its
// goroutine (synctest.Test fails if a goroutine is left blocked).
func TestBlockedReadEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := openStore(t, testOptions(t, 1<<20))
		w, _ := s.Create(key1, testMeta(""))
		defer w.Close()

		r1, _ := s.Get(key1)
		ch := readAsync(r1, context.Background(), 10)
		synctest.Wait()
		pending(ch)
		r1.Close()
		if res := <-ch; !errors.Is(res.err, ErrClosed) {
			t.Fatalf("after Close: %v", res.err)
		}

		r2, _ := s.Get(key1)
		defer r2.Close()
		ctx, cancel := context.WithCancel(context.Background())
		ch = readAsync(r2, ctx, 10)
		synctest.Wait()
		pending(ch)
		cancel()
		if res := <-ch; !errors.Is(res.err, context.Canceled) {
			t.Fatalf("after cancel: %v", res.err)
		}

		gctx, gcancel := context.WithTimeout(context.Background(), time.Minute)
		defer gcancel()
		r3, _ := s.GetContext(gctx, key1)
		defer r3.Close()
		done := make(chan error, 1)
		go func() { _, err := r3.WriteTo(io.Discard); done <- err }()
		synctest.Wait()
		time.Sleep(time.Minute) // fake time
		if err := <-done; !errors.Is(err, context.DeadlineExceeded) {
			t.Fatalf("after the GetContext deadline: %v", err)
		}

		r4, _ := s.Get(key1)
		defer r4.Close()
		ch = readAsync(r4, context.Background(), 10)
		synctest.Wait()
		pending(ch)
		w.Abort(errors.New("origin went away"))
		if res := <-ch; !errors.Is(res.err, ErrAborted) {
			t.Fatalf("after Abort: %v", res.err)
		}
		// Reading a closed Reader fails at once.
		if _, err := r1.Read(make([]byte, 1)); !errors.Is(err, ErrClosed) {
			t.Fatalf("Read after Close: %v", err)
		}
	})
}

// pattern returns deterministic content.
func pattern(n int, seed uint64) []byte {
	b := make([]byte, n)
	rng := rand.New(rand.NewPCG(seed, seed))
	for i := range b {
		b[i] = byte(rng.Uint32())
	}
	return b
}

// TestManyReaders: one writer, many readers joining before the first byte,
// at chosen offsets during the write and after the commit, each reading at
// its own pace through a different API; all must get exactly the body.
func TestManyReaders(t *testing.T) {
	s := openStore(t, testOptions(t, 64<<20))
	body := pattern(4<<20+12345, 1)
	want := sha256.Sum256(body)
	w, err := s.Create(key1, testMeta(string(body)))
	if err != nil {
		t.Fatal(err)
	}
	type readFn func(r *Reader) ([]byte, error)
	small := func(r *Reader) ([]byte, error) { // Read with odd small buffers
		var out bytes.Buffer
		buf := make([]byte, 1000+rand.IntN(7000))
		for {
			n, err := r.Read(buf)
			out.Write(buf[:n])
			if err == io.EOF {
				return out.Bytes(), nil
			}
			if err != nil {
				return nil, err
			}
		}
	}
	writeTo := func(r *Reader) ([]byte, error) {
		var out bytes.Buffer
		_, err := r.WriteTo(&out)
		return out.Bytes(), err
	}
	readAt := func(r *Reader) ([]byte, error) { // ReadAt in chunks, last one short
		out := make([]byte, 0, len(body))
		buf := make([]byte, 300000)
		for off := int64(0); ; off += int64(len(buf)) {
			n, err := r.ReadAt(buf, off)
			out = append(out, buf[:n]...)
			if err == io.EOF {
				return out, nil
			}
			if err != nil {
				return nil, err
			}
		}
	}
	fns := []readFn{small, writeTo, readAt}
	var wg sync.WaitGroup
	errs := make(chan error, 100)
	join := func(i int) {
		r, ok := s.Get(key1)
		if !ok {
			errs <- fmt.Errorf("reader %d: miss", i)
			return
		}
		wg.Go(func() {
			defer r.Close()
			got, err := fns[i%len(fns)](r)
			if err != nil {
				errs <- fmt.Errorf("reader %d: %v", i, err)
			} else if sha256.Sum256(got) != want {
				errs <- fmt.Errorf("reader %d: %d bytes, wrong content", i, len(got))
			}
		})
	}
	n := 0
	for range 6 {
		join(n)
		n++
	}
	for off := 0; off < len(body); {
		k := min(len(body)-off, 1+rand.IntN(100000))
		if _, err := w.Write(body[off : off+k]); err != nil {
			t.Fatal(err)
		}
		off += k
		if rand.IntN(20) == 0 {
			join(n)
			n++
		}
	}
	join(n)
	if err := w.Commit(w.Meta()); err != nil {
		t.Fatal(err)
	}
	for range 3 {
		n++
		join(n)
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	t.Logf("%d readers", n+1)
}

// TestStress runs writers, readers, updates and deletes on a few keys in a
// store small enough to evict constantly, checking every body against its
// metadata, the accounting against the disk, and a reopen.
func TestStress(t *testing.T) {
	o := testOptions(t, 200<<10)
	o.MaxObjectBytes = 60 << 10
	s := openStore(t, o)
	keys := make([]string, 12)
	for i := range keys {
		keys[i] = fmt.Sprintf("%08x", i*0x1010101)
	}
	// A read blocked this long has lost a wakeup: reported, not hung.
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	var wg sync.WaitGroup
	errc := make(chan error, 64)
	report := func(err error) {
		select {
		case errc <- err:
		default:
		}
	}
	const ops = 100
	for g := range 8 {
		wg.Go(func() {
			rng := rand.New(rand.NewPCG(uint64(g), 7))
			for i := 0; i < ops && ctx.Err() == nil; i++ {
				key := keys[rng.IntN(len(keys))]
				switch op := rng.IntN(10); {
				case op < 4: // write, sometimes declared, sometimes aborted
					body := pattern(rng.IntN(40<<10), rng.Uint64())
					m := testMeta(string(body))
					if rng.IntN(2) == 0 {
						m.Size = int64(len(body))
					}
					w, err := s.Create(key, m)
					if errors.Is(err, ErrInProgress) || errors.Is(err, ErrFull) {
						continue
					}
					if err != nil {
						report(err)
						return
					}
					for off := 0; off < len(body); off += 4096 {
						if _, err := w.Write(body[off:min(off+4096, len(body))]); err != nil {
							if !errors.Is(err, ErrFull) && !errors.Is(err, ErrDeleted) {
								report(err)
							}
							break
						}
					}
					if rng.IntN(8) == 0 {
						w.Abort(errors.New("test abort"))
						continue
					}
					if err := w.Commit(w.Meta()); err != nil && !errors.Is(err, ErrAborted) {
						report(err)
					}
				case op < 8: // read, maybe while being written
					r, ok := s.GetContext(ctx, key)
					if !ok {
						continue
					}
					var buf bytes.Buffer
					_, err := r.WriteTo(&buf)
					m := r.Meta()
					r.Close()
					if errors.Is(err, ErrAborted) {
						continue
					}
					if err != nil {
						report(fmt.Errorf("read %s: %v", key, err))
						continue
					}
					sum := sha256.Sum256(buf.Bytes())
					if m.Extra["sha256"] != fmt.Sprintf("%x", sum) || m.Size != int64(buf.Len()) {
						report(fmt.Errorf("read %s: body does not match its metadata", key))
					}
				case op < 9:
					if m, ok := s.Peek(key); ok && m.Size >= 0 {
						m = m.Clone()
						m.Extra["updated"] = strings.Repeat("u", rng.IntN(100))
						if err := s.UpdateMeta(key, m); err != nil && !errors.Is(err, ErrNotFound) && !errors.Is(err, ErrInvalidMeta) {
							report(err)
						}
					}
				default:
					if err := s.Delete(key); err != nil && !errors.Is(err, ErrNotFound) {
						report(err)
					}
				}
				if st := s.Stats(); st.Bytes+st.WritingBytes > o.MaxBytes {
					report(fmt.Errorf("over the bound: %+v", st))
				}
			}
		})
	}
	wg.Wait()
	close(errc)
	for err := range errc {
		t.Error(err)
	}
	st := s.Stats()
	if st.Writing != 0 || st.WritingBytes != 0 || st.Bytes != diskBytes(t, o.Dir) {
		t.Fatalf("stats %+v, disk %d", st, diskBytes(t, o.Dir))
	}
	t.Logf("stats %+v", st)
	s.Close()
	s = openStore(t, o)
	if st2 := s.Stats(); st2.Entries != st.Entries || st2.Bytes != st.Bytes || st2.Corrupt != 0 {
		t.Fatalf("after reopen %+v, before %+v", st2, st)
	}
	for _, k := range keys {
		get(t, s, k)
	}
}

// Keep crc32 linked for the memory tests' helpers.
var _ = crc32.IEEE
