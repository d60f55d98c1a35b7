package proxy

// The proxy's side of purges (package purge, whose comment has every
// decision): what a purge sees of a proxy, of its cache and of its
// references, and how a network purge reaches the other proxies.

import (
	"net/netip"
	"time"

	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/purge"
)

// purgeMemory is how long after a purge an object is fetched from its
// origin only: the longest a network purge may take (its timeout is at
// most 5 min).
const purgeMemory = purge.MaxTimeout

// MarkPurged remembers that key was purged now: for purgeMemory, a miss on
// it goes to the origin, not to peers, which may still hold the old copy
// while a network purge works its way round. With Pending it makes a
// *Proxy a purge.Handler.
func (p *Proxy) MarkPurged(key string) { p.purged.put(key, time.Now()) }

// Pending returns a channel closed once the download of key running here
// reaches the store (or fails); nil if none runs.
func (p *Proxy) Pending(key string) <-chan struct{} {
	if d := p.inflightFor(key); d != nil {
		return d.ready
	}
	return nil
}

// PurgeCache is a cache as purge sees it: store, kept in dir, the zones of
// the proxies that serve from it, those proxies, and its reference tables
// (one per store, normally).
func PurgeCache(dir string, zones []string, store *diskcache.Store, proxies []*Proxy, refs []*References) purge.Cache {
	c := purge.Cache{Dir: dir, Zones: zones, Store: store, VaryIndexField: varyIndexField}
	for _, p := range proxies {
		c.Handlers = append(c.Handlers, p)
	}
	for _, t := range refs {
		c.Refs = append(c.Refs, t)
	}
	return c
}

// PurgeNetwork is how a network purge from node reaches the other proxies:
// the proxies of this process (proxies) are its node and the HTTP
// addresses they put in references, and the guard for peer addresses is
// the first proxy's (allow_peers; the newest, in Caddy's order).
func PurgeNetwork(node purge.Node, proxies []*Proxy) purge.Network {
	self := map[netip.AddrPort]bool{}
	var guard originGuard
	for i, p := range proxies {
		if a := p.selfAddr(); a.IsValid() {
			self[a] = true
		}
		if i == 0 {
			guard = p.peerGuard
		}
	}
	return purge.Network{Node: node, Self: self, Permitted: guard.permitted, DecodeRef: func(b []byte) (purge.Ref, error) {
		r, err := decodeReference(b)
		return purge.Ref{HTTP: r.Addr, DHT: r.DHT}, err
	}}
}
