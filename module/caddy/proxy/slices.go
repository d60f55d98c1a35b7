package proxy

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/module/caddy/diskcache"
	"go.uber.org/zap"
)

// Big objects in slices (issue 42).
//
// An object larger than slice_size is not kept whole: the proxy keeps a
// manifest under the object's key (its response head, with the slice
// size, the length and a version id in Meta.Extra, and no body) and the
// body in slices of slice_size bytes, each a store object and a DSHT key
// of its own. A slice's key is the object's key, the version id and the
// slice's index; the version id hashes the object's validator (strong
// ETag, or strong Last-Modified), its length, its Content-Encoding and the
// slice size, so slices of two versions of an object, or of two slice
// sizes, never mix.
//
// The first fetch of the object is today's: a plain GET. When its answer
// is a 200 the proxy may keep (no Vary, a strong validator, a declared
// length above slice_size, Accept-Ranges: bytes), the proxy keeps slice 0
// from that body and closes the connection: the origin has sent slice 0
// and whatever its socket buffers held beyond it. Every other slice is
// fetched when a reader first needs it (one slice read ahead), as its own
// small download: a put+get of a reference under the slice's key, the
// peers it returns asked for that slice (only-if-cached, the slice's
// Range, the version id in Coral-Slice), else the origin asked for the
// slice's range with If-Range. A proxy's slices are fetched once however
// many of its clients read them, and a fleet's once from the origin: the
// second proxy to want a slice finds the first one's reference and
// streams the slice from it as it arrives, so proxies that read the same
// file at different points fetch different slices from the origin and
// from each other.
//
// The origin's answer for a slice is checked before a byte is kept: a 206
// whose Content-Range is exactly the slice's range of the same length,
// and whose validator and Content-Encoding are the manifest's. A 200 with
// the manifest's validator and length is an origin that ignores Range:
// the slice is cut out of the whole body (the origin pays for the bytes
// before it) and the origin's big objects are kept whole for an hour
// (noRanges). Any other validator (206 or 200) means the object changed
// under the proxy: the slice fails, the manifest is dropped, readers of
// the old version are cut off (never a body mixing two versions), and the
// next request fetches the new version afresh.
//
// Clients are answered from the slices through http.ServeContent, as a
// whole object is: ranges (only the slices they cover are fetched), HEAD
// (no slice at all), If-Range, If-None-Match and the other preconditions,
// 416 past the end, and the stored head byte for byte. The body (whole,
// or one range) goes out slice by slice, each stored slice as its file,
// so that a hit on a big object takes sendfile as one stored whole does.

// Slice sizes: the bounds of slice_size and its default.
const (
	MinSliceSize = 1 << 20
	MaxSliceSize = 8 << 20
	// DefaultSliceSize is 4 MiB: a slice costs a put+get, a download slot
	// and one origin request, so a slice should take much longer to
	// transfer than a put+get (4 MiB is 0.3 s at 100 Mbit/s, several
	// round trips of the DSHT) and a 1 GiB file is 256 keys; a cold range
	// costs at most a slice or two of origin bytes (nginx's slice module
	// is typically set to 1 MiB for the same trade-off, with no put+get
	// to amortize).
	DefaultSliceSize = 4 << 20
)

// slicesField is the Meta.Extra entry of a manifest: "SIZE LENGTH VID".
const slicesField = "slices"

// sliceField is the request field in which a proxy asks a peer for one
// slice: "VID INDEX". Never sent to origins.
const sliceField = "Coral-Slice"

// noRangesMemory is how long an origin that ignored a slice's Range has
// its big objects kept whole.
const noRangesMemory = time.Hour

// errSliceChanged says the origin's validator for a slice is not the
// manifest's: the object changed mid-object.
var errSliceChanged = errors.New("coral_proxy: the object changed while it was fetched in slices")

// errSliceNotLocal says a slice a peer's request needs is not here.
var errSliceNotLocal = errors.New("coral_proxy: slice not in this cache")

// manifest is what a sliced object's entry says of its slices.
type manifest struct {
	size, length int64  // slice size, object length
	vid          string // version id: 16 hex digits
}

func (m manifest) String() string {
	return strconv.FormatInt(m.size, 10) + " " + strconv.FormatInt(m.length, 10) + " " + m.vid
}

// parseManifest reads a manifest's Meta.Extra entry; ok is false for
// anything a manifest this proxy writes could not be.
func parseManifest(v string) (m manifest, ok bool) {
	f := strings.Split(v, " ")
	if len(f) != 3 || len(f[2]) != 16 || !isLowerHexString(f[2]) || !isDigits(f[0]) || !isDigits(f[1]) {
		return m, false
	}
	size, err1 := strconv.ParseInt(f[0], 10, 64)
	length, err2 := strconv.ParseInt(f[1], 10, 64)
	if err1 != nil || err2 != nil || size < MinSliceSize || size > MaxSliceSize || length <= size {
		return m, false
	}
	return manifest{size: size, length: length, vid: f[2]}, true
}

func isLowerHexString(s string) bool {
	for i := 0; i < len(s); i++ {
		if (s[i] < '0' || s[i] > '9') && (s[i] < 'a' || s[i] > 'f') {
			return false
		}
	}
	return true
}

// count is the number of slices.
func (m manifest) count() int64 { return (m.length + m.size - 1) / m.size }

// bounds are slice k's first and last byte.
func (m manifest) bounds(k int64) (first, last int64) {
	first = k * m.size
	return first, min(first+m.size, m.length) - 1
}

// sliceKey is the store and DSHT key of slice k of the object stored
// under key. Object keys are URLs with spaces escaped, so the suffix
// cannot be part of one.
func sliceKey(key string, m manifest, k int64) string {
	return key + " slice " + m.vid + " " + strconv.FormatInt(k, 10)
}

// validators are what ties a slice to its object: the strong validator
// the slices were keyed by, and the Content-Encoding.
type validators struct {
	etag, lastModified, encoding string
}

func validatorsOf(h http.Header) validators {
	return validators{etag: h.Get("Etag"), lastModified: h.Get("Last-Modified"), encoding: h.Get("Content-Encoding")}
}

// ifRange is the If-Range value a slice's request carries.
func (v validators) ifRange() string {
	if v.etag != "" {
		return v.etag
	}
	return v.lastModified
}

// same reports whether a response with header h is of the same version.
func (v validators) same(h http.Header) bool {
	o := validatorsOf(h)
	if v.etag != "" {
		return o.etag == v.etag && o.encoding == v.encoding
	}
	return o.lastModified == v.lastModified && o.encoding == v.encoding
}

// strongValidators returns h's validators when one is strong (RFC 9110
// §8.8.1): an entity tag not marked weak, or a Last-Modified at least a
// second before the response's Date.
func strongValidators(h http.Header) (validators, bool) {
	v := validatorsOf(h)
	if strings.HasPrefix(v.etag, `"`) {
		return v, true
	}
	v.etag = ""
	lm, err1 := http.ParseTime(v.lastModified)
	date, err2 := http.ParseTime(h.Get("Date"))
	return v, err1 == nil && err2 == nil && date.Sub(lm) >= time.Second
}

// versionID hashes what makes two objects' slices interchangeable.
func versionID(v validators, length, size int64) string {
	sum := sha256.Sum256([]byte(fmt.Sprintf("%s\n%s\n%s\n%d\n%d", v.etag, v.lastModified, v.encoding, length, size)))
	return hex.EncodeToString(sum[:8])
}

// sliceTable is the slices being fetched here, one fetch per slice.
type sliceTable struct {
	size     int64 // slice_size; 0: off
	mu       sync.Mutex
	inflight map[string]*sliceFetch
	// noRanges remembers, until when, origins that ignored a slice's
	// Range: their big objects are kept whole meanwhile.
	noRanges *boundedMap[time.Time]
}

func newSliceTable(size int64) *sliceTable {
	return &sliceTable{size: size, inflight: make(map[string]*sliceFetch), noRanges: newBoundedMap[time.Time](maxRemembered)}
}

// sliceFetch is one slice being fetched.
type sliceFetch struct {
	ready chan struct{} // closed once the slice's entry exists, or the fetch failed
	err   error         // set before ready closes
	// asking is the peers the fetch asks, once its put+get found some:
	// of two proxies whose fetches of a slice ask each other, the one
	// with the lower address answers the other 504 at once (asksBack),
	// and the other then fetches the slice for both. Any other peer
	// asking waits for the fetch.
	asking atomic.Pointer[[]netip.AddrPort]
	// askingKnown is closed once the fetch's put+get has answered (asking
	// is set then, if it found peers), or the fetch ended without one: a
	// peer's request that came before decides then whether it is asked
	// back (serveSliceToPeer).
	askingKnown     chan struct{}
	askingKnownOnce sync.Once
}

// peersKnown closes f.askingKnown.
func (f *sliceFetch) peersKnown() {
	f.askingKnownOnce.Do(func() { close(f.askingKnown) })
}

func (t *sliceTable) get(key string) *sliceFetch {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.inflight[key]
}

// start returns the fetch of key, registering a new one (started) if
// none runs.
func (t *sliceTable) start(key string) (f *sliceFetch, started bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if f := t.inflight[key]; f != nil {
		return f, false
	}
	f = &sliceFetch{ready: make(chan struct{}), askingKnown: make(chan struct{})}
	t.inflight[key] = f
	return f, true
}

func (t *sliceTable) end(key string, f *sliceFetch) {
	t.mu.Lock()
	if t.inflight[key] == f {
		delete(t.inflight, key)
	}
	t.mu.Unlock()
}

// sliceable returns the manifest for resp, a response keep may store under
// key, when the object is to be kept in slices.
func (p *Proxy) sliceable(fr fetchRequest, resp *http.Response, source, fields string) (manifest, bool) {
	size := p.slices.size
	if size == 0 || resp.StatusCode != http.StatusOK || resp.ContentLength <= size || fields != "" {
		return manifest{}, false
	}
	if !acceptsByteRanges(resp.Header) {
		return manifest{}, false
	}
	if until, ok := p.slices.noRanges.get(fr.originSlot()); ok && time.Now().Before(until) {
		return manifest{}, false
	}
	v, ok := strongValidators(resp.Header)
	if !ok {
		return manifest{}, false
	}
	return manifest{size: size, length: resp.ContentLength, vid: versionID(v, resp.ContentLength, size)}, true
}

// acceptsByteRanges reports whether h's Accept-Ranges lists bytes.
func acceptsByteRanges(h http.Header) bool {
	for _, v := range h.Values("Accept-Ranges") {
		for _, t := range strings.Split(v, ",") {
			if strings.EqualFold(strings.TrimSpace(t), "bytes") {
				return true
			}
		}
	}
	return false
}

// keepSliced stores resp, a big object (m), as a manifest under meta.Key
// and its slice 0 from resp's body; the rest of the body is not read. It
// reports false, having kept nothing and read nothing, when the store
// takes neither: the caller then keeps the object as before.
func (p *Proxy) keepSliced(ctx context.Context, fr fetchRequest, resp *http.Response, meta diskcache.Meta, m manifest, readyOnce func()) bool {
	key0 := sliceKey(meta.Key, m, 0)
	f, started := p.slices.start(key0)
	if !started {
		// Slice 0 is being fetched already (a manifest dropped and
		// written again): keep the manifest only.
		f = nil
	}
	var w *diskcache.Writer
	if f != nil {
		var err error
		if w, err = p.store.Create(key0, sliceMeta(key0, m, 0, meta)); err != nil {
			p.endSlice(key0, f, err)
			return false
		}
	}
	meta.Size = 0
	meta.Extra = maps.Clone(meta.Extra) // the caller's, should this fail
	meta.Extra[slicesField] = m.String()
	if err := p.commitEmpty(meta); err != nil {
		if w != nil {
			w.Abort(err)
			p.endSlice(key0, f, err)
		}
		return false
	}
	readyOnce()
	p.finishKey(meta.Key)
	go p.publish(fr, http.StatusOK, meta.Expires)
	defer resp.Body.Close()
	if w == nil {
		return true
	}
	close(f.ready)
	first, last := m.bounds(0)
	err := p.writeSlice(ctx, w, resp.Body, last-first+1)
	p.endSlice(key0, f, err)
	if err == nil {
		p.publishSlice(key0, meta.Expires)
	}
	return true
}

// finishKey takes the download of key out of the in-flight table: its
// manifest is stored, and requests that come now read that.
func (p *Proxy) finishKey(key string) {
	p.mu.Lock()
	if d := p.inflight[key]; d != nil {
		p.finishLocked(d)
	}
	p.mu.Unlock()
}

// commitEmpty stores an object with meta and no body.
func (p *Proxy) commitEmpty(meta diskcache.Meta) error {
	w, err := p.store.Create(meta.Key, meta)
	if err != nil {
		return err
	}
	return w.Commit(meta)
}

// sliceMeta is the store metadata of slice k of the object of manifest m
// and metadata object.
func sliceMeta(key string, m manifest, k int64, object diskcache.Meta) diskcache.Meta {
	first, last := m.bounds(k)
	return diskcache.Meta{
		Key: key, Status: http.StatusPartialContent, Stored: time.Now(), Expires: object.Expires, Size: last - first + 1,
		Header: http.Header{"Content-Range": {fmt.Sprintf("bytes %d-%d/%d", first, last, m.length)}},
		Extra:  map[string]string{"url": object.Extra["url"], "slice": strconv.FormatInt(k, 10)},
	}
}

// writeSlice copies n bytes of body into w and commits them, or aborts
// w with why not.
func (p *Proxy) writeSlice(ctx context.Context, w *diskcache.Writer, body io.Reader, n int64) error {
	got, err := io.CopyN(w, body, n)
	if err == io.EOF {
		err = fmt.Errorf("slice ended after %d of %d bytes", got, n)
	}
	if err == nil && ctx.Err() != nil {
		err = ctx.Err()
	}
	if err == nil {
		err = w.Commit(w.Meta())
	}
	if err != nil {
		w.Abort(err)
	}
	return err
}

// endSlice ends fetch f of key with err.
func (p *Proxy) endSlice(key string, f *sliceFetch, err error) {
	p.slices.end(key, f)
	f.peersKnown()
	select {
	case <-f.ready:
	default:
		f.err = err
		close(f.ready)
	}
	if err != nil {
		p.logger.Debug("slice not kept", zap.String("slice", key), zap.Error(err))
	}
}

// publishSlice puts the long-lived reference to a stored slice.
func (p *Proxy) publishSlice(key string, expires time.Time) {
	p.publish(fetchRequest{baseKey: key}, http.StatusOK, expires)
}

// openSlice opens slice k of fr's sliced object m (stored under fr.key),
// waiting for its entry if it is being fetched, fetching it if not (only
// if fetch: a peer's request never starts one).
func (p *Proxy) openSlice(ctx context.Context, fr fetchRequest, m manifest, v validators, k int64, fetch bool) (*diskcache.Reader, error) {
	key := sliceKey(fr.key, m, k)
	for range 2 {
		if rd, ok := p.store.GetContext(ctx, key); ok {
			return rd, nil
		}
		f := p.slices.get(key)
		if f == nil && !fetch {
			return nil, errSliceNotLocal
		}
		if f == nil {
			f = p.startSlice(fr, m, v, k)
		}
		select {
		case <-f.ready:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
		if f.err != nil {
			return nil, f.err
		}
	}
	return nil, fmt.Errorf("slice %d of %s went away as it was fetched", k, fr.key)
}

// prefetchSlice starts fetching slice k if it is neither here nor being
// fetched.
func (p *Proxy) prefetchSlice(fr fetchRequest, m manifest, v validators, k int64) {
	if k >= m.count() {
		return
	}
	key := sliceKey(fr.key, m, k)
	if _, ok := p.store.Peek(key); ok || p.slices.get(key) != nil {
		return
	}
	p.startSlice(fr, m, v, k)
}

// startSlice starts the fetch of slice k, or returns the one running.
func (p *Proxy) startSlice(fr fetchRequest, m manifest, v validators, k int64) *sliceFetch {
	key := sliceKey(fr.key, m, k)
	f, started := p.slices.start(key)
	if started {
		go p.fetchSlice(fr, m, v, k, key, f)
	}
	return f
}

// fetchSlice fetches slice k into the store: from a peer the put+get
// under its key names, else from the origin.
func (p *Proxy) fetchSlice(fr fetchRequest, m manifest, v validators, k int64, key string, f *sliceFetch) {
	err := p.fetchSliceFrom(fr, m, v, k, key, f)
	if errors.Is(err, errSliceChanged) {
		// Drop the manifest of this version (unless a newer one replaced
		// it): the next request fetches the new version.
		if meta, ok := p.store.Peek(fr.key); ok && meta.Extra[slicesField] == m.String() {
			_ = p.store.Delete(fr.key)
		}
		p.logger.Warn("object changed while fetched in slices; dropped", zap.String("url", fr.originURL().String()), zap.Int64("slice", k))
	}
	p.endSlice(key, f, err)
}

func (p *Proxy) fetchSliceFrom(fr fetchRequest, m manifest, v validators, k int64, key string, f *sliceFetch) error {
	ctx, cancel := p.downloadContext()
	defer cancel()
	slot, err := p.slots.acquire(ctx, fr.originSlot(), p.clientKey(&fr), p.downloadWait)
	if err != nil {
		return err
	}
	defer p.slots.release(slot)
	ctx = withSlotHold(ctx, slot)
	first, last := m.bounds(k)
	rangeField := fmt.Sprintf("bytes=%d-%d", first, last)
	sfr := fr
	sfr.key, sfr.baseKey = key, key
	sfr.peerFields = http.Header{"Range": {rangeField}, sliceField: {m.vid + " " + strconv.FormatInt(k, 10)}}
	peers, _, stopRenewing := p.announce(ctx, sfr)
	defer stopRenewing()
	if at, ok := p.purged.get(fr.baseKey); ok && time.Since(at) < purgeMemory {
		peers = nil
	}
	var resp *http.Response
	idle := p.originTimeout + p.peerTimeout
	if len(peers) > 0 {
		asking := make([]netip.AddrPort, len(peers))
		for i, r := range peers {
			asking[i] = r.Addr
		}
		f.asking.Store(&asking)
	}
	f.peersKnown()
	if len(peers) > 0 {
		resp, _ = p.fetchFromPeers(ctx, sfr, peers)
		if resp != nil && checkSlicePart(resp, m, v, k) != nil {
			resp.Body.Close()
			resp = nil
		}
	}
	if resp == nil {
		idle = p.originTimeout
		if resp, err = p.fetchForCache(ctx, &fr, func(h http.Header) {
			h.Set("Range", rangeField)
			h.Set("If-Range", v.ifRange())
		}); err != nil {
			return err
		}
		if err := checkSlicePart(resp, m, v, k); err != nil {
			resp.Body.Close()
			return err
		}
		if resp.StatusCode == http.StatusOK {
			// The origin ignores Range: cut the slice out of the whole
			// body, and keep its big objects whole for a while.
			p.slices.noRanges.put(fr.originSlot(), time.Now().Add(noRangesMemory))
			cutToRange(resp, first, last)
		}
	}
	resp.Body = newIdleTimeoutBody(resp.Body, idle, cancel)
	defer resp.Body.Close()
	object, _ := p.store.Peek(fr.key)
	w, err := p.store.Create(key, sliceMeta(key, m, k, object))
	if err != nil {
		return err
	}
	close(f.ready)
	if err := p.writeSlice(ctx, w, resp.Body, last-first+1); err != nil {
		return err
	}
	p.publishSlice(key, object.Expires)
	return nil
}

// checkSlicePart checks a response to slice k's request: a 206 of exactly
// the slice, or (from an origin that ignores Range) the whole 200, of the
// manifest's version (else errSliceChanged).
func checkSlicePart(resp *http.Response, m manifest, v validators, k int64) error {
	if resp.StatusCode != http.StatusOK && resp.StatusCode != http.StatusPartialContent {
		return fmt.Errorf("slice %d: answered %d", k, resp.StatusCode)
	}
	if !v.same(resp.Header) {
		return fmt.Errorf("%w: slice %d came with ETag %q, Last-Modified %q", errSliceChanged, k, resp.Header.Get("Etag"), resp.Header.Get("Last-Modified"))
	}
	first, last := m.bounds(k)
	if resp.StatusCode == http.StatusOK {
		if resp.ContentLength != m.length {
			return fmt.Errorf("%w: a whole body of %d bytes, not %d", errSliceChanged, resp.ContentLength, m.length)
		}
		return nil
	}
	cr, ok := parseContentRange(resp.Header.Get("Content-Range"))
	switch {
	case !ok || len(resp.Header.Values("Content-Range")) != 1:
		return fmt.Errorf("slice %d: bad Content-Range %q", k, resp.Header.Get("Content-Range"))
	case cr.length != m.length:
		return fmt.Errorf("%w: Content-Range says %d bytes, not %d", errSliceChanged, cr.length, m.length)
	case cr.first != first || cr.last != last:
		return fmt.Errorf("slice %d: Content-Range %d-%d, want %d-%d", k, cr.first, cr.last, first, last)
	case resp.ContentLength >= 0 && resp.ContentLength != last-first+1:
		return fmt.Errorf("slice %d: Content-Length %d, want %d", k, resp.ContentLength, last-first+1)
	}
	return nil
}

// contentRange is a Content-Range field of a satisfied byte range.
type contentRange struct {
	first, last, length int64
}

// parseContentRange parses "bytes FIRST-LAST/LENGTH" (RFC 9110 §14.4), the
// form a 206 of one range has; the length must be known. ok is false for
// anything else, or for positions that are not within the length.
func parseContentRange(v string) (cr contentRange, ok bool) {
	rest, found := strings.CutPrefix(strings.TrimSpace(v), "bytes ")
	if !found {
		return cr, false
	}
	span, length, found := strings.Cut(rest, "/")
	if !found {
		return cr, false
	}
	a, b, found := strings.Cut(span, "-")
	if !found || !isDigits(a) || !isDigits(b) || !isDigits(length) {
		return cr, false
	}
	var err [3]error
	cr.first, err[0] = strconv.ParseInt(a, 10, 64)
	cr.last, err[1] = strconv.ParseInt(b, 10, 64)
	cr.length, err[2] = strconv.ParseInt(length, 10, 64)
	if err[0] != nil || err[1] != nil || err[2] != nil || cr.first > cr.last || cr.last >= cr.length {
		return contentRange{}, false
	}
	return cr, true
}

// slicedContent is a sliced object as an io.ReadSeeker, for
// http.ServeContent: a read opens the slice it falls in (fetching it if
// fetch), and starts fetching the next one while the request's range
// (end) goes on into it. err is the first read or write error. While rd
// is open, its offset is off's place in slice cur.
//
// ServeContent copies a body (the whole object, or one range) with
// io.CopyN, which reaches the response writer's ReadFrom with the
// content in a LimitedReader: given that (slicedWriter), the body goes
// out slice by slice (writeTo), each complete slice as its file, so that
// a TCP connection sends it with sendfile as it does an object stored
// whole, and a slice still arriving through Read.
type slicedContent struct {
	p     *Proxy
	ctx   context.Context
	fr    fetchRequest
	m     manifest
	v     validators
	fetch bool
	off   int64
	end   int64 // the request's range ends before this
	cur   int64 // the slice rd is, or -1
	rd    *diskcache.Reader
	err   error
}

func (c *slicedContent) Seek(offset int64, whence int) (int64, error) {
	switch whence {
	case io.SeekCurrent:
		offset += c.off
	case io.SeekEnd:
		offset += c.m.length
	}
	if offset < 0 {
		return 0, errors.New("coral_proxy: seek before the start")
	}
	if offset != c.off {
		// rd's offset is off's: the next read opens the slice anew
		// (a multipart response's next range may be in the same slice).
		c.close()
	}
	c.off = offset
	return offset, nil
}

func (c *slicedContent) Read(b []byte) (int, error) {
	if c.off >= c.m.length {
		return 0, io.EOF
	}
	k, err := c.open()
	if err != nil {
		return 0, err
	}
	_, last := c.m.bounds(k)
	n, err := c.rd.ReadContext(c.ctx, b[:min(int64(len(b)), last+1-c.off)])
	c.off += int64(n)
	if err == io.EOF && c.off <= last {
		err = fmt.Errorf("slice %d ended early: %w", k, io.ErrUnexpectedEOF)
	} else if err == io.EOF {
		err = nil
	}
	if err != nil {
		c.err = err
	}
	return n, err
}

// open makes rd the slice off is in (k), at off, unless it is already:
// it opens the slice (fetching it if fetch) and starts fetching the next
// one if the request's range goes on into it.
func (c *slicedContent) open() (k int64, err error) {
	k = c.off / c.m.size
	if c.cur == k {
		return k, nil
	}
	first, last := c.m.bounds(k)
	c.close()
	rd, err := c.p.openSlice(c.ctx, c.fr, c.m, c.v, k, c.fetch)
	if err == nil && rd.Complete() && rd.Size() != last-first+1 {
		rd.Close()
		err = fmt.Errorf("slice %d is %d bytes, not %d", k, rd.Size(), last-first+1)
	}
	if err != nil {
		c.err = err
		return k, err
	}
	c.rd, c.cur = rd, k
	if _, err := rd.Seek(c.off-first, io.SeekStart); err != nil {
		c.close()
		c.err = err
		return k, err
	}
	if c.fetch && (k+1)*c.m.size < c.end {
		c.p.prefetchSlice(c.fr, c.m, c.v, k+1)
	}
	return k, nil
}

// writeTo writes the next n bytes of the object to w, slice by slice:
// a complete slice from its file (sendSlice), one still arriving through
// Read, as ServeContent's copy would.
func (c *slicedContent) writeTo(w io.Writer, n int64) (written int64, err error) {
	for written < n && c.off < c.m.length {
		k, err := c.open()
		if err != nil {
			return written, err
		}
		first, last := c.m.bounds(k)
		want := min(n-written, last+1-c.off)
		var sent int64
		if c.rd.Complete() && c.rd.Size() == last-first+1 {
			sent, err = c.sendSlice(w, first, want, c.off+want == last+1)
		} else {
			sent, err = io.Copy(w, io.LimitReader(c, want))
		}
		written += sent
		if err == nil && sent < want {
			err = fmt.Errorf("slice %d: %d of %d bytes: %w", k, sent, want, io.ErrUnexpectedEOF)
		}
		if err != nil {
			c.err = err
			return written, err
		}
	}
	return written, nil
}

// sendSlice writes want bytes of the complete slice rd (which starts at
// byte first of the object) from off to w: the rest of the slice (toEnd)
// with rd.WriteTo, which hands w the file itself, else a LimitedReader of
// the file (which net/http also sends with sendfile; through Caddy's idle
// writer, which limits each chunk again, it is copied).
func (c *slicedContent) sendSlice(w io.Writer, first, want int64, toEnd bool) (int64, error) {
	var n int64
	var err error
	if toEnd {
		n, err = c.rd.WriteTo(w)
	} else {
		f := c.rd.Content()
		if _, err = f.Seek(c.off-first, io.SeekStart); err == nil {
			n, err = io.Copy(w, io.LimitReader(f, want))
		}
	}
	c.off += n
	if err == nil {
		_, err = c.rd.Seek(c.off-first, io.SeekStart)
	}
	return n, err
}

func (c *slicedContent) close() {
	if c.rd != nil {
		c.rd.Close()
		c.rd, c.cur = nil, -1
	}
}

// slicedWriter is the response writer http.ServeContent writes a sliced
// object's response to: a body it copies from c goes out through
// c.writeTo; any other (a multipart response's) as it would.
type slicedWriter struct {
	http.ResponseWriter
	c *slicedContent
}

func (w *slicedWriter) ReadFrom(src io.Reader) (int64, error) {
	if lr, ok := src.(*io.LimitedReader); ok && lr.R == io.Reader(w.c) {
		n, err := w.c.writeTo(w.ResponseWriter, lr.N)
		lr.N -= n
		return n, err
	}
	return io.Copy(w.ResponseWriter, src)
}

// Unwrap is for http.ResponseController.
func (w *slicedWriter) Unwrap() http.ResponseWriter { return w.ResponseWriter }

// rangeHere reports whether the slices a peer's request (with Range
// fields ranges) needs are here
// or arriving: every slice of its range (a single range; the whole object
// for any other Range), or without a Range, slice 0. A peer asking for
// the whole object is a proxy that starts its own download of it: it
// keeps slice 0 from the answer and fetches the others slice by slice (a
// proxy that keeps big objects whole gets a body cut at the first slice
// missing here, and fetches the object again).
func (c *slicedContent) rangeHere(ranges []string) bool {
	first, last := int64(0), c.m.length-1
	if len(ranges) == 0 {
		last = 0
	} else if br, ok := parseSingleRange(ranges[0]); ok && len(ranges) == 1 {
		if f, l, ok := br.resolve(c.m.length); ok {
			first, last = f, l
		}
	}
	for k := first / c.m.size; k <= last/c.m.size; k++ {
		key := sliceKey(c.fr.key, c.m, k)
		if _, ok := c.p.store.Peek(key); !ok && c.p.slices.get(key) == nil {
			return false
		}
	}
	return true
}

// asksBack reports whether f asks asker (a peer's address, from its
// request's peerAskerField) and self is the lower of the two addresses:
// see sliceFetch.asking. The field is only a hint: a request that names an
// address falsely gets a 504, which any only-if-cached request may get.
func (f *sliceFetch) asksBack(asker, self netip.AddrPort) bool {
	asking := f.asking.Load()
	return asking != nil && slices.Contains(*asking, asker) && self.Compare(asker) < 0
}
