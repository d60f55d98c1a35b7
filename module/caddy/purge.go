package coralcaddy

// Purging: POST /coral/purge on Caddy's admin API (AdminAPI.handlePurge).
//
// What a purge names. One URL (an exact purge) or every URL that starts
// with a prefix (prefix=1), given as a Coralized URL
// (http://www.example.com.nyud.net/a.jpg) or as the origin's URL
// (http://www.example.com/a.jpg, https://www.example.com/a.jpg): both name
// the same cache key, since keys ignore the scheme (coralurl.go). The URL
// is normalized as keys are (host case, default ports, percent-encoding,
// dot segments; the fragment dropped), so a prefix is a prefix of
// normalized URLs, matched as a plain string: http://example.com/img
// matches /img.png and /img/a.png alike (end it with / for a directory),
// and a prefix always names a whole host and port. Anything else (another
// scheme, user information, an IPv6 or single-label or otherwise invalid
// origin, a host carrying the zone twice) is 400 with the reason.
//
// What a local purge removes, from every cache of this Caddy (every
// coral_proxy handler's store, counted once):
//
//   - exact: the URL's entry; when that entry is a Vary index, every
//     variant of the URL too: the store is walked (Store.Walk, a batch of
//     keys at a time) and every object whose stored URL has the same key is
//     removed, so that costs a metadata read per object, like a prefix
//     purge; a URL whose responses do not vary costs one Peek and one Delete;
//   - prefix: every object (variants and Vary indexes included) whose
//     stored URL, normalized, starts with the prefix, found by walking the
//     whole store: one metadata read per object, never more than one batch
//     of the index or one object's metadata in memory, and the store's lock
//     held only while a batch is collected;
//   - the references: the purged URLs leave the store's reference table,
//     so their DSHT references are not renewed. A reference already in the
//     DSHT lives until its TTL (at most 2 h); a proxy that follows it asks
//     with only-if-cached, gets 504 and moves on.
//
// Downloads. A download already writing into the cache is aborted with its
// entry (Store.Delete): its readers are cut off, as for any aborted
// download, and the next request fetches afresh. A download of the URL's
// own entry that has not reached the cache yet (waiting for the origin's
// or a peer's response header) is waited for, up to purgePendingWait, and
// then removed too: it may bring a copy fetched before the purge. One still
// waiting after that is reported (downloads_pending) and will store what
// it receives. Prefix purges, and variants, see only downloads that are
// already in the cache. Clients already reading a complete copy finish it
// (an open file outlives its removal).
//
// Network purge (network=1). An exact purge asks the proxies that
// advertise a copy: it reads the references under the URL's DSHT key at
// every level (Node.Get, one per level: each returns the references of the
// first node holding some, so with many copies not all of them), and asks
// each proxy named there, over the DSHT node address a version 2
// reference carries, with a coraldht app message (kind purgeKind): the
// network key authenticates it, no HTTP listener is involved, and a peer
// never passes a purge on. References of older versions name no DSHT
// address; those proxies are listed, not asked (no_address). A prefix purge asks
// every HTTP proxy this node knows: its routing tables at every level (in
// a network larger than a few dozen proxies that is not all of them; run
// it at several nodes). network=all asks both for an exact purge. The
// answer lists every proxy: reached and how many objects it purged, or
// why not (timeout, no purge handler, no DSHT address, an address
// allow_peers does not admit). Peers are asked 32 at a time until timeout
// (default 10 s, at most 5 min); the local purge runs first and to its end
// whatever the client does.
//
// The API lives only on the admin listener: Caddy's own checks (the
// admin origins, remote admin with client certificates) guard it, and a
// site's listener never serves it (coral_proxy answers POST with 405, or
// 421 for a host that is not Coralized).
// Other proxies' purges come only as app messages under the network key:
// any node holding the key can purge any object, which it could also
// poison (see the threat model in docs/operations.md).

import (
	"context"
	"crypto/sha1"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/module/caddy/diskcache"
	"go.uber.org/zap"
)

const (
	// purgeKind is the coraldht app message kind of a purge between
	// proxies (coraldht/PROTOCOL.md lists the kinds in use).
	purgeKind uint8 = 1

	// purgeBatch is how many keys a store walk collects under the
	// store's lock at a time.
	purgeBatch = 1024
	// purgePendingWait bounds how long an exact purge waits for a
	// download of the URL that has not reached the cache yet.
	purgePendingWait = 5 * time.Second
	// purgeDefaultTimeout and purgeMaxTimeout bound the network phase.
	purgeDefaultTimeout = 10 * time.Second
	purgeMaxTimeout     = 5 * time.Minute
	// purgeParallel is how many peers are asked at once.
	purgeParallel = 32
	// purgeURLMax bounds the URL given.
	purgeURLMax = 8192
	// purgePeerMaxTime bounds one purge run for another proxy.
	purgePeerMaxTime = 10 * time.Minute
)

// purgeSpec is what to purge: one key, or every URL under a normalized
// prefix.
type purgeSpec struct {
	prefix bool
	key    string // exact: the cache key (40 hex digits)
	norm   string // the normalized URL or prefix ("//host[:port]/path[?query]"); for an exact purge from a peer, ""
}

// errPurgeURL is the cause of a 400 for the URL of a purge.
var errPurgeURL = errors.New("coral purge: url must be an absolute http(s) URL, Coralized (http://www.example.com.nyud.net/a.jpg) or the origin's (http://www.example.com/a.jpg)")

// parsePurgeURL turns the URL of a purge into what it names, with the alias
// zones of the running proxies to recognize Coralized URLs.
func parsePurgeURL(raw string, prefix bool, zones []string) (purgeSpec, error) {
	bad := func(format string, args ...any) (purgeSpec, error) {
		return purgeSpec{}, fmt.Errorf("%w: %s", errPurgeURL, fmt.Sprintf(format, args...))
	}
	switch {
	case raw == "":
		return bad("missing (url=)")
	case len(raw) > purgeURLMax:
		return bad("longer than %d bytes", purgeURLMax)
	}
	u, err := url.Parse(raw)
	if err != nil {
		return bad("%v", err)
	}
	scheme := lowerASCII(u.Scheme)
	switch {
	case u.Opaque != "":
		return bad("opaque URL %s", quoteTarget(raw))
	case scheme != "http" && scheme != "https":
		return bad("scheme %s", quoteTarget(u.Scheme))
	case u.User != nil:
		return bad("user information in the URL")
	case u.Host == "":
		return bad("no host")
	case strings.HasPrefix(u.Host, "["):
		return bad("IPv6 origins cannot be Coralized")
	}
	name := strings.TrimSuffix(lowerASCII(u.Hostname()), ".")
	var t Target
	coralized := false
	for _, z := range zones {
		nz, err := NormalizeZone(z)
		if err != nil || (name != nz && !strings.HasSuffix(name, "."+nz)) {
			continue
		}
		// A Coralized URL: its own port, if any, is a proxy's.
		origin, port, err := ParseCoralized(u.Host, z)
		if err != nil {
			return bad("%v", err)
		}
		t, coralized = Target{Host: origin, Port: port}, true
		break
	}
	if !coralized {
		port := 0
		if p := u.Port(); p != "" {
			n, ok := parsePortLabel(p)
			if !ok {
				return bad("port %s", quoteTarget(p))
			}
			if n != schemeDefaultPort(scheme) {
				port = n
			}
		}
		// The origin must be one a Coralized URL can name: the same rules.
		zone := "coral.invalid"
		if len(zones) > 0 {
			zone = zones[0]
		}
		origin, oport, err := ParseCoralized(CoralizeHost(name, port, zone), zone)
		if err != nil {
			var he *HostError
			if errors.As(err, &he) {
				return bad("origin host %s: %v", quoteTarget(u.Hostname()), he.Err)
			}
			return bad("origin host %s: %v", quoteTarget(u.Hostname()), err)
		}
		t = Target{Host: origin, Port: oport}
	}
	t.Scheme, t.Path, t.RawQuery = "http", u.EscapedPath(), u.RawQuery
	spec := purgeSpec{prefix: prefix, norm: t.NormalizedURL()}
	if !prefix {
		spec.key = t.Key()
	}
	return spec, nil
}

// storedNorm is the normalized form (NormalizeURL) of a stored object's
// URL (Extra["url"], the origin URL it was fetched as), and whether it
// parses; its SHA-1 is the key of the URL's entry.
func storedNorm(raw string) (string, bool) {
	if raw == "" {
		return "", false
	}
	u, err := url.Parse(raw)
	if err != nil || u.Host == "" || u.Opaque != "" {
		return "", false
	}
	scheme := lowerASCII(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return "", false
	}
	port := 0
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return "", false
		}
		if n != schemeDefaultPort(scheme) {
			port = n
		}
	}
	return NormalizeURL("http", u.Hostname(), port, u.EscapedPath(), u.RawQuery), true
}

// keyOfNorm is the cache key of a normalized URL (CacheKey's hash).
func keyOfNorm(norm string) string {
	sum := sha1.Sum([]byte(norm))
	return hex.EncodeToString(sum[:])
}

// purgeCacheResult is what a purge did to one cache.
type purgeCacheResult struct {
	Dir   string   `json:"dir,omitempty"`
	Zones []string `json:"zones,omitempty"`
	// Purged counts the entries removed: complete objects and downloads
	// in progress, Vary indexes and variants included.
	Purged int `json:"purged"`
	// Variants of them were variants of a Vary'd URL (exact purges).
	Variants int `json:"variants"`
	// DownloadsAborted of them were downloads writing into the cache.
	DownloadsAborted int `json:"downloads_aborted"`
	// DownloadsPending are downloads of the URL still waiting for their
	// response header after purgePendingWait: they store what they get.
	DownloadsPending int `json:"downloads_pending"`
	// Scanned counts the objects whose metadata was read (prefix purges,
	// and exact purges of a Vary index).
	Scanned int `json:"scanned"`
	// ReferencesDropped counts the DSHT references no longer renewed.
	ReferencesDropped int `json:"references_dropped"`
	// Complete is false when the purge stopped early (the node closing).
	Complete bool `json:"complete"`
}

func (r *purgeCacheResult) add(o purgeCacheResult) {
	r.Purged += o.Purged
	r.Variants += o.Variants
	r.DownloadsAborted += o.DownloadsAborted
	r.DownloadsPending += o.DownloadsPending
	r.Scanned += o.Scanned
	r.ReferencesDropped += o.ReferencesDropped
	r.Complete = r.Complete && o.Complete
}

// purgeLocalResult is a local purge over every cache: totals and per cache.
type purgeLocalResult struct {
	purgeCacheResult
	Caches []purgeCacheResult `json:"caches"`
}

// purgeLocal purges spec from caches (adminCaches: every running cache).
// It runs to its end unless ctx ends (then Complete is false).
func purgeLocal(ctx context.Context, spec purgeSpec, caches []adminCacheRef) purgeLocalResult {
	res := purgeLocalResult{purgeCacheResult: purgeCacheResult{Complete: true}, Caches: []purgeCacheResult{}}
	deadline := time.Now().Add(purgePendingWait)
	for _, c := range caches {
		var cr purgeCacheResult
		if spec.prefix {
			cr = purgePrefix(ctx, c, spec.norm)
		} else {
			cr = purgeExact(ctx, c, spec.key, deadline)
		}
		cr.Dir, cr.Zones = c.dir, c.zones
		res.add(cr)
		res.Caches = append(res.Caches, cr)
	}
	return res
}

// purgeKey removes key from c's store (a complete version and any write in
// progress), counting it in r.
func purgeKey(c adminCacheRef, key string, r *purgeCacheResult) bool {
	for _, e := range c.engines {
		e.purged.put(key, e.now())
	}
	in, _ := c.store.Stat(key)
	if c.store.Delete(key) != nil {
		return false
	}
	r.Purged++
	if in.Writing {
		r.DownloadsAborted++
	}
	return true
}

// forgetRef drops key's reference from c's reference tables.
func forgetRef(c adminCacheRef, key string, r *purgeCacheResult) {
	for _, t := range c.refs {
		if t.forget(key) {
			r.ReferencesDropped++
		}
	}
}

// purgeExact removes the entry of key, its variants when it is a Vary
// index, and a download of it that reaches the cache before deadline.
func purgeExact(ctx context.Context, c adminCacheRef, key string, deadline time.Time) purgeCacheResult {
	r := purgeCacheResult{Complete: true}
	m, ok := c.store.Peek(key)
	vary := ok && m.Extra[varyIndexField] != ""
	purgeKey(c, key, &r)
	forgetRef(c, key, &r)
	// A download of the key that has not reached the cache yet: wait for
	// it to get there (or fail), then remove it too.
	for _, e := range c.engines {
		d := e.inflightFor(key)
		if d == nil {
			continue
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			r.DownloadsPending++
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-d.ready:
			t.Stop()
			purgeKey(c, key, &r)
		case <-t.C:
			r.DownloadsPending++
		case <-ctx.Done():
			t.Stop()
			r.DownloadsPending++
		}
	}
	if !vary {
		return r
	}
	// The variants: every object stored for the same URL.
	c.store.Walk(purgeBatch, func(infos []diskcache.Info) bool {
		for _, in := range infos {
			if in.Key == key {
				continue
			}
			r.Scanned++
			m, ok := c.store.Peek(in.Key)
			if !ok {
				continue
			}
			if n, ok := storedNorm(m.Extra["url"]); ok && keyOfNorm(n) == key && purgeKey(c, in.Key, &r) {
				r.Variants++
			}
		}
		return ctx.Err() == nil
	})
	if ctx.Err() != nil {
		r.Complete = false
	}
	return r
}

// purgePrefix removes every object of c whose stored URL, normalized,
// starts with prefix.
func purgePrefix(ctx context.Context, c adminCacheRef, prefix string) purgeCacheResult {
	r := purgeCacheResult{Complete: true}
	c.store.Walk(purgeBatch, func(infos []diskcache.Info) bool {
		for _, in := range infos {
			r.Scanned++
			m, ok := c.store.Peek(in.Key)
			if !ok {
				continue
			}
			n, ok := storedNorm(m.Extra["url"])
			if !ok || !strings.HasPrefix(n, prefix) {
				continue
			}
			purgeKey(c, in.Key, &r)
			// The reference is per URL: the key of the URL's entry.
			forgetRef(c, keyOfNorm(n), &r)
		}
		return ctx.Err() == nil
	})
	if ctx.Err() != nil {
		r.Complete = false
	}
	return r
}

// The purge message between proxies (a coraldht app message of kind
// purgeKind; its payload is opaque to coraldht):
//
//	request  byte 0  version (1)
//	         byte 1  mode: 0 exact, 1 prefix
//	         exact:  20 bytes, the cache key (binary SHA-1)
//	         prefix: the normalized prefix, "//host[:port]/…", 4..766 bytes
//	reply    byte 0  version (1)
//	         byte 1  status: 0 purged, 1 request refused (malformed),
//	                 2 no coral_proxy cache runs there
//	         bytes 2-21  purged, variants, downloads aborted, downloads
//	                 pending, objects scanned: five uint32, big-endian
//	         byte 22     bit 0: complete
//	         bytes 23-   for status 1: why (text)
const (
	purgeWireVersion = 1
	purgeModeExact   = 0
	purgeModePrefix  = 1

	purgeStatusOK      = 0
	purgeStatusRefused = 1
	purgeStatusNoCache = 2
	purgeStatusEnd     = 3

	purgeReplyFixed = 2 + 5*4 + 1
)

var errBadPurge = errors.New("coral purge: malformed purge message")

// encodePurgeRequest is the payload asking a peer to purge spec.
func encodePurgeRequest(spec purgeSpec) ([]byte, error) {
	if spec.prefix {
		if !validPrefixNorm(spec.norm) {
			return nil, fmt.Errorf("%w: prefix %q", errBadPurge, spec.norm)
		}
		if 2+len(spec.norm) > coraldht.MaxAppPayload {
			return nil, fmt.Errorf("coral purge: a prefix of %d bytes is too long to send to other proxies (at most %d)", len(spec.norm), coraldht.MaxAppPayload-2)
		}
		return append([]byte{purgeWireVersion, purgeModePrefix}, spec.norm...), nil
	}
	k, err := hex.DecodeString(spec.key)
	if err != nil || len(k) != sha1.Size {
		return nil, fmt.Errorf("%w: key %q", errBadPurge, spec.key)
	}
	return append([]byte{purgeWireVersion, purgeModeExact}, k...), nil
}

// decodePurgeRequest parses a peer's purge request. It comes from a member
// of the network, authenticated, but is checked like any input: an exact
// key is 20 bytes; a prefix must name a host ("//host/…"), so that no
// message can empty a cache whole.
func decodePurgeRequest(b []byte) (purgeSpec, error) {
	if len(b) < 2 || b[0] != purgeWireVersion {
		return purgeSpec{}, fmt.Errorf("%w: %d bytes, version %d", errBadPurge, len(b), firstByte(b))
	}
	switch b[1] {
	case purgeModeExact:
		if len(b) != 2+sha1.Size {
			return purgeSpec{}, fmt.Errorf("%w: key of %d bytes", errBadPurge, len(b)-2)
		}
		return purgeSpec{key: hex.EncodeToString(b[2:])}, nil
	case purgeModePrefix:
		p := string(b[2:])
		if !validPrefixNorm(p) {
			return purgeSpec{}, fmt.Errorf("%w: prefix %s", errBadPurge, quoteTarget(p))
		}
		return purgeSpec{prefix: true, norm: p}, nil
	}
	return purgeSpec{}, fmt.Errorf("%w: mode %d", errBadPurge, b[1])
}

func firstByte(b []byte) int {
	if len(b) == 0 {
		return -1
	}
	return int(b[0])
}

// validPrefixNorm accepts a normalized prefix as parsePurgeURL makes them:
// "//", a host of allowed characters, an optional port, then "/" and the
// rest, as normalization leaves it (no spaces, controls or non-ASCII).
func validPrefixNorm(p string) bool {
	rest, ok := strings.CutPrefix(p, "//")
	if !ok {
		return false
	}
	slash := strings.IndexByte(rest, '/')
	if slash <= 0 {
		return false
	}
	host := rest[:slash]
	if h, port, ok := strings.Cut(host, ":"); ok {
		if _, ok := parsePortLabel(port); !ok {
			return false
		}
		host = h
	}
	for i := 0; i < len(host); i++ {
		if c := host[i]; !(isHostChar(c) || c == '%') {
			return false
		}
	}
	for i := 0; i < len(rest); i++ {
		if c := rest[i]; c <= ' ' || c >= 0x7f {
			return false
		}
	}
	return host != ""
}

// purgeReply is a peer's answer.
type purgeReply struct {
	status                                      uint8
	purged, variants, aborted, pending, scanned uint32
	complete                                    bool
	detail                                      string
}

func encodePurgeReply(r purgeReply) []byte {
	b := make([]byte, purgeReplyFixed, purgeReplyFixed+len(r.detail))
	b[0], b[1] = purgeWireVersion, r.status
	for i, v := range []uint32{r.purged, r.variants, r.aborted, r.pending, r.scanned} {
		binary.BigEndian.PutUint32(b[2+4*i:], v)
	}
	if r.complete {
		b[purgeReplyFixed-1] = 1
	}
	detail := r.detail
	if max := coraldht.MaxAppPayload - purgeReplyFixed; len(detail) > max {
		detail = detail[:max]
	}
	return append(b, detail...)
}

func decodePurgeReply(b []byte) (purgeReply, error) {
	if len(b) < purgeReplyFixed || b[0] != purgeWireVersion || b[1] >= purgeStatusEnd || b[purgeReplyFixed-1]&^1 != 0 {
		return purgeReply{}, fmt.Errorf("%w: reply of %d bytes", errBadPurge, len(b))
	}
	r := purgeReply{status: b[1], complete: b[purgeReplyFixed-1] == 1, detail: string(b[purgeReplyFixed:])}
	for i, p := range []*uint32{&r.purged, &r.variants, &r.aborted, &r.pending, &r.scanned} {
		*p = binary.BigEndian.Uint32(b[2+4*i:])
	}
	return r, nil
}

func clampU32(n int) uint32 { return uint32(min(max(n, 0), 1<<32-1)) }

// peerPurgeHandler serves other proxies' purges (app messages to this
// node) on the caches that caches returns (adminCaches: every running
// one): the same local purge as the admin API's, never passed on.
func peerPurgeHandler(caches func() []adminCacheRef) coraldht.AppHandler {
	return func(ctx context.Context, from coraldht.Contact, payload []byte) ([]byte, error) {
		return handlePeerPurge(ctx, from, payload, caches())
	}
}

func handlePeerPurge(ctx context.Context, from coraldht.Contact, payload []byte, caches []adminCacheRef) ([]byte, error) {
	spec, err := decodePurgeRequest(payload)
	if err != nil {
		return encodePurgeReply(purgeReply{status: purgeStatusRefused, detail: err.Error()}), nil
	}
	if len(caches) == 0 {
		return encodePurgeReply(purgeReply{status: purgeStatusNoCache, complete: true}), nil
	}
	ctx, cancel := context.WithTimeout(ctx, purgePeerMaxTime)
	defer cancel()
	start := time.Now()
	res := purgeLocal(ctx, spec, caches)
	what := spec.norm
	if !spec.prefix {
		what = spec.key
	}
	caddy.Log().Named("coral.purge").Info("purged for a peer", zap.Stringer("from", from.Addr), zap.Bool("prefix", spec.prefix),
		zap.String("what", what), zap.Int("purged", res.Purged), zap.Int("scanned", res.Scanned), zap.Duration("took", time.Since(start)))
	return encodePurgeReply(purgeReply{
		status: purgeStatusOK, purged: clampU32(res.Purged), variants: clampU32(res.Variants),
		aborted: clampU32(res.DownloadsAborted), pending: clampU32(res.DownloadsPending),
		scanned: clampU32(res.Scanned), complete: res.Complete,
	}), nil
}

// purgePeer is one proxy a network purge asked, or could not ask.
type purgePeer struct {
	// Node is the proxy's DSHT address; HTTP its HTTP address, as its
	// reference names it (references only).
	Node string `json:"node,omitempty"`
	HTTP string `json:"http,omitempty"`
	// Via: "reference" (it advertises a copy) and/or "known" (a contact
	// of this node's routing tables).
	Via     []string `json:"via"`
	Reached bool     `json:"reached"`
	// What the peer did, when reached.
	Purged           int  `json:"purged"`
	Variants         int  `json:"variants,omitempty"`
	DownloadsAborted int  `json:"downloads_aborted,omitempty"`
	DownloadsPending int  `json:"downloads_pending,omitempty"`
	Scanned          int  `json:"scanned,omitempty"`
	Complete         bool `json:"complete"`
	// Error says why the peer was not reached, or what it refused.
	Error      string  `json:"error,omitempty"`
	DurationMS float64 `json:"duration_ms"`

	addr netip.AddrPort // Node, parsed
	skip string         // why it is not asked, if it is not
}

// purgeNetworkResult is the network phase of a purge.
type purgeNetworkResult struct {
	// Mode: "references", "known" or "all" (see handlePurge).
	Mode string `json:"mode"`
	// References counts the values found under the URL's DSHT key (over
	// all levels; one proxy may have put several); LookupError says why
	// the lookup found none, when it failed.
	References  int    `json:"references"`
	LookupError string `json:"lookup_error,omitempty"`
	// Asked: peers sent the purge; Reached: of them, those that answered;
	// Unreachable: asked but no answer (or an error); NoAddress:
	// references without a DSHT address (older proxies) or with one
	// allow_peers does not admit, never asked.
	Asked       int `json:"asked"`
	Reached     int `json:"reached"`
	Unreachable int `json:"unreachable"`
	NoAddress   int `json:"no_address"`
	// Purged is the objects the reached peers purged, in all.
	Purged int         `json:"purged"`
	Peers  []purgePeer `json:"peers"`
}

// purgeResponse is the answer of POST /coral/purge.
type purgeResponse struct {
	URL        string `json:"url"`        // as given
	Normalized string `json:"normalized"` // what is matched: "//host[:port]/path[?query]"
	Key        string `json:"key,omitempty"`
	Prefix     bool   `json:"prefix"`
	// Local is what this Caddy's caches did; Network, with network=,
	// what the other proxies did.
	Local   purgeLocalResult    `json:"local"`
	Network *purgeNetworkResult `json:"network,omitempty"`
	// DurationMS is the time the whole purge took.
	DurationMS float64 `json:"duration_ms"`
}

// handlePurge serves POST /coral/purge. Parameters, in the query or a
// form body (application/x-www-form-urlencoded):
//
//	url=URL      what to purge (required)
//	prefix=1     every URL starting with it
//	network=1    also at other proxies: for an exact purge those whose
//	             DSHT references say they hold a copy, for a prefix every
//	             HTTP proxy this node knows; network=all: both
//	timeout=D    how long to wait for other proxies (default 10s, at most 5m)
func (a *AdminAPI) handlePurge(w http.ResponseWriter, r *http.Request) error {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed; use POST", r.Method)}
	}
	start := time.Now()
	badRequest := func(err error) error { return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: err} }
	r.Body = http.MaxBytesReader(w, r.Body, 64<<10)
	if err := r.ParseForm(); err != nil {
		return badRequest(fmt.Errorf("coral purge: parameters: %v", err))
	}
	param := func(name string) (string, error) {
		vs := r.Form[name]
		if len(vs) > 1 {
			return "", fmt.Errorf("coral purge: %s given %d times", name, len(vs))
		}
		if len(vs) == 0 {
			return "", nil
		}
		return vs[0], nil
	}
	for name := range r.Form {
		switch name {
		case "url", "prefix", "network", "timeout":
		default:
			return badRequest(fmt.Errorf("coral purge: unknown parameter %q (url, prefix, network, timeout)", name))
		}
	}
	rawURL, err := param("url")
	if err != nil {
		return badRequest(err)
	}
	prefix, err := boolParam(param("prefix"))
	if err != nil {
		return badRequest(fmt.Errorf("coral purge: prefix: %v", err))
	}
	netParam, err := param("network")
	if err != nil {
		return badRequest(err)
	}
	mode := ""
	switch strings.ToLower(netParam) {
	case "", "0", "false":
	case "1", "true":
		mode = "references"
		if prefix {
			mode = "known"
		}
	case "all":
		mode = "all"
	default:
		return badRequest(fmt.Errorf("coral purge: network %q: want 1 or all", netParam))
	}
	timeout := purgeDefaultTimeout
	if v, err := param("timeout"); err != nil {
		return badRequest(err)
	} else if v != "" {
		d, err := caddy.ParseDuration(v)
		if err != nil || d <= 0 || d > purgeMaxTimeout {
			return badRequest(fmt.Errorf("coral purge: timeout %q: want a duration up to %v", v, purgeMaxTimeout))
		}
		timeout = d
	}
	caches := adminCaches()
	if len(caches) == 0 {
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: errors.New("coral purge: no coral_proxy cache is running here")}
	}
	var zones []string
	for _, c := range caches {
		zones = append(zones, c.zones...)
	}
	spec, err := parsePurgeURL(rawURL, prefix, zones)
	if err != nil {
		return badRequest(err)
	}
	var node *coraldht.Node
	if mode != "" {
		if node = adminDHTNode(); node == nil {
			return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: errors.New("coral purge: network= needs the coral app's DSHT node, and none is running")}
		}
		if spec.prefix {
			if _, err := encodePurgeRequest(spec); err != nil {
				return badRequest(err)
			}
		}
	}
	// The purge happens whatever the client does once it has asked.
	ctx := context.WithoutCancel(r.Context())
	resp := purgeResponse{URL: rawURL, Normalized: spec.norm, Key: spec.key, Prefix: spec.prefix}
	resp.Local = purgeLocal(ctx, spec, caches)
	if mode != "" {
		nctx, cancel := context.WithTimeout(ctx, timeout)
		resp.Network = purgeNetwork(nctx, node, spec, mode, caches)
		cancel()
	}
	resp.DurationMS = float64(time.Since(start)) / float64(time.Millisecond)
	logger := caddy.Log().Named("coral.purge")
	fields := []zap.Field{zap.String("url", rawURL), zap.Bool("prefix", spec.prefix), zap.String("network", mode),
		zap.Int("purged", resp.Local.Purged), zap.Duration("took", time.Since(start))}
	if resp.Network != nil {
		fields = append(fields, zap.Int("peers_reached", resp.Network.Reached), zap.Int("peers_unreachable", resp.Network.Unreachable),
			zap.Int("peers_purged", resp.Network.Purged))
	}
	logger.Info("purge", fields...)
	return adminJSON(w, resp)
}

// boolParam parses an optional boolean parameter ("" is false).
func boolParam(v string, err error) (bool, error) {
	if err != nil || v == "" {
		return false, err
	}
	return strconv.ParseBool(v)
}

// adminDHTNode is the DSHT node of the newest running coral app, or nil.
func adminDHTNode() *coraldht.Node {
	apps, _ := adminRegistered()
	for i := len(apps) - 1; i >= 0; i-- {
		if a := apps[i]; a != nil && a.entry != nil && a.entry.node != nil {
			return a.entry.node
		}
	}
	return nil
}

// purgeNetwork asks the other proxies to purge spec (see the file
// comment), until ctx ends.
func purgeNetwork(ctx context.Context, node *coraldht.Node, spec purgeSpec, mode string, caches []adminCacheRef) *purgeNetworkResult {
	res := &purgeNetworkResult{Mode: mode, Peers: []purgePeer{}}
	payload, err := encodePurgeRequest(spec)
	if err != nil { // checked by the caller for prefixes; keys always encode
		res.LookupError = err.Error()
		return res
	}
	// Who is this proxy: its node, and the HTTP addresses its handlers
	// put in references. The guard for peer addresses is the newest
	// handler's (allow_peers).
	self := map[netip.AddrPort]bool{node.Addr(): true}
	var guard originGuard
	haveGuard := false
	for _, c := range caches {
		for _, e := range c.engines {
			if e.selfAddr != nil {
				if a := e.selfAddr(); a.IsValid() {
					self[a] = true
				}
			}
			if !haveGuard {
				guard, haveGuard = e.peerGuard, true
			}
		}
	}

	var peers []*purgePeer
	byNode := map[netip.AddrPort]*purgePeer{}
	byHTTP := map[netip.AddrPort]*purgePeer{}
	via := func(p *purgePeer, v string) {
		if !slices.Contains(p.Via, v) {
			p.Via = append(p.Via, v)
		}
	}
	if mode == "references" || mode == "all" {
		refs, lookupErr := purgeReferences(ctx, node, spec.key)
		res.References = len(refs)
		if lookupErr != nil {
			res.LookupError = lookupErr.Error()
		}
		for _, ref := range refs {
			if self[ref.DHT] || self[ref.Addr] {
				continue
			}
			if !ref.DHT.IsValid() {
				if byHTTP[ref.Addr] == nil {
					p := &purgePeer{HTTP: ref.Addr.String(), Via: []string{"reference"},
						skip: "its reference names no DSHT address (put by an older version); not asked"}
					byHTTP[ref.Addr] = p
					peers = append(peers, p)
				}
				continue
			}
			p := byNode[ref.DHT]
			if p == nil {
				p = &purgePeer{Node: ref.DHT.String(), HTTP: ref.Addr.String(), addr: ref.DHT}
				if !guard.permitted(ref.DHT.Addr()) {
					p.skip = "its DSHT address is not public and allow_peers does not list it; not asked"
				}
				byNode[ref.DHT] = p
				peers = append(peers, p)
			}
			via(p, "reference")
		}
	}
	if mode == "known" || mode == "all" {
		for _, li := range node.Levels() {
			for _, ni := range node.RoutingTable(li.Level) {
				if !ni.Services.Has(coraldht.ServiceHTTP) || self[ni.Addr] {
					continue
				}
				p := byNode[ni.Addr]
				if p == nil {
					p = &purgePeer{Node: ni.Addr.String(), addr: ni.Addr}
					byNode[ni.Addr] = p
					peers = append(peers, p)
				}
				// A contact of the routing tables is a node this one talks
				// to anyway, whatever allow_peers says.
				p.skip = ""
				via(p, "known")
			}
		}
	}

	sem := make(chan struct{}, purgeParallel)
	var wg sync.WaitGroup
	for _, p := range peers {
		if p.skip != "" {
			p.Error = p.skip
			res.NoAddress++
			continue
		}
		res.Asked++
		wg.Go(func() {
			select {
			case sem <- struct{}{}:
			case <-ctx.Done():
				p.Error = "not asked before the timeout"
				return
			}
			defer func() { <-sem }()
			start := time.Now()
			out, err := node.CallApp(ctx, p.addr, purgeKind, payload)
			p.DurationMS = float64(time.Since(start)) / float64(time.Millisecond)
			if err != nil {
				p.Error = purgeCallError(err)
				return
			}
			rep, err := decodePurgeReply(out)
			switch {
			case err != nil:
				p.Error = "answered with a malformed purge reply"
			case rep.status == purgeStatusRefused:
				p.Reached, p.Error = true, "refused the purge: "+rep.detail
			case rep.status == purgeStatusNoCache:
				p.Reached, p.Complete, p.Error = true, true, "runs no coral_proxy cache"
			default:
				p.Reached, p.Complete = true, rep.complete
				p.Purged, p.Variants, p.Scanned = int(rep.purged), int(rep.variants), int(rep.scanned)
				p.DownloadsAborted, p.DownloadsPending = int(rep.aborted), int(rep.pending)
			}
		})
	}
	wg.Wait()
	for _, p := range peers {
		switch {
		case p.skip != "":
		case p.Reached:
			res.Reached++
			res.Purged += p.Purged
		default:
			res.Unreachable++
		}
		res.Peers = append(res.Peers, *p)
	}
	return res
}

// purgeReferences reads the references under key at every level of the
// DSHT, at once. A level's lookup that finds none is no error; the error
// returned is the last other failure, when no level found any.
func purgeReferences(ctx context.Context, node *coraldht.Node, key string) ([]reference, error) {
	dhtKey := coraldht.KeyFor(key)
	var mu sync.Mutex
	var refs []reference
	var lastErr error
	var wg sync.WaitGroup
	for _, li := range node.Levels() {
		wg.Go(func() {
			res, err := node.Get(ctx, dhtKey, li.Level)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if !errors.Is(err, coraldht.ErrNotFound) {
					lastErr = fmt.Errorf("level %d: %w", li.Level, err)
				}
				return
			}
			for _, v := range res.Values {
				if r, err := decodeReference(v.Data); err == nil {
					refs = append(refs, r)
				}
			}
		})
	}
	wg.Wait()
	if len(refs) > 0 {
		lastErr = nil
	}
	return refs, lastErr
}

// purgeCallError says, for the response, why a peer was not reached.
func purgeCallError(err error) string {
	var ae *coraldht.AppError
	switch {
	case errors.Is(err, coraldht.ErrTimeout), errors.Is(err, context.DeadlineExceeded):
		return "no answer before the timeout (down, unreachable, or a version without purge): " + err.Error()
	case errors.Is(err, coraldht.ErrAppUnknown):
		return "its DSHT node takes no purges (a coral app without this version's purge handler)"
	case errors.Is(err, coraldht.ErrAppBusy):
		return "busy with other requests from the network; try again"
	case errors.As(err, &ae):
		return "its purge failed: " + ae.Text
	}
	return err.Error()
}
