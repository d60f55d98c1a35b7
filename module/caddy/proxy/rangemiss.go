package proxy

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Range requests for objects not in the cache (issue 42).
//
// A client asking for a range of an object this proxy does not have, or
// is still downloading, wants those bytes now: a video player starting a
// cold file, a download resuming. Serving it from the whole object would
// make it wait for (and receive) everything before its range. Instead the
// range is asked of the origin (with the client's If-Range), relayed
// uncached, and the whole object is downloaded for the cache in the
// background when no download runs yet (one slot, like a stale refresh).
// An origin that answers the range with 206 is relayed as it is; one that
// ignores ranges and sends the whole 200 is cut down to the range by the
// proxy, which reads and drops the bytes before it and stops after it, so
// only the range crosses the client's socket either way. If-Range is
// honoured: a validator that does not match the origin's response (strong
// entity tag, or exact Last-Modified) gets the whole 200, as RFC 9110
// §13.1.5 says. Requests with several ranges are forwarded as they are;
// a 200 answer to them is relayed whole.

// byteRange is one range of a Range header: first..last inclusive, or the
// last suffix bytes (suffix > 0), or first.. to the end (last < 0).
type byteRange struct {
	first, last, suffix int64
}

// parseSingleRange parses a Range field with one byte range. ok is false
// for anything else (another unit, several ranges, bad syntax): such a
// request is forwarded, never cut here.
func parseSingleRange(v string) (br byteRange, ok bool) {
	spec, found := strings.CutPrefix(strings.TrimSpace(v), "bytes=")
	if !found || strings.Contains(spec, ",") {
		return br, false
	}
	a, b, found := strings.Cut(strings.TrimSpace(spec), "-")
	if !found {
		return br, false
	}
	if a == "" {
		n, err := strconv.ParseInt(b, 10, 64)
		if err != nil || n <= 0 || !isDigits(b) {
			return br, false
		}
		return byteRange{suffix: n, last: -1}, true
	}
	first, err := strconv.ParseInt(a, 10, 64)
	if err != nil || !isDigits(a) {
		return br, false
	}
	br = byteRange{first: first, last: -1}
	if b != "" {
		last, err := strconv.ParseInt(b, 10, 64)
		if err != nil || !isDigits(b) || last < first {
			return br, false
		}
		br.last = last
	}
	return br, true
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return s != ""
}

// resolve turns br into offsets within a body of size bytes (-1:
// unknown). ok is false when it cannot be answered as a 206 from here:
// the size is needed and unknown, or the range starts beyond the end.
func (br byteRange) resolve(size int64) (first, last int64, ok bool) {
	switch {
	case br.suffix > 0:
		if size < 0 {
			return 0, 0, false
		}
		return max(size-br.suffix, 0), size - 1, size > 0
	case size < 0:
		return br.first, br.last, br.last >= 0
	case br.first >= size:
		return 0, 0, false
	case br.last < 0 || br.last >= size:
		return br.first, size - 1, true
	}
	return br.first, br.last, true
}

// ifRangeMatches reports whether an If-Range value (none: "") holds for a
// response with header h (RFC 9110 §13.1.5: strong entity tags, or an
// exact Last-Modified date).
func ifRangeMatches(v string, h http.Header) bool {
	v = strings.TrimSpace(v)
	switch {
	case v == "":
		return true
	case strings.HasPrefix(v, `"`):
		etag := h.Get("Etag")
		return etag == v
	case strings.HasPrefix(v, "W/"):
		return false // a weak tag never matches for ranges
	}
	lm := h.Get("Last-Modified")
	return lm != "" && lm == v
}

// cutToRange turns resp, a whole 200, into the 206 of bytes first..last.
func cutToRange(resp *http.Response, first, last int64) {
	total := "*"
	if resp.ContentLength >= 0 {
		total = strconv.FormatInt(resp.ContentLength, 10)
	}
	resp.StatusCode = http.StatusPartialContent
	resp.Header.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%s", first, last, total))
	resp.Header.Set("Content-Length", strconv.FormatInt(last-first+1, 10))
	resp.Body = &rangeBody{rc: resp.Body, skip: first, left: last - first + 1}
}

// rangeBody reads the bytes of a range out of a whole body: it drops the
// first skip bytes and ends after left more.
type rangeBody struct {
	rc         io.ReadCloser
	skip, left int64
}

func (b *rangeBody) Read(p []byte) (int, error) {
	if b.skip > 0 {
		if _, err := io.CopyN(io.Discard, b.rc, b.skip); err != nil {
			if err == io.EOF {
				err = io.ErrUnexpectedEOF
			}
			return 0, err
		}
		b.skip = 0
	}
	if b.left <= 0 {
		return 0, io.EOF
	}
	n, err := b.rc.Read(p[:min(int64(len(p)), b.left)])
	b.left -= int64(n)
	if err == io.EOF && b.left > 0 {
		err = io.ErrUnexpectedEOF
	}
	if b.left == 0 && err == nil {
		err = io.EOF
	}
	return n, err
}

func (b *rangeBody) Close() error { return b.rc.Close() }

// setRangeFields sets a request's Range and, if any, If-Range.
func setRangeFields(h http.Header, rangeField, ifRange string) {
	h.Set("Range", rangeField)
	if ifRange != "" {
		h.Set("If-Range", ifRange)
	}
}

// shapeRange makes resp, the answer of an origin or a peer to a request
// with Range rangeField (and If-Range ifRange), what the client asked
// for: a whole 200 that the range applies to is cut to the range, or
// made a 416 when the range starts past its end (RFC 9110 §15.5.17); a
// 206, an error, the whole 200 that If-Range asks for, or an encoded body
// go through as they are.
func shapeRange(resp *http.Response, rangeField, ifRange string) {
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Encoding") != "" || !ifRangeMatches(ifRange, resp.Header) {
		return
	}
	br, ok := parseSingleRange(rangeField)
	if !ok {
		return
	}
	if first, last, ok := br.resolve(resp.ContentLength); ok {
		cutToRange(resp, first, last)
	} else if resp.ContentLength >= 0 {
		notSatisfiable(resp)
	}
}

// notSatisfiable turns resp, a whole 200 of known length, into the 416
// a range past its end gets.
func notSatisfiable(resp *http.Response) {
	resp.Body.Close()
	resp.StatusCode = http.StatusRequestedRangeNotSatisfiable
	resp.Header.Set("Content-Range", "bytes */"+strconv.FormatInt(resp.ContentLength, 10))
	resp.Header.Set("Content-Length", "0")
	resp.Header.Del("Content-Type")
	resp.ContentLength = 0
	resp.Body = http.NoBody
}

// rangeFromPeers asks the peers download d asks (once its put+get has
// found them: at most peer_timeout is waited for that) for the range,
// only-if-cached: a peer with the object, or the slices the range
// covers, answers 206 (a peer still downloading the object whole sends
// it whole, and the range is cut out of it). It returns nil when no peer
// has it (or there is no d), and the response's source otherwise.
func (p *Proxy) rangeFromPeers(ctx context.Context, fr fetchRequest, d *download, rangeField, ifRange string) (*http.Response, string) {
	if d == nil || d.askingKnown == nil {
		return nil, ""
	}
	t := time.NewTimer(p.peerTimeout)
	defer t.Stop()
	select {
	case <-d.askingKnown:
	case <-t.C:
		return nil, ""
	case <-ctx.Done():
		return nil, ""
	}
	asking := d.asking.Load()
	if asking == nil || len(*asking) == 0 {
		return nil, ""
	}
	peers := make([]reference, len(*asking))
	for i, a := range *asking {
		peers[i] = reference{Addr: a}
	}
	pfr := fr
	pfr.peerFields = http.Header{}
	setRangeFields(pfr.peerFields, rangeField, ifRange)
	resp, _ := p.fetchFromPeers(ctx, pfr, peers)
	if resp == nil {
		return nil, ""
	}
	shapeRange(resp, rangeField, ifRange)
	return resp, PeerSource(d.askingLevel)
}
