package proxy

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"mime/multipart"
	"net"
	"net/http"
	"net/http/httptest"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"
)

// sendRecorder records how the bodies of a proxy's responses reach the
// response writer: per ReadFrom whose source is a file (an *os.File, or
// an *io.LimitedReader of one: what net's sendfile takes), the file and
// the bytes; and the bytes that came any other way.
type sendRecorder struct {
	mu        sync.Mutex
	fromFiles []fileSend
	other     int64
	errs      chan error // what each request's ServeHTTP returned
}

type fileSend struct {
	name    string
	limited bool
	n       int64
}

// serve serves px on loopback TCP, recording.
func (rec *sendRecorder) serve(t *testing.T, p *localProxy) *localProxy {
	rec.errs = make(chan error, 16)
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		err := p.px.ServeHTTP(&recordingWriter{ResponseWriter: w, rec: rec}, r)
		rec.errs <- err
		if err != nil && !errors.Is(err, ErrCutShort) {
			http.Error(w, err.Error(), http.StatusBadGateway)
		}
	}))
	// A small send buffer, whatever the machine's defaults: a response
	// to a client that stops reading blocks long before its end
	// (TestSlicesClientLeaves).
	srv.Config.ConnState = func(c net.Conn, s http.ConnState) {
		if tc, ok := c.(*net.TCPConn); ok && s == http.StateNew {
			_ = tc.SetWriteBuffer(64 << 10)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	return &localProxy{px: p.px, store: p.store, srv: srv}
}

func (rec *sendRecorder) reset() {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	rec.fromFiles, rec.other = nil, 0
}

// fileBytes is the bytes sent from files, and from how many files.
func (rec *sendRecorder) fileBytes() (n int64, files int) {
	rec.mu.Lock()
	defer rec.mu.Unlock()
	var names []string
	for _, s := range rec.fromFiles {
		n += s.n
		if !slices.Contains(names, s.name) {
			names = append(names, s.name)
		}
	}
	return n, len(names)
}

type recordingWriter struct {
	http.ResponseWriter
	rec *sendRecorder
}

func (w *recordingWriter) Write(p []byte) (int, error) {
	n, err := w.ResponseWriter.Write(p)
	w.rec.mu.Lock()
	w.rec.other += int64(n)
	w.rec.mu.Unlock()
	return n, err
}

func (w *recordingWriter) ReadFrom(src io.Reader) (int64, error) {
	under, limited := src, false
	if lr, ok := src.(*io.LimitedReader); ok {
		under, limited = lr.R, true
	}
	n, err := w.ResponseWriter.(io.ReaderFrom).ReadFrom(src)
	w.rec.mu.Lock()
	defer w.rec.mu.Unlock()
	// An *os.File, or os's wrapper of one that File.WriteTo hands on.
	if f, ok := under.(interface {
		syscall.Conn
		Name() string
	}); ok {
		w.rec.fromFiles = append(w.rec.fromFiles, fileSend{name: f.Name(), limited: limited, n: n})
	} else {
		w.rec.other += n
	}
	return n, err
}

func (w *recordingWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// startRecordedSlices starts a slice origin and a recorded proxy
// (sendRecorder) with path's object stored in slices.
func startRecordedSlices(t *testing.T, path string) (*sliceOrigin, *sendRecorder, *localProxy) {
	t.Helper()
	o := newSliceOrigin(t, false, 0)
	rec := new(sendRecorder)
	p := rec.serve(t, startSliceProxy(t))
	if resp, body := p.rawGet(t, o.coralHost(), path); resp.StatusCode != 200 || !bytes.Equal(body, o.v1) {
		t.Fatalf("miss: %d, %d bytes", resp.StatusCode, len(body))
	}
	<-rec.errs
	p.idle(t)
	return o, rec, p
}

// TestSlicesSentFromFiles (issue 42): a hit on a sliced object sends
// each stored slice's bytes as its file (the source net's sendfile
// takes), not copied through a buffer: the whole object, a range across
// slice boundaries (its last slice cut: a LimitedReader of the file) and
// a suffix range; only a slice's last 16 KiB or less goes out as one
// write, as for an object stored whole. A slice missing from the store
// is fetched again, and the client still gets the object byte for byte.
func TestSlicesSentFromFiles(t *testing.T) {
	o, rec, p := startRecordedSlices(t, "/movie.mp4")
	const s = sliceTestSize
	for _, tc := range []struct {
		name              string
		hdr               []string
		body              []byte
		fileBytes, others int64 // bytes sent from files, and otherwise
		files             int   // how many files
		limited           bool  // the last file send is a LimitedReader
	}{
		// Slices 0-5 from their files; slice 6 (12345 bytes) in one write.
		{"hit", nil, o.v1, 6 * s, 12345, 6, false},
		// The end of slice 0, slice 1, the start of slice 2 (a
		// LimitedReader of its file).
		{"range across slices", []string{"Range", "bytes=1000000-2097300"}, o.v1[1000000:2097301], s - 1000000 + s + 149, 0, 3, true},
		// The end of slice 4, slice 5, slice 6 in one write.
		{"suffix range", []string{"Range", "bytes=-2000000"}, o.v1[sliceObjectSize-2000000:], 2000000 - 12345, 12345, 2, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec.reset()
			resp, body := p.rawGet(t, o.coralHost(), "/movie.mp4", tc.hdr...)
			if err := <-rec.errs; err != nil {
				t.Fatalf("ServeHTTP: %v", err)
			}
			if !bytes.Equal(body, tc.body) {
				t.Fatalf("%d: %d bytes, not the %d wanted (or not the same)", resp.StatusCode, len(body), len(tc.body))
			}
			n, files := rec.fileBytes()
			rec.mu.Lock()
			others, sends := rec.other, slices.Clone(rec.fromFiles)
			rec.mu.Unlock()
			if n != tc.fileBytes || files != tc.files || others != tc.others {
				t.Fatalf("%d bytes from %d files and %d otherwise, want %d bytes from %d files and %d otherwise", n, files, others, tc.fileBytes, tc.files, tc.others)
			}
			if last := sends[len(sends)-1]; last.limited != tc.limited {
				t.Errorf("last file send limited %v, want %v", last.limited, tc.limited)
			}
		})
	}

	t.Run("slice missing", func(t *testing.T) {
		rec.reset()
		key := p.px.mustKey(t, o.coralHost(), "/movie.mp4")
		meta, ok := p.store.Peek(key)
		m, mok := parseManifest(meta.Extra[slicesField])
		if !ok || !mok {
			t.Fatalf("no manifest: %+v", meta.Extra)
		}
		if err := p.store.Delete(sliceKey(key, m, 3)); err != nil {
			t.Fatal(err)
		}
		asked := len(o.asked("/movie.mp4"))
		resp, body := p.rawGet(t, o.coralHost(), "/movie.mp4")
		if err := <-rec.errs; err != nil {
			t.Fatalf("ServeHTTP: %v", err)
		}
		if resp.StatusCode != 200 || !bytes.Equal(body, o.v1) {
			t.Fatalf("%d, %d bytes (equal %v)", resp.StatusCode, len(body), bytes.Equal(body, o.v1))
		}
		if got := o.asked("/movie.mp4")[asked:]; !slices.Equal(got, sliceRanges(3, 3)) {
			t.Errorf("the origin was asked %q, want slice 3's range", got)
		}
		// Slices 0-2 and 4-5 from their files at least (slice 3 too if
		// it was complete when its turn came).
		if n, files := rec.fileBytes(); n < 5*s || files < 5 {
			t.Errorf("%d bytes from %d files, want at least %d from 5", n, files, 5*s)
		}
		p.idle(t)
	})
}

// TestSlicesMultipartInOneSlice: a multipart/byteranges response whose
// ranges fall in one slice, and then in another, gets each range's own
// bytes (the slice's reader follows the seeks between ranges).
func TestSlicesMultipartInOneSlice(t *testing.T) {
	o := newSliceOrigin(t, false, 0)
	p := startSliceProxy(t)
	if resp, body := p.rawGet(t, o.coralHost(), "/a"); resp.StatusCode != 200 || !bytes.Equal(body, o.v1) {
		t.Fatalf("miss: %d, %d bytes", resp.StatusCode, len(body))
	}
	p.idle(t)
	ranges := [][2]int{{0, 9}, {100, 109}, {50, 59}, {1048570, 1048580}, {3000000, 3000004}}
	spec := "bytes="
	for i, r := range ranges {
		if i > 0 {
			spec += ","
		}
		spec += fmt.Sprintf("%d-%d", r[0], r[1])
	}
	resp, err := http.DefaultClient.Do(p.request(t, "GET", o.coralHost(), "/a", "Range", spec))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	mt, params, err := mime.ParseMediaType(resp.Header.Get("Content-Type"))
	if resp.StatusCode != 206 || err != nil || mt != "multipart/byteranges" {
		t.Fatalf("%d %q: %v", resp.StatusCode, resp.Header.Get("Content-Type"), err)
	}
	mr := multipart.NewReader(resp.Body, params["boundary"])
	for i, r := range ranges {
		part, err := mr.NextPart()
		if err != nil {
			t.Fatalf("part %d: %v", i, err)
		}
		got, err := io.ReadAll(part)
		if err != nil || !bytes.Equal(got, o.v1[r[0]:r[1]+1]) {
			t.Errorf("part %d (%d-%d): %v, %x, want %x", i, r[0], r[1], err, got, o.v1[r[0]:r[1]+1])
		}
	}
}

// TestSlicesClientLeaves: a client that leaves in the middle of a hit on
// a sliced object ends the response (cut short) and releases every
// reader of the store.
func TestSlicesClientLeaves(t *testing.T) {
	o, rec, p := startRecordedSlices(t, "/a")
	c, err := net.Dial("tcp", p.srv.Listener.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetReadBuffer(16 << 10) // the server's sends block soon
	}
	if _, err := io.WriteString(c, "GET /a HTTP/1.1\r\nHost: "+o.coralHost()+"\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	if _, err := io.ReadFull(c, make([]byte, 100<<10)); err != nil {
		t.Fatal(err)
	}
	c.Close()
	select {
	case err := <-rec.errs:
		if !errors.Is(err, ErrCutShort) {
			t.Errorf("ServeHTTP returned %v, want ErrCutShort", err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the response did not end after its client left")
	}
	if n := p.store.Stats().Readers; n != 0 {
		t.Errorf("%d store readers open once the response ended", n)
	}
}

// TestSlicesOverTLS: over TLS (no sendfile: the slices' files are copied
// into the TLS connection), HTTP/1.1 and HTTP/2, a hit on a sliced object
// and a range across slices are the object's bytes.
func TestSlicesOverTLS(t *testing.T) {
	o, _, p := startRecordedSlices(t, "/a")
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				serveOrError(p.px, w, r)
			}))
			srv.EnableHTTP2 = h2
			proto := 1
			if h2 {
				proto = 2
			}
			srv.StartTLS()
			t.Cleanup(srv.Close)
			for _, tc := range []struct {
				rng  string
				body []byte
			}{{"", o.v1}, {"bytes=1000000-2097300", o.v1[1000000:2097301]}} {
				req, err := http.NewRequest("GET", srv.URL+"/a", nil)
				if err != nil {
					t.Fatal(err)
				}
				req.Host = o.coralHost()
				if tc.rng != "" {
					req.Header.Set("Range", tc.rng)
				}
				resp, err := srv.Client().Do(req)
				if err != nil {
					t.Fatal(err)
				}
				body, err := io.ReadAll(resp.Body)
				resp.Body.Close()
				if err != nil || resp.ProtoMajor != proto || !bytes.Equal(body, tc.body) {
					t.Errorf("Range %q: %s %d, %d bytes (equal %v), %v", tc.rng, resp.Proto, resp.StatusCode, len(body), bytes.Equal(body, tc.body), err)
				}
			}
		})
	}
}
