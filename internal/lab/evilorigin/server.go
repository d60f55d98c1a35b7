package evilorigin

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"net"
	"net/netip"
	"net/textproto"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Timeouts of the server's own reads and writes: the origin bounds what
// it spends on a proxy as much as the proxy should bound what it spends on
// the origin.
const (
	// ReadTimeout bounds reading a request's head.
	ReadTimeout = 10 * time.Second
	// WriteTimeout bounds each write: a proxy that stops reading for
	// longer ends the response (the connection is closed).
	WriteTimeout = 30 * time.Second
	// MaxRequestHead is the longest request head read (a longer one is
	// answered 431).
	MaxRequestHead = 64 << 10
	// MaxEndless caps "without end": a head or body that has written this
	// much stops (a safety net for the lab itself, far beyond any bound a
	// proxy should allow).
	MaxEndless = 4 << 30
)

// Request is what the origin read of a request.
type Request struct {
	Method string
	Target string // as sent
	Path   string
	Query  url.Values
	// Header is the header section as parsed by net/textproto.
	Header textproto.MIMEHeader
	// Raw is the request head as received, request line included.
	Raw []byte
	// Host is the Host field.
	Host string
	// Nth counts the requests for this Target the server has read, this
	// one included (1 for the first).
	Nth int64
}

// Server is a running evil origin.
type Server struct {
	ln   net.Listener
	addr netip.AddrPort

	requests atomic.Int64
	byPath   sync.Map // path -> *atomic.Int64
	byTarget sync.Map // request target -> *atomic.Int64

	mu     sync.Mutex
	conns  map[net.Conn]*wire
	closed bool
	wg     sync.WaitGroup
}

// Listen starts an evil origin on ip:port (port 0: any free port). Only
// loopback addresses are accepted: this is a weapon.
func Listen(ip netip.Addr, port int) (*Server, error) {
	if !ip.IsLoopback() {
		return nil, fmt.Errorf("evilorigin: %s is not a loopback address", ip)
	}
	ln, err := net.Listen("tcp", netip.AddrPortFrom(ip, uint16(port)).String())
	if err != nil {
		return nil, err
	}
	s := &Server{ln: ln, addr: netip.MustParseAddrPort(ln.Addr().String()), conns: map[net.Conn]*wire{}}
	s.wg.Add(1)
	go s.accept()
	return s, nil
}

// Addr is the address the server listens on.
func (s *Server) Addr() netip.AddrPort { return s.addr }

// Requests is how many requests the server has read.
func (s *Server) Requests() int64 { return s.requests.Load() }

// RequestsFor is how many requests for path (without query) it has read.
func (s *Server) RequestsFor(path string) int64 {
	if v, ok := s.byPath.Load(path); ok {
		return v.(*atomic.Int64).Load()
	}
	return 0
}

// Drop closes every open connection: every behaviour in progress ends.
func (s *Server) Drop() { s.DropIf(func(*Request) bool { return true }) }

// DropIf closes the connections whose request drop approves (a connection
// whose request head has not been read yet is dropped only by Drop).
func (s *Server) DropIf(drop func(*Request) bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for c, w := range s.conns {
		req := w.req.Load()
		if req == nil && !drop(nil) || req != nil && !drop(req) {
			continue
		}
		close(w.done)
		_ = c.Close()
		delete(s.conns, c)
	}
}

// Close stops the server and waits for its goroutines.
func (s *Server) Close() error {
	s.mu.Lock()
	s.closed = true
	s.mu.Unlock()
	err := s.ln.Close()
	s.Drop()
	s.wg.Wait()
	return err
}

func (s *Server) accept() {
	defer s.wg.Done()
	for {
		c, err := s.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			time.Sleep(10 * time.Millisecond) // EMFILE and the like: don't spin
			continue
		}
		w := &wire{Conn: c, done: make(chan struct{})}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			_ = c.Close()
			return
		}
		s.conns[c] = w
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.serve(w)
			s.mu.Lock()
			if _, ok := s.conns[c]; ok {
				close(w.done)
				delete(s.conns, c)
			}
			s.mu.Unlock()
			_ = c.Close()
		}()
	}
}

// serve answers one request per connection (every response says
// Connection: close, and a lie about a body's end would desynchronize a
// second one anyway).
func (s *Server) serve(w *wire) {
	req, err := readRequest(w.Conn)
	if err != nil {
		if errors.Is(err, errHeadTooLong) {
			_, _ = io.WriteString(w, "HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
		} else if !errors.Is(err, io.EOF) {
			_, _ = io.WriteString(w, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n")
		}
		return
	}
	w.req.Store(req)
	s.requests.Add(1)
	v, _ := s.byPath.LoadOrStore(req.Path, new(atomic.Int64))
	v.(*atomic.Int64).Add(1)
	v, _ = s.byTarget.LoadOrStore(req.Target, new(atomic.Int64))
	req.Nth = v.(*atomic.Int64).Add(1)
	r, err := ParseRecipe(req.Query)
	if err != nil {
		msg := err.Error() + "\n"
		fmt.Fprintf(w, "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Type: text/plain\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
		return
	}
	_ = respond(w, req, r)
}

var (
	errHeadTooLong = errors.New("evilorigin: request head too long")
	errTLS         = errors.New("evilorigin: a TLS handshake on plain HTTP")
)

// readRequest reads one request head (at most MaxRequestHead bytes within
// ReadTimeout) and ignores any body.
func readRequest(c net.Conn) (*Request, error) {
	if err := c.SetReadDeadline(time.Now().Add(ReadTimeout)); err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(io.LimitReader(c, MaxRequestHead+1), 4096)
	// A TLS handshake (a client that was told this origin speaks https)
	// is refused at once rather than after ReadTimeout of waiting for a
	// request head that will never come.
	if first, err := br.Peek(1); err == nil && first[0] == 0x16 {
		return nil, errTLS
	}
	var raw bytes.Buffer
	for {
		line, err := br.ReadSlice('\n')
		raw.Write(line)
		if raw.Len() > MaxRequestHead {
			return nil, errHeadTooLong
		}
		if err != nil && !errors.Is(err, bufio.ErrBufferFull) {
			if raw.Len() == 0 {
				return nil, io.EOF
			}
			return nil, err
		}
		if bytes.HasSuffix(raw.Bytes(), []byte("\r\n\r\n")) || bytes.Equal(raw.Bytes(), []byte("\r\n")) {
			break
		}
	}
	tp := textproto.NewReader(bufio.NewReader(bytes.NewReader(raw.Bytes())))
	line, err := tp.ReadLine()
	if err != nil {
		return nil, err
	}
	method, rest, ok1 := strings.Cut(line, " ")
	target, proto, ok2 := strings.Cut(rest, " ")
	if !ok1 || !ok2 || !strings.HasPrefix(proto, "HTTP/1.") {
		return nil, fmt.Errorf("evilorigin: bad request line %q", line)
	}
	hdr, err := tp.ReadMIMEHeader()
	if err != nil && len(hdr) == 0 {
		return nil, err
	}
	u, err := url.ParseRequestURI(target)
	if err != nil {
		return nil, err
	}
	return &Request{Method: method, Target: target, Path: u.Path, Query: u.Query(), Header: hdr,
		Raw: raw.Bytes(), Host: hdr.Get("Host")}, nil
}

// wire is a connection whose writes each have a deadline and whose sleeps
// end when the server drops it.
type wire struct {
	net.Conn
	done    chan struct{}
	written int64
	req     atomic.Pointer[Request] // once read
}

func (w *wire) Write(b []byte) (int, error) {
	if err := w.SetWriteDeadline(time.Now().Add(WriteTimeout)); err != nil {
		return 0, err
	}
	n, err := w.Conn.Write(b)
	w.written += int64(n)
	return n, err
}

var errDropped = errors.New("evilorigin: connection dropped")

// sleep waits d, or returns errDropped if the connection is dropped first.
func (w *wire) sleep(d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-w.done:
		return errDropped
	case <-t.C:
		return nil
	}
}

// hold waits until the connection is dropped or the peer closes it (a
// read returns), at most limit.
func (w *wire) hold(limit time.Duration) error {
	closed := make(chan struct{})
	go func() {
		_ = w.SetReadDeadline(time.Now().Add(limit))
		_, _ = w.Read(make([]byte, 1))
		close(closed)
	}()
	select {
	case <-w.done:
	case <-closed:
	}
	return errDropped
}
