package proxy

// Bounds on the response heads the proxy reads from origins and peers.
//
// A head is read before anything is known about the sender, so every one
// is bounded in bytes, line length, field count and time, whoever reads
// it. net/http's transports (originTransport, the peer transport) take
// maxHeadBytes as MaxResponseHeaderBytes and the origin or peer timeout as
// ResponseHeaderTimeout; their field count is checked once they have parsed
// a head (checkHeadFields: the byte bound already bounds what that parse
// took), and interimLimiter bounds the interim (1xx) responses they hand to
// the proxy, each of which would otherwise get maxHeadBytes of its own. The
// proxy's own reader (readHead, for the responses net/http refuses; see
// transfercoding.go) enforces all of them as it reads.

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/textproto"
	"strconv"
	"strings"
	"sync/atomic"
	"time"
)

const (
	// maxHeadBytes bounds a response head from an origin or a peer: its
	// status line and fields (and, read by readHead, those of the interim
	// responses before it).
	maxHeadBytes = 64 << 10
	// maxHeadLine bounds one line of a head read by readHead.
	maxHeadLine = 16 << 10
	// maxHeadFields bounds the field lines of one response head.
	maxHeadFields = 256
	// maxInterimResponses bounds the interim (1xx) responses one download
	// accepts before its final response.
	maxInterimResponses = 8
)

var (
	// errHeadTooLarge is why a head beyond the bounds above is refused.
	errHeadTooLarge = errors.New("coral_proxy: response head beyond the proxy's bounds")
	// errMalformedHead is why a head that is not HTTP/1.1 is refused.
	errMalformedHead = errors.New("coral_proxy: malformed response head")
)

// checkHeadFields refuses a head (parsed by net/http) of more than
// maxHeadFields field lines.
func checkHeadFields(h http.Header) error {
	n := 0
	for _, v := range h {
		n += len(v)
	}
	if n > maxHeadFields {
		return fmt.Errorf("%w: %d fields, at most %d", errHeadTooLarge, n, maxHeadFields)
	}
	return nil
}

// interimLimiter counts interim responses and refuses the one past
// maxInterimResponses (as the error of a Got1xxResponse hook, which ends
// the fetch). Peers are asked two at a time, so it counts atomically.
type interimLimiter struct{ n atomic.Int32 }

func (l *interimLimiter) next() error {
	if l.n.Add(1) > maxInterimResponses {
		return fmt.Errorf("%w: more than %d interim responses", errHeadTooLarge, maxInterimResponses)
	}
	return nil
}

// sourceCounter is the read side of a connection whose head readHead
// reads: it holds the head to maxHeadBytes and counts every byte read.
type sourceCounter struct {
	r    io.Reader
	left int64 // bytes the head may still take; math.MaxInt64 once it is read
	n    int64 // bytes read
}

func (c *sourceCounter) Read(p []byte) (int, error) {
	if c.left <= 0 {
		return 0, fmt.Errorf("%w: more than %d bytes", errHeadTooLarge, maxHeadBytes)
	}
	if int64(len(p)) > c.left {
		p = p[:c.left]
	}
	n, err := c.r.Read(p)
	c.left -= int64(n)
	c.n += int64(n)
	return n, err
}

// readHead reads a response head from conn, skipping interim responses,
// within timeout (which must be positive) and the bounds above. It returns
// the response without a body; the transfer codings its Transfer-Encoding
// lines name, in the order applied; a reader positioned at the body; and
// the counter of the bytes read from conn, head included.
func readHead(conn net.Conn, timeout time.Duration) (*http.Response, []string, *bufio.Reader, *sourceCounter, error) {
	if err := conn.SetReadDeadline(time.Now().Add(timeout)); err != nil {
		return nil, nil, nil, nil, err
	}
	src := &sourceCounter{r: conn, left: maxHeadBytes}
	br := bufio.NewReaderSize(src, maxHeadLine)
	for interim := 0; ; interim++ {
		if interim > maxInterimResponses {
			return nil, nil, nil, nil, fmt.Errorf("%w: more than %d interim responses", errHeadTooLarge, maxInterimResponses)
		}
		resp, codings, err := readOneHead(br)
		if err != nil {
			return nil, nil, nil, nil, err
		}
		if resp.StatusCode < 200 {
			continue
		}
		// The body has bounds of its own (idle time, download time, size).
		// A connection the origin already closed may refuse to clear its
		// deadline; the body read then ends anyway.
		src.left = math.MaxInt64
		_ = conn.SetReadDeadline(time.Time{})
		return resp, codings, br, src, nil
	}
}

// readOneHead reads one status line and its fields.
func readOneHead(br *bufio.Reader) (*http.Response, []string, error) {
	line, err := readHeadLine(br)
	if err != nil {
		return nil, nil, err
	}
	proto, status, _ := strings.Cut(line, " ")
	if proto != "HTTP/1.1" && proto != "HTTP/1.0" {
		return nil, nil, fmt.Errorf("%w: status line %q", errMalformedHead, quoteTarget(line))
	}
	code, err := strconv.Atoi(status[:min(3, len(status))])
	if err != nil || code < 100 || code > 999 || (len(status) > 3 && status[3] != ' ') {
		return nil, nil, fmt.Errorf("%w: status line %q", errMalformedHead, quoteTarget(line))
	}
	h := make(http.Header)
	for fields := 0; ; fields++ {
		line, err := readHeadLine(br)
		if err != nil {
			return nil, nil, err
		}
		if line == "" {
			break
		}
		if fields == maxHeadFields {
			return nil, nil, fmt.Errorf("%w: more than %d fields", errHeadTooLarge, maxHeadFields)
		}
		// A folded line (obs-fold) is refused: a proxy may answer 502
		// to one (RFC 9112 §5.2).
		name, value, ok := strings.Cut(line, ":")
		if !ok || !validFieldName(name) {
			return nil, nil, fmt.Errorf("%w: field line %q", errMalformedHead, quoteTarget(line))
		}
		value = strings.Trim(value, " \t")
		if !validFieldValue(value) {
			return nil, nil, fmt.Errorf("%w: value of %s", errMalformedHead, name)
		}
		key := textproto.CanonicalMIMEHeaderKey(name)
		h[key] = append(h[key], value)
	}
	var codings []string
	for _, v := range h.Values("Transfer-Encoding") {
		for c := range strings.SplitSeq(v, ",") {
			if c = strings.ToLower(strings.TrimSpace(c)); c != "" {
				codings = append(codings, c)
			}
		}
	}
	// With a Transfer-Encoding, Content-Length means nothing (RFC 9112
	// §6.3); neither is part of the decoded response.
	h.Del("Transfer-Encoding")
	h.Del("Content-Length")
	resp := &http.Response{
		Status: status, StatusCode: code, Proto: proto, ProtoMajor: 1, ProtoMinor: int(proto[7] - '0'),
		Header: h, ContentLength: -1, Close: true,
	}
	return resp, codings, nil
}

// readHeadLine reads one line of a head (CRLF or a bare LF, RFC 9112
// §2.2), at most maxHeadLine bytes.
func readHeadLine(br *bufio.Reader) (string, error) {
	line, err := br.ReadSlice('\n')
	switch {
	case errors.Is(err, bufio.ErrBufferFull):
		return "", fmt.Errorf("%w: a line of more than %d bytes", errHeadTooLarge, maxHeadLine)
	case err == io.EOF:
		return "", io.ErrUnexpectedEOF
	case err != nil:
		return "", err
	}
	line = bytes.TrimSuffix(line[:len(line)-1], []byte{'\r'})
	return string(line), nil
}

// validFieldName reports whether s is a token (RFC 9110 §5.1).
func validFieldName(s string) bool {
	if s == "" {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		if !(c >= 'a' && c <= 'z' || c >= 'A' && c <= 'Z' || c >= '0' && c <= '9' || strings.IndexByte("!#$%&'*+-.^_`|~", c) >= 0) {
			return false
		}
	}
	return true
}

// validFieldValue reports whether s holds no control character but HTAB
// (RFC 9110 §5.5).
func validFieldValue(s string) bool {
	for i := 0; i < len(s); i++ {
		if c := s[i]; c < ' ' && c != '\t' || c == 0x7f {
			return false
		}
	}
	return true
}
