package coralcaddy

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
	"net/textproto"
	"strconv"
	"strings"
	"time"
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

// fetchTransferCoded GETs req on a connection of its own through tr's
// dialer and TLS settings, and returns the response with its transfer
// codings undone (see the file comment). The header must arrive within
// headerTimeout.
func fetchTransferCoded(ctx context.Context, tr *http.Transport, req *http.Request, headerTimeout time.Duration) (*http.Response, error) {
	addr := req.URL.Host
	if req.URL.Port() == "" {
		addr = net.JoinHostPort(req.URL.Hostname(), strconv.Itoa(schemeDefaultPort(req.URL.Scheme)))
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
	if headerTimeout > 0 {
		_ = conn.SetReadDeadline(time.Now().Add(headerTimeout))
	}
	br := bufio.NewReader(conn)
	resp, codings, err := readResponseHead(br)
	if err != nil {
		return fail(err)
	}
	_ = conn.SetReadDeadline(time.Time{})
	body, err := undoTransferCodings(br, codings)
	if err != nil {
		return fail(err)
	}
	resp.Request = req
	resp.Body = &connBody{Reader: body, close: func() error { stop(); return conn.Close() }}
	return resp, nil
}

// readResponseHead reads a response's status line and header, skipping
// interim (1xx) responses, and returns the response (without a body) and
// the transfer codings of its Transfer-Encoding lines, in the order
// applied.
func readResponseHead(br *bufio.Reader) (*http.Response, []string, error) {
	tp := textproto.NewReader(br)
	for {
		line, err := tp.ReadLine()
		if err != nil {
			return nil, nil, err
		}
		proto, status, ok := strings.Cut(line, " ")
		if !ok || !strings.HasPrefix(proto, "HTTP/1.") {
			return nil, nil, fmt.Errorf("coral_proxy: malformed status line %q", quoteTarget(line))
		}
		code, err := strconv.Atoi(strings.TrimSpace(status[:min(3, len(status))]))
		if err != nil || code < 100 || code > 999 {
			return nil, nil, fmt.Errorf("coral_proxy: malformed status line %q", quoteTarget(line))
		}
		mh, err := tp.ReadMIMEHeader()
		if err != nil {
			return nil, nil, err
		}
		if code < 200 {
			continue
		}
		h := http.Header(mh)
		var codings []string
		for _, v := range h.Values("Transfer-Encoding") {
			for c := range strings.SplitSeq(v, ",") {
				if c = strings.ToLower(strings.TrimSpace(c)); c != "" {
					codings = append(codings, c)
				}
			}
		}
		// With a Transfer-Encoding, Content-Length means nothing (RFC
		// 9112 §6.3); neither is part of the decoded response.
		h.Del("Transfer-Encoding")
		h.Del("Content-Length")
		resp := &http.Response{
			Status: status, StatusCode: code, Proto: proto, ProtoMajor: 1, ProtoMinor: int(proto[len(proto)-1] - '0'),
			Header: h, ContentLength: -1, Close: true,
		}
		return resp, codings, nil
	}
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
