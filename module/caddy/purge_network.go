package coralcaddy

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/coralcdn/coral/coraldht"
	"go.uber.org/zap"
)

// peerPurgeHandler serves other proxies' purges (app messages to this
// node) on the caches that caches returns (runningCaches: every running
// one): the same local purge as the admin API's, never passed on.
func peerPurgeHandler(caches func() []cacheRef) coraldht.AppHandler {
	return func(ctx context.Context, from coraldht.Contact, payload []byte) ([]byte, error) {
		return handlePeerPurge(ctx, from, payload, caches())
	}
}

func handlePeerPurge(ctx context.Context, from coraldht.Contact, payload []byte, caches []cacheRef) ([]byte, error) {
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
	q, err := parsePurgeQuery(r)
	if err != nil {
		return badRequest(err)
	}
	rawURL, prefix, mode, timeout := q.url, q.prefix, q.mode, q.timeout
	caches := runningCaches()
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

// purgeQuery is a purge's parameters: url, prefix, network (the mode:
// "", "references", "known" or "all") and timeout.
type purgeQuery struct {
	url     string
	prefix  bool
	mode    string
	timeout time.Duration
}

// parsePurgeQuery reads a purge's parameters from its form, refusing
// unknown and repeated ones.
func parsePurgeQuery(r *http.Request) (purgeQuery, error) {
	q := purgeQuery{timeout: purgeDefaultTimeout}
	if err := r.ParseForm(); err != nil {
		return q, fmt.Errorf("coral purge: parameters: %v", err)
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
			return q, fmt.Errorf("coral purge: unknown parameter %q (url, prefix, network, timeout)", name)
		}
	}
	var err error
	if q.url, err = param("url"); err != nil {
		return q, err
	}
	if q.prefix, err = boolParam(param("prefix")); err != nil {
		return q, fmt.Errorf("coral purge: prefix: %v", err)
	}
	netParam, err := param("network")
	if err != nil {
		return q, err
	}
	switch strings.ToLower(netParam) {
	case "", "0", "false":
	case "1", "true":
		q.mode = "references"
		if q.prefix {
			q.mode = "known"
		}
	case "all":
		q.mode = "all"
	default:
		return q, fmt.Errorf("coral purge: network %q: want 1 or all", netParam)
	}
	if v, err := param("timeout"); err != nil {
		return q, err
	} else if v != "" {
		d, err := caddy.ParseDuration(v)
		if err != nil || d <= 0 || d > purgeMaxTimeout {
			return q, fmt.Errorf("coral purge: timeout %q: want a duration up to %v", v, purgeMaxTimeout)
		}
		q.timeout = d
	}
	return q, nil
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
	return runningNode()
}

// purgeNetwork asks the other proxies to purge spec (see the file
// comment), until ctx ends.
func purgeNetwork(ctx context.Context, node *coraldht.Node, spec purgeSpec, mode string, caches []cacheRef) *purgeNetworkResult {
	res := &purgeNetworkResult{Mode: mode, Peers: []purgePeer{}}
	payload, err := encodePurgeRequest(spec)
	if err != nil { // checked by the caller for prefixes; keys always encode
		res.LookupError = err.Error()
		return res
	}
	self, guard := purgeSelf(node, caches)
	peers := purgeTargets(ctx, node, spec, mode, self, guard, res)
	askPurgePeers(ctx, node, peers, payload, res)
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

// purgeSelf is who this proxy is (its node, and the HTTP addresses its
// handlers put in references), and the guard for peer addresses: the
// newest handler's (allow_peers).
func purgeSelf(node *coraldht.Node, caches []cacheRef) (self map[netip.AddrPort]bool, guard originGuard) {
	self = map[netip.AddrPort]bool{node.Addr(): true}
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
	return self, guard
}

// purgeTargets are the peers to ask: those the URL's references name
// (mode references or all), those in the node's routing tables that run
// the HTTP service (known or all). Peers that cannot or may not be asked
// carry why.
func purgeTargets(ctx context.Context, node *coraldht.Node, spec purgeSpec, mode string, self map[netip.AddrPort]bool, guard originGuard, res *purgeNetworkResult) []*purgePeer {
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

	return peers
}

// askPurgePeers sends the purge to the peers, purgeParallel at a time,
// and records each answer in its purgePeer.
func askPurgePeers(ctx context.Context, node *coraldht.Node, peers []*purgePeer, payload []byte, res *purgeNetworkResult) {
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
