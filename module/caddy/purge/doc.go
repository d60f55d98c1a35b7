// Package purge removes objects from coral_proxy caches: POST /coral/purge
// on Caddy's admin API (served by module/caddy, AdminAPI.handlePurge), and
// the same purge asked of other proxies with a coraldht app message.
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
// or a peer's response header) is waited for, up to PendingWait, and
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
// reference carries, with a coraldht app message (kind Kind): the
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
package purge
