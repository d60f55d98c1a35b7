package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/httpcache"
	"go.uber.org/zap"
)

// serveStored writes a cached (or still arriving) object, or a sliced one
// (serveSliced, fetching its slices for fr). To a peer (an only-if-cached
// request) it also says how long the copy stays fresh here
// (peerFreshnessField), which bounds the peer's copy. now is the time the
// response's Age is computed for: the caller's clock reading (a hit reads
// the clock once).
func (p *Proxy) serveStored(w http.ResponseWriter, r *http.Request, fr *fetchRequest, rd *diskcache.Reader, status CacheStatus, source string, toPeer bool, now time.Time) error {
	defer rd.Close()
	m := rd.Meta()
	hdr := w.Header()
	// m.Header may be shared with other readers of the object (the store
	// keeps the metadata of recently read objects in memory), so the
	// response gets value slices of its own, capped so that an append
	// reallocates: one allocation for them all and the fields set here.
	vals := make([]string, 0, len(m.Header)+5)
	for k, v := range m.Header {
		if !toPeer && k == httpcache.CoralOnlyField || k == "Set-Cookie" {
			// Coral-only: for Coral proxies only (targeted.go).
			// Set-Cookie: a cookie is one client's, never shared.
			continue
		}
		vals = append(vals, v...)
		hdr[k] = vals[len(vals)-len(v) : len(vals) : len(vals)]
	}
	delete(hdr, "Set-Cookie") // one set before the proxy ran
	if !toPeer {
		p.localizeLocation(hdr, r)
	}
	vals = setOwnValue(hdr, vals, "Via", "1.1 coral")
	vals = setOwnValue(hdr, vals, "Cache-Status", status.headerValue(source))
	vals = setOwnValue(hdr, vals, "Age", formatAge(storedAge(&m, now)))
	if toPeer {
		left := max(m.Expires.Sub(now), 0)
		vals = setOwnValue(hdr, vals, peerFreshnessField, strconv.FormatInt(int64(left/time.Second), 10))
	}
	if sl := m.Extra[slicesField]; sl != "" {
		return p.serveSliced(w, r, fr, rd, sl, toPeer)
	}
	if !rd.Complete() || m.Status != http.StatusOK || !plainRequest(r, hdr) {
		return serveStoredOther(w, r, rd, m.Status, m.Size, m.Header)
	}
	// What ServeContent sends for a request without conditions or
	// ranges, without its checks, date parsing and formatting.
	setOwnValue(hdr, vals, "Accept-Ranges", "bytes")
	if cl := hdr["Content-Length"]; len(cl) != 1 || !isDecimal(cl[0], m.Size) {
		hdr["Content-Length"] = []string{strconv.FormatInt(m.Size, 10)}
	}
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodHead {
		return nil
	}
	if n, err := rd.WriteTo(w); err != nil && n != m.Size {
		// The client went away, or the file is damaged: never let a
		// truncated body look complete.
		return cutShort(w, err)
	}
	return nil
}

// serveStoredOther sends what serveStored does not send itself: a
// complete 200 to a request with a range or a precondition (or without a
// stored Content-Type, or with a Content-Encoding), through
// http.ServeContent; any other status; a body still being downloaded. Out
// of serveStored so that a plain hit's frame stays small (see ServeHTTP).
// stored is the stored header (for its Last-Modified).
func serveStoredOther(w http.ResponseWriter, r *http.Request, rd *diskcache.Reader, status int, size int64, stored http.Header) error {
	hdr := w.Header()
	if rd.Complete() && status == http.StatusOK {
		// Ranges and conditional requests are answered from the cache.
		// The file itself, so that bodies go out with sendfile.
		http.ServeContent(w, r, "", lastModified(stored), rd.Content())
		return nil
	}
	hdr.Del("Content-Length")
	if size >= 0 {
		hdr.Set("Content-Length", strconv.FormatInt(size, 10))
	}
	w.WriteHeader(status)
	if r.Method == http.MethodHead {
		return nil
	}
	var n int64
	var err error
	if rd.Complete() {
		n, err = io.Copy(w, rd)
	} else {
		n, err = copyAsItArrives(w, rd, nil)
	}
	if err != nil && (size < 0 || n != size) {
		// The download failed or the client went away: never let a
		// truncated body look complete.
		return cutShort(w, err)
	}
	return nil
}

// serveSliced answers a request for a sliced object (slices.go) whose
// manifest rd is (spec: its slicesField), the head already set by
// serveStored, fetching its slices for fr: through
// http.ServeContent over the slices, fetched as they are needed; to a
// peer, the one slice it asks for, or a range this proxy holds whole.
func (p *Proxy) serveSliced(w http.ResponseWriter, r *http.Request, frp *fetchRequest, rd *diskcache.Reader, spec string, toPeer bool) error {
	m, ok := parseManifest(spec)
	meta := rd.Meta()
	if !ok {
		return statusError(http.StatusBadGateway, fmt.Errorf("coral_proxy: bad slice manifest %q", spec))
	}
	fr := *frp
	fr.key = meta.Key
	v := validatorsOf(meta.Header)
	if toPeer && r.Header.Get(sliceField) != "" {
		return p.serveSliceToPeer(w, r, fr, m, v)
	}
	hdr := w.Header()
	delete(hdr, "Content-Length") // ServeContent's
	if _, typed := hdr["Content-Type"]; !typed {
		hdr["Content-Type"] = nil // the stored head as it is: no sniffing
	}
	c := &slicedContent{p: p, ctx: r.Context(), fr: fr, m: m, v: v, fetch: !toPeer, cur: -1, end: m.length}
	if br, ok := parseSingleRange(r.Header.Get("Range")); ok {
		if _, last, ok := br.resolve(m.length); ok {
			c.end = last + 1
		}
	}
	defer c.close()
	if toPeer && r.Method != http.MethodHead && !c.rangeHere(r.Header["Range"]) {
		return sliceNotCached(w)
	}
	http.ServeContent(&slicedWriter{ResponseWriter: w, c: c}, r, "", lastModified(meta.Header), c)
	if c.err != nil {
		return cutShort(w, c.err)
	}
	return nil
}

// serveSliceToPeer answers a peer's request for one slice (sliceField):
// 206 with the slice as it is here (complete, or arriving), or 504.
func (p *Proxy) serveSliceToPeer(w http.ResponseWriter, r *http.Request, fr fetchRequest, m manifest, v validators) error {
	vid, idx, _ := strings.Cut(r.Header.Get(sliceField), " ")
	k, err := strconv.ParseInt(idx, 10, 64)
	if vid != m.vid || err != nil || !isDigits(idx) || k >= m.count() {
		return sliceNotCached(w)
	}
	key := sliceKey(fr.key, m, k)
	asker, _ := netip.ParseAddrPort(r.Header.Get(peerAskerField))
	ctx, cancel := context.WithTimeout(r.Context(), p.originTimeout+p.peerTimeout)
	defer cancel()
	if f := p.slices.get(key); f != nil {
		// Whether the fetch asks the asker is known once its put+get has
		// answered: a request that came before waits for that, as
		// serveOnlyIfCached does. Deciding on arrival, two fetches that
		// ask each other waited for each other for origin_timeout +
		// peer_timeout when the request came during the lower address's
		// put+get (TestSliceAskedBackDuringPutGet).
		select {
		case <-f.askingKnown:
		case <-ctx.Done():
			return sliceNotCached(w)
		}
		if f.asksBack(asker, p.selfAddr()) {
			return sliceNotCached(w)
		}
	}
	rd, err := p.openSlice(ctx, fr, m, v, k, false)
	if err != nil {
		return sliceNotCached(w)
	}
	defer rd.Close()
	first, last := m.bounds(k)
	hdr := w.Header()
	hdr.Set("Content-Range", fmt.Sprintf("bytes %d-%d/%d", first, last, m.length))
	hdr.Set("Content-Length", strconv.FormatInt(last-first+1, 10))
	w.WriteHeader(http.StatusPartialContent)
	if r.Method == http.MethodHead {
		return nil
	}
	if n, err := copyAsItArrives(w, rd, nil); err != nil || n != last-first+1 {
		return cutShort(w, fmt.Errorf("slice %d: %d of %d bytes: %w", k, n, last-first+1, err))
	}
	return nil
}

// sliceNotCached is the 504 a peer's request for slices not here gets
// (as notCached's).
func sliceNotCached(w http.ResponseWriter) error {
	w.Header().Set("Cache-Status", notCachedHeaderValue("slices"))
	return statusError(http.StatusGatewayTimeout, errSliceNotLocal)
}

// ErrCutShort is what ServeHTTP returns when a response's body was cut
// short after its head went out: its source failed, or the client went
// away. The response is not an Error (its head is written): the
// connection is closed without the body's end (CutConnection), so that the
// client cannot take what it got for complete, and the server around the
// proxy records the request with the error. A body sent whole returns nil,
// whatever happens after its last byte (a client that closes at once, the
// last flush failing).
var ErrCutShort = errors.New("coral proxy: response body cut short")

// cutShort ends a response whose body was not sent whole (err says why):
// see ErrCutShort.
func cutShort(w http.ResponseWriter, err error) error {
	CutConnection(w)
	return fmt.Errorf("%w: %w", ErrCutShort, err)
}

// CutConnection makes sure that a response cut short cannot look
// complete: the connection's write deadline is set in the past, so that the
// end of the body (a chunked body's last chunk, an HTTP/2 stream's end)
// never goes out and the connection is closed. A server that resets write
// deadlines once the handler has returned (Caddy's idle writer) calls it
// again after that.
func CutConnection(w http.ResponseWriter) {
	_ = http.NewResponseController(innermostWriter(w)).SetWriteDeadline(time.Unix(1, 0))
}

// copyAsItArrives copies a body still being downloaded (an object being
// written to the cache, or a response relayed uncached) to w, flushing
// after every read, so the client gets the header at once and each byte as
// soon as it is here, however slowly the rest comes. For a relay, rs
// (else nil) learns when a write to the client is under way.
func copyAsItArrives(w http.ResponseWriter, body io.Reader, rs *relaySlot) (n int64, err error) {
	rc := http.NewResponseController(w)
	buf := make([]byte, 32<<10)
	rs.writeStarted()
	_ = rc.Flush()
	rs.writeDone()
	for {
		nr, rerr := body.Read(buf)
		if nr > 0 {
			rs.writeStarted()
			nw, werr := w.Write(buf[:nr])
			n += int64(nw)
			if werr != nil {
				rs.writeDone()
				return n, werr
			}
			_ = rc.Flush()
			rs.writeDone()
		}
		if rerr == io.EOF {
			return n, nil
		}
		if rerr != nil {
			return n, rerr
		}
	}
}

// setOwnValue sets hdr[key] to the one value v, appended to vals (see
// serveStored), and returns vals.
func setOwnValue(hdr http.Header, vals []string, key, v string) []string {
	vals = append(vals, v)
	hdr[key] = vals[len(vals)-1 : len(vals) : len(vals)]
	return vals
}

// plainRequest reports whether http.ServeContent would send the whole
// stored response with nothing to decide: no range or precondition in the
// request, a Content-Type in the response (else it sniffs one) and no
// Content-Encoding (else it leaves Content-Length out).
func plainRequest(r *http.Request, hdr http.Header) bool {
	for _, k := range [...]string{"Range", "If-Match", "If-None-Match", "If-Modified-Since", "If-Unmodified-Since", "If-Range"} {
		if _, ok := r.Header[k]; ok {
			return false
		}
	}
	_, typed := hdr["Content-Type"]
	_, encoded := hdr["Content-Encoding"]
	return typed && !encoded
}

// isDecimal reports whether s is n as strconv.FormatInt writes it.
func isDecimal(s string, n int64) bool {
	var b [20]byte
	return string(strconv.AppendInt(b[:0], n, 10)) == s
}

func lastModified(h http.Header) time.Time {
	t, err := http.ParseTime(h.Get("Last-Modified"))
	if err != nil {
		return time.Time{}
	}
	return t
}

// serveDirect streams a response that is not cached.
func (p *Proxy) serveDirect(w http.ResponseWriter, r *http.Request, resp *http.Response, source string, rs *relaySlot, cancelFetch context.CancelFunc) error {
	defer resp.Body.Close()
	hdr := w.Header()
	for k, v := range storedHeader(resp.Header) {
		hdr[k] = v
	}
	hdr.Del(httpcache.CoralOnlyField)
	p.localizeLocation(hdr, r)
	hdr.Set("Via", "1.1 coral")
	hdr.Set("Cache-Status", uncachedHeaderValue(source))
	w.WriteHeader(resp.StatusCode)
	// A client that leaves ends the fetch at once: the relay would
	// otherwise notice only at its next write, holding the origin's
	// connection and the download slot while a slow origin says nothing.
	// (A download's response may come without its cancel: a
	// revalidation's, one shared among joiners.)
	if cancelFetch != nil {
		defer context.AfterFunc(r.Context(), cancelFetch)()
	}
	if rs != nil {
		// Cut from another goroutine: the connection's own deadline (safe
		// to set concurrently), not the idle writer wrapping it.
		conn := http.NewResponseController(innermostWriter(w))
		rs.serving(func() {
			cancelFetch()
			_ = conn.SetWriteDeadline(time.Now())
		})
	}
	if n, err := copyAsItArrives(w, resp.Body, rs); err != nil && (resp.ContentLength < 0 || n != resp.ContentLength) {
		if rs.preempted() {
			p.logger.Debug("uncached relay cut: its client read nothing for a while and another request needed its download slot",
				zap.String("origin", rs.origin), zap.Duration("stalled", relayStall))
		}
		return cutShort(w, err)
	}
	return nil
}

// innermostWriter is the response writer of net/http under w's wrappers.
func innermostWriter(w http.ResponseWriter) http.ResponseWriter {
	for {
		u, ok := w.(interface{ Unwrap() http.ResponseWriter })
		if !ok {
			return w
		}
		w = u.Unwrap()
	}
}

// localizeLocation rewrites a redirect's Location that names a Coralized
// URL in the dotted form into the request's form: a cached redirect is
// shared by every client of the object, and one that came in over https
// in one label must not be sent to a dotted http name (a downgrade, and a
// name its certificate does not cover). Only Locations on this zone
// change; a name that does not fit in one label stays dotted.
func (p *Proxy) localizeLocation(hdr http.Header, r *http.Request) {
	locs := hdr["Location"]
	if len(locs) != 1 {
		return
	}
	req, err := coralname.ParseHost(r.Host, p.zone)
	if err != nil || !req.OneLabel {
		return
	}
	loc, err := url.Parse(locs[0])
	if err != nil || !loc.IsAbs() || loc.Opaque != "" || loc.User != nil || loc.Port() != "" {
		return
	}
	o, err := coralname.ParseHost(loc.Host, p.zone)
	if err != nil || o.OneLabel {
		return
	}
	one, err := coralname.CoralizeOneLabel(o, p.zone)
	if err != nil {
		return
	}
	if _, port, err := net.SplitHostPort(r.Host); err == nil {
		one = net.JoinHostPort(one, port)
	}
	loc.Host = one
	loc.Scheme = "http"
	if r.TLS != nil {
		loc.Scheme = "https"
	}
	hdr["Location"] = []string{loc.String()}
}
