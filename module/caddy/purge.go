package coralcaddy

// The adapter's side of purges (package purge, whose comment has every
// decision): POST /coral/purge on the admin API and the handler for other
// proxies' purges, over the running caches and node.

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/module/caddy/proxy"
	"github.com/coralcdn/coral/module/caddy/purge"
	"go.uber.org/zap"
)

// purgeCache is c as purge sees it.
func (c cacheRef) purgeCache() purge.Cache {
	return proxy.PurgeCache(c.dir, c.zones, c.store, c.proxies, c.refs)
}

// purgeCaches is caches as purge sees them.
func purgeCaches(caches []cacheRef) []purge.Cache {
	out := make([]purge.Cache, 0, len(caches))
	for _, c := range caches {
		out = append(out, c.purgeCache())
	}
	return out
}

// purgeLogger is where purges log.
func purgeLogger() *zap.Logger { return caddy.Log().Named("coral.purge") }

// peerPurgeHandler serves other proxies' purges (app messages to this
// node) on every running cache (runningCaches).
func peerPurgeHandler() coraldht.AppHandler {
	return purge.PeerHandler(func() []purge.Cache { return purgeCaches(runningCaches()) }, purgeLogger)
}

// purgeNetwork is how a network purge from node reaches the other
// proxies (PurgeNetwork), for the proxies of caches, newest first.
func purgeNetwork(node *coraldht.Node, caches []cacheRef) purge.Network {
	var proxies []*proxy.Proxy
	for _, c := range caches {
		proxies = append(proxies, c.proxies...)
	}
	return proxy.PurgeNetwork(node, proxies)
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
		if node = runningNode(); node == nil {
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
