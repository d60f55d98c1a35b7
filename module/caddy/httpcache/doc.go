// Package httpcache holds the HTTP caching rules of the Coral proxy
// (coral_proxy): RFC 9111 (HTTP Caching) for a shared cache, RFC 9110 §13
// (conditional requests), RFC 9213 (targeted cache control, targeted.go)
// and RFC 5861 (stale-while-revalidate, stale-if-error), with Coral's
// defaults layered on top through Policy. It decides; the proxy stores,
// fetches and serves.
//
// Decisions (each also in the doc comment where it applies):
//
//   - Policy{} (all zero) is strict RFC 9111 with no heuristic freshness:
//     a response without s-maxage, max-age or Expires has lifetime 0.
//     DefaultPolicy() is Coral's: 12 h for success and redirects without
//     freshness information, 5 min (DefaultNegativeTTL) for the errors
//     cacheable by default without it (a bare 404 can be provoked as
//     easily as a 403: the proxy keeps one only once the origin has given
//     it to a request without the client's fields, NegativeHeuristic),
//     and a 5 min minimum for non-errors that overrides no-cache and
//     short max-age/Expires. NegativeTTL 0 falls back to DefaultTTL, so a
//     Policy with DefaultTTL and MinTTL 0 and NegativeTTL 0 (or negative)
//     is strict.
//   - The minimum (MinTTL) never applies to errors (status 400 and above),
//     which a request can provoke with fields outside the cache key (a
//     firewall refusing a scanner's User-Agent): an error is kept only as
//     long as its own headers say (or NegativeTTL, when a Policy sets
//     one, for those cacheable by default). Nor does it apply to no-store or private responses,
//     nor where the origin insists on revalidation by a shared cache:
//     must-revalidate, proxy-revalidate, or s-maxage (which carries
//     proxy-revalidate's meaning, RFC 9111 §5.2.2.10). It is measured as
//     age, not from when this proxy received the copy, so a copy passed
//     from peer to peer never stays fresh longer than MinTTL after the
//     origin produced it. Policy.ForRequest drops it for requests that
//     carry Authorization.
//   - Storable status codes: those heuristically cacheable by RFC 9110
//     §15.1 (200, 203, 204, 300, 301, 308, 404, 405, 410, 414, 501) always;
//     any other final status only with explicit freshness (max-age,
//     s-maxage, Expires) or "public"; with a Policy whose MinTTL > 0 also
//     302 and 307 (temporary redirects, which Coral caches for MinTTL).
//     403 is not among them: without explicit freshness it is never
//     stored. 206 is never stored (the proxy fetches whole objects) and
//     304 only freshens a stored response.
//   - Heuristic lifetimes are flat (Policy), not the Last-Modified fraction
//     of RFC 9111 §4.2.2: 2xx and permanent 3xx get DefaultTTL, 4xx and 5xx
//     NegativeTTL (those cacheable by default or public; others none),
//     temporary redirects (302, 303, 307) nothing but MinTTL.
//     Last-Modified is not consulted.
//   - Duplicate or conflicting directive values: the most conservative
//     wins (RFC 9111 §4.2.1 allows treating such responses as stale): the
//     smallest max-age, s-maxage, max-stale and stale windows, the largest
//     min-fresh. An invalid max-age or s-maxage counts as 0 (stale); other
//     invalid values are ignored.
//   - Request directives are preferences (RFC 9111 §5.2.1): RequestAllows
//     reports what they ask for and the handler may decline (for example,
//     ignore no-cache from reloading browsers during a flash crowd).
package httpcache
