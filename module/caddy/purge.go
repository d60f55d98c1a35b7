package coralcaddy

// The proxy's side of purges (package purge, whose comment has every
// decision): POST /coral/purge on the admin API, the handler for other
// proxies' purges, and what purge sees of the running caches, handlers
// and DSHT node.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/module/caddy/purge"
	"go.uber.org/zap"
)

// purgeCache is c as purge sees it.
func (c cacheRef) purgeCache() purge.Cache {
	pc := purge.Cache{Dir: c.dir, Zones: c.zones, Store: c.store, VaryIndexField: varyIndexField}
	for _, e := range c.engines {
		pc.Handlers = append(pc.Handlers, purgeEngine{e})
	}
	for _, t := range c.refs {
		pc.Refs = append(pc.Refs, purgeRefs{t})
	}
	return pc
}

// purgeCaches is caches as purge sees them.
func purgeCaches(caches []cacheRef) []purge.Cache {
	out := make([]purge.Cache, 0, len(caches))
	for _, c := range caches {
		out = append(out, c.purgeCache())
	}
	return out
}

// purgeEngine is an engine as purge sees it (purge.Handler).
type purgeEngine struct{ e *engine }

func (p purgeEngine) MarkPurged(key string) { p.e.purged.put(key, p.e.now()) }

func (p purgeEngine) Pending(key string) <-chan struct{} {
	if d := p.e.inflightFor(key); d != nil {
		return d.ready
	}
	return nil
}

// purgeRefs is a reference table as purge sees it (purge.RefTable).
type purgeRefs struct{ t *refTable }

func (p purgeRefs) Forget(key string) bool { return p.t.forget(key) }

// purgeLogger is where purges log.
func purgeLogger() *zap.Logger { return caddy.Log().Named("coral.purge") }

// peerPurgeHandler serves other proxies' purges (app messages to this
// node) on the caches that caches returns (runningCaches: every running
// one).
func peerPurgeHandler(caches func() []cacheRef) coraldht.AppHandler {
	return purge.PeerHandler(func() []purge.Cache { return purgeCaches(caches()) }, purgeLogger)
}

// purgeNetwork is how a network purge from node reaches the other
// proxies: this proxy is its node and the HTTP addresses its handlers put
// in references, and the guard for peer addresses is the newest
// handler's (allow_peers).
func purgeNetwork(node *coraldht.Node, caches []cacheRef) purge.Network {
	self := map[netip.AddrPort]bool{}
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
	return purge.Network{Node: node, Self: self, Permitted: guard.permitted, DecodeRef: func(b []byte) (purge.Ref, error) {
		r, err := decodeReference(b)
		return purge.Ref{HTTP: r.Addr, DHT: r.DHT}, err
	}}
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
	q, err := purge.ParseQuery(r)
	if err != nil {
		return badRequest(err)
	}
	caches := runningCaches()
	if len(caches) == 0 {
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: errors.New("coral purge: no coral_proxy cache is running here")}
	}
	var zones []string
	for _, c := range caches {
		zones = append(zones, c.zones...)
	}
	spec, err := purge.ParseURL(q.URL, q.Prefix, zones)
	if err != nil {
		return badRequest(err)
	}
	var node *coraldht.Node
	if q.Mode != "" {
		if node = adminDHTNode(); node == nil {
			return caddy.APIError{HTTPStatus: http.StatusServiceUnavailable, Err: errors.New("coral purge: network= needs the coral app's DSHT node, and none is running")}
		}
		if spec.Prefix {
			if _, err := purge.EncodeRequest(spec); err != nil {
				return badRequest(err)
			}
		}
	}
	// The purge happens whatever the client does once it has asked.
	ctx := context.WithoutCancel(r.Context())
	resp := purge.Response{URL: q.URL, Normalized: spec.Norm, Key: spec.Key, Prefix: spec.Prefix}
	resp.Local = purge.Local(ctx, spec, purgeCaches(caches))
	if q.Mode != "" {
		nctx, cancel := context.WithTimeout(ctx, q.Timeout)
		resp.Network = purgeNetwork(node, caches).Purge(nctx, spec, q.Mode)
		cancel()
	}
	resp.DurationMS = float64(time.Since(start)) / float64(time.Millisecond)
	fields := []zap.Field{zap.String("url", q.URL), zap.Bool("prefix", spec.Prefix), zap.String("network", q.Mode),
		zap.Int("purged", resp.Local.Purged), zap.Duration("took", time.Since(start))}
	if resp.Network != nil {
		fields = append(fields, zap.Int("peers_reached", resp.Network.Reached), zap.Int("peers_unreachable", resp.Network.Unreachable),
			zap.Int("peers_purged", resp.Network.Purged))
	}
	purgeLogger().Info("purge", fields...)
	return adminJSON(w, resp)
}

// adminDHTNode is the DSHT node of the newest running coral app, or nil.
func adminDHTNode() *coraldht.Node {
	return runningNode()
}
