// Package coralname is the grammar of Coralized host names, the one both
// sides of Coral use: the DNS plugin (plugin/coredns) answers a name only
// if the proxy (module/caddy) would serve it, so no user gets an address
// for a name the proxy then refuses.
//
// # Names
//
// A Coralized name is an origin host with the alias zone appended, and
// optionally a port label before the zone:
//
//	www.example.com.nyud.net        origin www.example.com, default port
//	www.example.com.8080.nyud.net   origin www.example.com, port 8080
//	127.0.0.1.8080.nyud.net         origin 127.0.0.1 (an IPv4 literal), port 8080
//
// The same origins can be written in one label, the form a wildcard
// certificate for the zone covers (so Coralized URLs can be https):
//
//	www-example-com.nyud.net        origin www.example.com
//	www-example-com-8080.nyud.net   origin www.example.com, port 8080
//	my--site-example-com.nyud.net   origin my-site.example.com
//	xn----bcher--kva-de.nyud.net    origin xn--bcher-kva.de (bücher.de)
//
// A single label under the zone that holds a '-' is the one-label form:
// "--" stands for '-' and any other '-' for '.', and what that gives is an
// origin part of the dotted form, checked by the rules below. Since no
// label starts or ends with '-', every origin has exactly one such
// encoding (CoralizeOneLabel). A label holds at most 63 characters, so an
// origin that does not fit (a long name, a port) can only be written in
// the dotted form; a longer label is ErrBadHost. Both forms name the same
// origin, so they share one cache key and one copy. A single label without
// '-' is a single-label origin, refused as before. A single label starting
// with '_' is reserved: "_acme-challenge.nyud.net" is where the zone's ACME
// DNS-01 challenge values are published (package coraldht/acmetxt), not an
// origin named "_acme.challenge".
//
// The part before the zone, "www.example.com.8080", is the origin part.
// The proxy finds it in the Host header (ParseHost). The DNS plugin finds
// it in a query name under the alias zone, and under the coral zone's
// service label, "<origin part>.http.L<k>….L0.<coral zone>" (the alias
// zone's DNAME target), and checks it with Zones.ParseOrigin against both
// zones; an origin part that does not parse is NXDOMAIN.
//
// # The origin part
//
//   - Case does not matter (ASCII folding only: Unicode folding would let
//     look-alikes such as the Kelvin sign match the zone).
//   - The origin must be ASCII: browsers send IDNs as punycode ("xn--…"),
//     which is accepted; anything non-ASCII is ErrBadHost.
//   - Labels are 1–63 characters of letters, digits, '-' and '_', not
//     starting or ending with '-'; the origin is at most 253 characters.
//     Underscore is accepted because browsers accept it and real sites use
//     it in sub-domain labels, but not in the last label (no TLD has one).
//   - The origin must have at least two labels. A single-label name
//     ("localhost", "intranet", "0x7f000001") is either local to the proxy's
//     network or, for some resolvers, a numeric address in disguise.
//   - The last label of a name must not be all digits (RFC 1123 §2.1, RFC
//     3696 §2), except that a whole origin in canonical dotted-quad form is
//     an IPv4 literal: "127.0.0.1.nyud.net" is origin 127.0.0.1, and
//     "127.0.0.1.8080.nyud.net" is 127.0.0.1 port 8080. Other numeric forms
//     that C resolvers treat as addresses ("127.1", "0177.0.0.1") are
//     ErrBadHost. Callers must check IP origins and the addresses names
//     resolve to against their private/loopback policy.
//   - A numeric last label of the origin part (unless the whole part is a
//     dotted quad) is a port 1–65535 without leading zeros; port 80 is
//     returned as 80.
//   - A zone anywhere in the origin part on label boundaries
//     ("a.nyud.net.nyud.net", "x.nyud.net.example.com.nyud.net",
//     "a.nyud.net.8080.nyud.net") is ErrLoop: fetching it would come back
//     to Coral. The proxy checks its own zone; the DNS plugin checks both
//     of its zones, so it also refuses origins that carry the coral zone
//     ("a.nyucd.net.nyud.net"), which the proxy alone cannot recognise.
//
// # The Host header
//
// ParseHost applies these rules before the origin part's:
//
//   - A Host value longer than 1024 bytes is ErrBadHost.
//   - The Host header's own ":port" (the proxy's port) is ignored: empty or
//     up to 65535; anything else after the colon is ErrBadHost.
//   - IPv6 literals ("[::1]:8080") are not Coralized: a well-formed one is
//     ErrNotCoralized (a client addressing the proxy by IP), a malformed one
//     (unbalanced brackets, a bare "::1") is ErrBadHost. IPv6 origins cannot
//     be written under the zone.
//   - One trailing dot is allowed.
//   - A host not ending in "." and the zone is ErrNotCoralized (the proxy is
//     not an open proxy); the zone itself with no origin labels ("nyud.net")
//     is ErrBadHost.
//
// # Zones
//
// A zone (NormalizeZone) is a domain name of at most 253 characters with
// labels as an origin's, whose last label is not all digits, in any case,
// with or without one leading and one trailing dot; it is used lower case
// without dots at either end. Anything else is ErrBadZone. The zones an
// origin must not carry (Zones) are only normalized, not checked.
package coralname
