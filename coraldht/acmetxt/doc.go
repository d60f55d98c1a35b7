// Package acmetxt keeps ACME DNS-01 challenge values (RFC 8555 §8.4) in
// the Coral DSHT, so that a Coral network can obtain certificates for its
// own zones without any outside DNS service: a Caddy node's certificate
// manager publishes the value through its node (the libdns provider
// "coral" in module/caddy), and every Coral name server answers the
// _acme-challenge TXT query from the DSHT (plugin/coredns). Both sides use
// this package, so they agree on where a value lives and which values are
// served.
//
// # Where values live
//
// The values for domain D (the name being validated, "nyud.net" for both
// "nyud.net" and "*.nyud.net") are stored under Key(D) at level 0 only. A
// DSHT get stops at the first level that holds values, so values kept at
// the cluster levels too would let a name server in the cluster of an
// earlier issuance find only the old values there and never the new
// ones; at level 0 all values for the key gather at the same nodes,
// nearest the key, whoever published them.
//
// The DSHT cannot delete a value before its TTL runs out, so a challenge's
// clean-up is a no-op and old values are served beside the new ones until
// they expire (DefaultTTL, 10 minutes). ACME servers accept a TXT RRset that
// holds the expected value among others, and certificate managers put a
// fresh value for each attempt.
//
// # Who may publish
//
// Any member of the Coral network, that is any holder of the network key:
// a member can already serve the zone's names, so it is trusted with the
// zone's certificate. Values are checked on the way in and out (Valid):
// printable ASCII, at most 255 bytes, at most MaxValues per answer, so a
// member cannot make the name servers send arbitrary or oversized data.
package acmetxt
