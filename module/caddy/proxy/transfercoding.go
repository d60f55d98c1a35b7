package proxy

// Responses whose Transfer-Encoding net/http refuses.
//
// Go's HTTP/1.1 client accepts "Transfer-Encoding: chunked" and nothing
// else: a response with "gzip, chunked", with chunked twice, with two
// Transfer-Encoding lines, or with a coding other than chunked as the last
// one (the body then ends when the connection closes, RFC 9112 §6.3) is an
// error. Origins send such responses, and they are valid HTTP/1.1. When the
// transport refuses one, the proxy fetches it again on a connection of its
// own (the same guarded dialer, Connection: close), reads the head itself,
// and undoes the transfer codings it knows, last applied first: chunked,
// gzip (x-gzip), deflate (zlib), and the obsolete identity. A coding it
// does not know cannot be undone, and the fetch fails (502): relaying such
// bytes as the representation would serve corrupt content. Transfer
// codings are a property of the message, not of the content (RFC 9112
// §6.1), so the decoded response has no Transfer-Encoding, and nothing of
// it is stored (storedHeader drops it as a hop-by-hop field).

import (
	"bufio"
	"compress/gzip"
	"compress/zlib"
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httputil"
	"strconv"
	"strings"
	"time"

	"github.com/coralcdn/coral/coralname"
)

// errUnknownTransferCoding is why a response with a transfer coding the
// proxy cannot undo is refused.
var errUnknownTransferCoding = errors.New("coral_proxy: origin used a transfer coding the proxy cannot decode")

// refusedTransferCoding reports whether err is net/http's refusal of a
// response's Transfer-Encoding (its errors are not exported; their text
// is stable since Go 1.15).
func refusedTransferCoding(err error) bool {
	if err == nil {
		return false
	}
	s := err.Error()
	return strings.Contains(s, "unsupported transfer encoding") || strings.Contains(s, "too many transfer encodings")
}

// Decoding is bounded like everything else read from an origin: the head
// by readHead (responsehead.go); the decoded body to maxDecoded bytes
// (max_object_size), counted as they are decoded, and to
// maxTransferCodingRatio times the bytes received plus
// transferCodingAllowance, so that a small compressed stream cannot make
// the proxy produce, relay or store many times more than the origin sent.
const (
	maxTransferCodingRatio  = 100
	transferCodingAllowance = 1 << 20
)

// errTransferCodingBound is why a decoded body is cut off.
var errTransferCodingBound = errors.New("coral_proxy: transfer-coded body decodes beyond the proxy's bounds")

// fetchTransferCoded GETs req on a connection of its own through tr's
// dialer and TLS settings, and returns the response with its transfer
// codings undone (see the file comment), its decoded body bounded to
// maxDecoded bytes. The header must arrive within headerTimeout.
func fetchTransferCoded(ctx context.Context, tr *http.Transport, req *http.Request, headerTimeout time.Duration, maxDecoded int64) (*http.Response, error) {
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), strconv.Itoa(coralname.DefaultPort(req.URL.Scheme)))
	}
	conn, err := tr.DialContext(ctx, "tcp", addr)
	if err != nil {
		return nil, err
	}
	if req.URL.Scheme == "https" {
		cfg := &tls.Config{}
		if tr.TLSClientConfig != nil {
			cfg = tr.TLSClientConfig.Clone()
		}
		cfg.ServerName, cfg.NextProtos = req.URL.Hostname(), []string{"http/1.1"}
		tc := tls.Client(conn, cfg)
		if err := tc.HandshakeContext(ctx); err != nil {
			conn.Close()
			return nil, err
		}
		conn = tc
	}
	stop := context.AfterFunc(ctx, func() { conn.Close() })
	fail := func(err error) (*http.Response, error) {
		stop()
		conn.Close()
		return nil, err
	}
	out := req.Clone(ctx)
	out.Header.Set("Connection", "close")
	out.Close = true
	if err := out.Write(conn); err != nil {
		return fail(err)
	}
	if headerTimeout <= 0 {
		headerTimeout = defaultOriginTimeout
	}
	resp, codings, br, src, err := readHead(conn, headerTimeout)
	if err != nil {
		return fail(err)
	}
	body, err := undoTransferCodings(br, codings)
	if err != nil {
		return fail(err)
	}
	resp.Request = req
	bounded := &decodeBound{r: body, src: src, max: maxDecoded}
	resp.Body = &connBody{Reader: bounded, close: func() error { stop(); return conn.Close() }}
	return resp, nil
}

// decodeBound ends a decoded body at the bounds of the file comment.
type decodeBound struct {
	r       io.Reader
	src     *sourceCounter // the bytes received
	decoded int64
	max     int64 // <= 0: no bound but the ratio
}

func (d *decodeBound) Read(p []byte) (int, error) {
	n, err := d.r.Read(p)
	d.decoded += int64(n)
	if d.max > 0 && d.decoded > d.max {
		return n, fmt.Errorf("%w: more than %d bytes (max_object_size)", errTransferCodingBound, d.max)
	}
	if d.decoded > maxTransferCodingRatio*d.src.n+transferCodingAllowance {
		return n, fmt.Errorf("%w: %d bytes from %d received (at most %d times as many, plus %d)",
			errTransferCodingBound, d.decoded, d.src.n, maxTransferCodingRatio, transferCodingAllowance)
	}
	return n, err
}

// undoTransferCodings returns the body read from br with codings undone:
// a final chunked coding delimits the body; without one the body runs to
// the end of the connection (RFC 9112 §6.3).
func undoTransferCodings(br *bufio.Reader, codings []string) (io.Reader, error) {
	var body io.Reader = br
	for i := len(codings) - 1; i >= 0; i-- {
		switch codings[i] {
		case "chunked":
			body = httputil.NewChunkedReader(body)
		case "gzip", "x-gzip":
			body = &lazyDecoder{src: body, open: func(r io.Reader) (io.Reader, error) { return gzip.NewReader(r) }}
		case "deflate":
			body = &lazyDecoder{src: body, open: func(r io.Reader) (io.Reader, error) { return zlib.NewReader(r) }}
		case "identity":
		default:
			return nil, fmt.Errorf("%w: %q", errUnknownTransferCoding, codings[i])
		}
	}
	return body, nil
}

// lazyDecoder opens a decompressor on its first read, so that reading the
// compressed header waits for the body like any other read.
type lazyDecoder struct {
	src  io.Reader
	open func(io.Reader) (io.Reader, error)
	r    io.Reader
	err  error
}

func (d *lazyDecoder) Read(p []byte) (int, error) {
	if d.r == nil && d.err == nil {
		d.r, d.err = d.open(d.src)
	}
	if d.err != nil {
		return 0, d.err
	}
	return d.r.Read(p)
}

// connBody is a response body read from a connection of its own.
type connBody struct {
	io.Reader
	close func() error
}

func (b *connBody) Close() error { return b.close() }
