package evilorigin

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"
)

// response is one response being built: a policy sets its status, fields
// and maybe its body; a body function supplies the body; a framing
// delimits it and has the head written.
type response struct {
	w      *wire
	req    *Request
	recipe Recipe
	status int
	fields [][2]string
	// body is what goes out after the head (nil: none, as for 304).
	body *bodySource
}

func (r *response) add(name, value string) { r.fields = append(r.fields, [2]string{name, value}) }

// bodySource is a body: its length (-1 when it has none) and how to write
// it.
type bodySource struct {
	n     int64
	write func(w io.Writer) error
	// gzipped, if set, is the body already gzipped (a bomb made once), for
	// the gzip transfer coding.
	gzipped func() []byte
}

// HeadFunc writes the header section (status line, fields, the empty
// line) its own way.
type HeadFunc func(w *wire, r *response) error

// FramingFunc delimits the body: it adds its fields, has head write the
// header section and writes the body.
type FramingFunc func(w *wire, r *response, head HeadFunc) error

// BodyFunc supplies the body.
type BodyFunc func(r *response) *bodySource

// PolicyFunc sets the caching fields and status, and may answer by
// request fields or replace the body.
type PolicyFunc func(r *response)

// Heads: how the header section is written.
var Heads = map[string]HeadFunc{
	"plain": writeHead,
	// slow: the whole head one byte every 100 ms.
	"slow": func(w *wire, r *response) error {
		var b bytes.Buffer
		headBytes(&b, r)
		for _, c := range b.Bytes() {
			if _, err := w.Write([]byte{c}); err != nil {
				return err
			}
			if err := w.sleep(100 * time.Millisecond); err != nil {
				return err
			}
		}
		return nil
	},
	// endless: the status line and the fields, then fields without end.
	"endless": func(w *wire, r *response) error { return endlessHead(w, r) },
	// endless-on-retry: a plain head the first time a target is asked
	// for, endless ones after: a client that reads the head twice (Go's
	// transport refuses "gzip, chunked", then the proxy fetches again with
	// its own reader) meets the endless one on its second read.
	"endless-on-retry": func(w *wire, r *response) error {
		if r.req.Nth == 1 {
			return writeHead(w, r)
		}
		return endlessHead(w, r)
	},
	// huge-field: one field of HeadN bytes (1 MiB).
	"huge-field": func(w *wire, r *response) error {
		n := r.recipe.HeadN
		if n == 0 {
			n = 1 << 20
		}
		r.add("X-Huge", strings.Repeat("h", n))
		return writeHead(w, r)
	},
	// many-fields: HeadN small fields (20,000).
	"many-fields": func(w *wire, r *response) error {
		n := r.recipe.HeadN
		if n == 0 {
			n = 20000
		}
		for i := range n {
			r.add("X-Many-"+strconv.Itoa(i), "m")
		}
		return writeHead(w, r)
	},
}

// endlessHead writes the status line and the fields, then fields without
// end (up to MaxEndless).
func endlessHead(w *wire, r *response) error {
	var b bytes.Buffer
	headBytes(&b, r)
	if _, err := w.Write(bytes.TrimSuffix(b.Bytes(), []byte("\r\n"))); err != nil {
		return err
	}
	pad := strings.Repeat("e", 100)
	var chunk bytes.Buffer
	for i := 0; w.written < MaxEndless; {
		chunk.Reset()
		for range 300 {
			fmt.Fprintf(&chunk, "X-Endless-%d: %s\r\n", i, pad)
			i++
		}
		if _, err := w.Write(chunk.Bytes()); err != nil {
			return err
		}
	}
	return errDropped
}

func headBytes(b *bytes.Buffer, r *response) {
	text := http.StatusText(r.status)
	if text == "" {
		text = "Whatever"
	}
	fmt.Fprintf(b, "HTTP/1.1 %d %s\r\n", r.status, text)
	for _, f := range r.fields {
		b.WriteString(f[0] + ": " + f[1] + "\r\n")
	}
	b.WriteString("\r\n")
}

func writeHead(w *wire, r *response) error {
	var b bytes.Buffer
	headBytes(&b, r)
	_, err := w.Write(b.Bytes())
	return err
}

// Framings: how the body is delimited.
var Framings = map[string]FramingFunc{
	// length: an honest Content-Length (a body without one gets 1 TiB).
	"length": func(w *wire, r *response, head HeadFunc) error {
		if r.body != nil {
			r.add("Content-Length", strconv.FormatInt(lengthOr(r.body.n, 1<<40), 10))
		}
		return headAndBody(w, r, head, w)
	},
	// short-length: Content-Length twice the body; the connection then
	// closes.
	"short-length": func(w *wire, r *response, head HeadFunc) error {
		if r.body != nil {
			r.add("Content-Length", strconv.FormatInt(2*lengthOr(r.body.n, 1<<39), 10))
		}
		return headAndBody(w, r, head, w)
	},
	// long-length: Content-Length half the body; all of it is sent.
	"long-length": func(w *wire, r *response, head HeadFunc) error {
		if r.body != nil {
			r.add("Content-Length", strconv.FormatInt(lengthOr(r.body.n, 2)/2, 10))
		}
		return headAndBody(w, r, head, w)
	},
	"chunked": func(w *wire, r *response, head HeadFunc) error {
		r.add("Transfer-Encoding", "chunked")
		return chunkedBody(w, r, head, false)
	},
	// gzip-chunked: Transfer-Encoding: gzip, chunked — valid HTTP/1.1
	// that Go's client refuses, so the proxy decodes it itself.
	"gzip-chunked": func(w *wire, r *response, head HeadFunc) error {
		r.add("Transfer-Encoding", "gzip, chunked")
		return chunkedBody(w, r, head, true)
	},
	// length-and-chunked: both fields (a smuggling classic); the body is
	// chunked.
	"length-and-chunked": func(w *wire, r *response, head HeadFunc) error {
		if r.body != nil {
			r.add("Content-Length", strconv.FormatInt(lengthOr(r.body.n, 1<<40), 10))
		}
		r.add("Transfer-Encoding", "chunked")
		return chunkedBody(w, r, head, false)
	},
	// bad-chunks: a chunk size that is not hex, after a chunk longer than
	// its size says.
	"bad-chunks": func(w *wire, r *response, head HeadFunc) error {
		r.add("Transfer-Encoding", "chunked")
		if err := head(w, r); err != nil {
			return err
		}
		_, err := io.WriteString(w, "4\r\nmore than four\r\nzz\r\nbad\r\n0\r\n\r\n")
		return err
	},
	// close: no length at all; the body ends when the connection closes.
	"close": func(w *wire, r *response, head HeadFunc) error {
		return headAndBody(w, r, head, w)
	},
}

func lengthOr(n, unknown int64) int64 {
	if n < 0 {
		return unknown
	}
	return n
}

func headAndBody(w *wire, r *response, head HeadFunc, dst io.Writer) error {
	if err := head(w, r); err != nil {
		return err
	}
	if r.body == nil {
		return nil
	}
	return r.body.write(dst)
}

// chunkWriter writes each Write as one chunk.
type chunkWriter struct{ w io.Writer }

func (c chunkWriter) Write(b []byte) (int, error) {
	if len(b) == 0 {
		return 0, nil
	}
	if _, err := fmt.Fprintf(c.w, "%x\r\n", len(b)); err != nil {
		return 0, err
	}
	if _, err := c.w.Write(b); err != nil {
		return 0, err
	}
	_, err := io.WriteString(c.w, "\r\n")
	return len(b), err
}

func chunkedBody(w *wire, r *response, head HeadFunc, gz bool) error {
	if err := head(w, r); err != nil {
		return err
	}
	if r.body != nil {
		cw := chunkWriter{w}
		if gz {
			if r.body.gzipped != nil { // a bomb made once
				if _, err := cw.Write(r.body.gzipped()); err != nil {
					return err
				}
			} else {
				zw, _ := gzip.NewWriterLevel(cw, gzip.BestSpeed)
				if err := r.body.write(zw); err != nil {
					return err
				}
				if err := zw.Close(); err != nil {
					return err
				}
			}
		} else if err := r.body.write(cw); err != nil {
			return err
		}
	}
	_, err := io.WriteString(w, "0\r\n\r\n")
	return err
}

// Bodies: what the body is and how fast it comes.
var Bodies = map[string]BodyFunc{
	// fixed: Content(path, N) at once.
	"fixed": func(r *response) *bodySource {
		return &bodySource{n: r.recipe.N, write: func(w io.Writer) error {
			return writeContent(w, r.req.Path, r.recipe.N, 0, nil)
		}}
	},
	// stall: the first half of Content(path, N), then silence until the
	// connection is closed (by the peer or Drop), at most 10 minutes.
	"stall": func(r *response) *bodySource {
		return &bodySource{n: r.recipe.N, write: func(w io.Writer) error {
			if err := writeContent(w, r.req.Path, r.recipe.N/2, 0, nil); err != nil {
				return err
			}
			return r.w.hold(10 * time.Minute)
		}}
	},
	// trickle: Content(path, N) at 4 KiB/s.
	"trickle": func(r *response) *bodySource {
		return &bodySource{n: r.recipe.N, write: func(w io.Writer) error {
			return writeContent(w, r.req.Path, r.recipe.N, 1<<10, func() error { return r.w.sleep(250 * time.Millisecond) })
		}}
	},
	// endless: content without end (up to MaxEndless), as fast as read.
	"endless": func(r *response) *bodySource {
		return &bodySource{n: -1, write: func(w io.Writer) error {
			return writeContent(w, r.req.Path, MaxEndless, 0, nil)
		}}
	},
	// zeros: N zero bytes (the bomb's payload under gzip-chunked).
	"zeros": func(r *response) *bodySource {
		n := r.recipe.N
		return &bodySource{n: n, write: func(w io.Writer) error {
			zero := make([]byte, 64<<10)
			for left := n; left > 0; {
				k := min(left, int64(len(zero)))
				if _, err := w.Write(zero[:k]); err != nil {
					return err
				}
				left -= k
			}
			return nil
		}, gzipped: func() []byte { return gzipZeros(n) }}
	},
	// gzip-bomb: N zero bytes gzipped, sent as Content-Encoding: gzip.
	"gzip-bomb": func(r *response) *bodySource {
		z := gzipZeros(r.recipe.N)
		r.add("Content-Encoding", "gzip")
		return &bodySource{n: int64(len(z)), write: func(w io.Writer) error {
			_, err := w.Write(z)
			return err
		}}
	},
}

// writeContent writes n bytes of path's content, in pieces of step bytes
// (0: 32 KiB) with pause between them.
func writeContent(w io.Writer, path string, n int64, step int, pause func() error) error {
	if step == 0 {
		step = 32 << 10
	}
	cs := newContentStream(path)
	buf := make([]byte, step)
	for left := n; left > 0; {
		k := min(left, int64(step))
		cs.fill(buf[:k])
		if _, err := w.Write(buf[:k]); err != nil {
			return err
		}
		left -= k
		if pause != nil && left > 0 {
			if err := pause(); err != nil {
				return err
			}
		}
	}
	return nil
}

var (
	zerosMu sync.Mutex
	zerosGz = map[int64][]byte{}
)

// gzipZeros is n zero bytes gzipped, made once per n: one gzip member of
// 1 MiB of zeros (about 1 KiB) repeated, since a gzip file may hold many
// members, which decompress to their concatenation (RFC 1952 §2.2). 1 GiB
// is about 1 MiB on the wire and takes milliseconds to make.
func gzipZeros(n int64) []byte {
	zerosMu.Lock()
	defer zerosMu.Unlock()
	if z, ok := zerosGz[n]; ok {
		return z
	}
	member := func(k int64) []byte {
		var b bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&b, gzip.BestCompression)
		_, _ = zw.Write(make([]byte, k))
		_ = zw.Close()
		return b.Bytes()
	}
	const unit = 1 << 20
	full := member(unit)
	var out bytes.Buffer
	for left := n; left > 0; left -= unit {
		if left >= unit {
			out.Write(full)
		} else {
			out.Write(member(left))
		}
	}
	if n == 0 {
		out.Write(member(0))
	}
	zerosGz[n] = out.Bytes()
	return out.Bytes()
}

// respond writes the response of recipe rc to req.
func respond(w *wire, req *Request, rc Recipe) error {
	r := &response{w: w, req: req, recipe: rc, status: rc.Status}
	r.add("Date", time.Now().UTC().Format(http.TimeFormat))
	r.add("Server", "evilorigin")
	r.add("Connection", "close")
	r.body = Bodies[rc.Body](r)
	Policies[rc.Policy](r)
	if req.Method == http.MethodHead || r.status == http.StatusNotModified || r.status == http.StatusNoContent || r.status < 200 {
		body := r.body
		r.body = nil
		if req.Method == http.MethodHead && body != nil && body.n >= 0 {
			r.add("Content-Length", strconv.FormatInt(body.n, 10))
		}
	}
	return Framings[rc.Framing](w, r, Heads[rc.Head])
}
