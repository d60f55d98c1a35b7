package coralcaddy

// Purging: POST /coral/purge on Caddy's admin API (AdminAPI.handlePurge).
//
// What a purge names. One URL (an exact purge) or every URL that starts
// with a prefix (prefix=1), given as a Coralized URL
// (http://www.example.com.nyud.net/a.jpg) or as the origin's URL
// (http://www.example.com/a.jpg, https://www.example.com/a.jpg): both name
// the same cache key, since keys ignore the scheme (coralname/url.go). The URL
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
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/coralcdn/coral/coralname"
	"github.com/coralcdn/coral/module/caddy/diskcache"
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
	scheme := strings.ToLower(u.Scheme) // url.Parse allows ASCII only
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
	var t Target
	coralized := false
	for _, z := range zones {
		// A Coralized URL: its own port, if any, is a proxy's.
		o, err := coralname.ParseHost(u.Host, z)
		if errors.Is(err, coralname.ErrNotCoralized) || errors.Is(err, coralname.ErrBadZone) {
			continue
		}
		if err != nil {
			return bad("coral_proxy: %v", err)
		}
		t, coralized = Target{Host: o.Host, Port: o.Port}, true
		break
	}
	if !coralized {
		port, ok := coralname.URLPort(u)
		if !ok {
			return bad("port %s", quoteTarget(u.Port()))
		}
		// The origin must be one a Coralized URL can name: the same rules.
		zone := "coral.invalid"
		if len(zones) > 0 {
			zone = zones[0]
		}
		name := strings.TrimSuffix(u.Hostname(), ".")
		o, err := coralname.ParseHost(coralname.Coralize(coralname.Origin{Host: name, Port: port}, zone), zone)
		if err != nil {
			var e *coralname.Error
			if errors.As(err, &e) {
				return bad("origin host %s: %v", quoteTarget(u.Hostname()), e.Err)
			}
			return bad("origin host %s: %v", quoteTarget(u.Hostname()), err)
		}
		t = Target{Host: o.Host, Port: o.Port}
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
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		return "", false
	}
	port := 0
	if p := u.Port(); p != "" {
		n, err := strconv.Atoi(p)
		if err != nil {
			return "", false
		}
		if n != coralname.DefaultPort(scheme) {
			port = n
		}
	}
	return coralname.NormalizeURL("http", u.Hostname(), port, u.EscapedPath(), u.RawQuery), true
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

// purgeLocal purges spec from caches (runningCaches: every running cache).
// It runs to its end unless ctx ends (then Complete is false).
func purgeLocal(ctx context.Context, spec purgeSpec, caches []cacheRef) purgeLocalResult {
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
func purgeKey(c cacheRef, key string, r *purgeCacheResult) bool {
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
func forgetRef(c cacheRef, key string, r *purgeCacheResult) {
	for _, t := range c.refs {
		if t.forget(key) {
			r.ReferencesDropped++
		}
	}
}

// purgeExact removes the entry of key, its variants when it is a Vary
// index, and a download of it that reaches the cache before deadline.
func purgeExact(ctx context.Context, c cacheRef, key string, deadline time.Time) purgeCacheResult {
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
func purgePrefix(ctx context.Context, c cacheRef, prefix string) purgeCacheResult {
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
