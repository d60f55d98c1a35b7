package purge

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"go.uber.org/zap"
)

// PeerHandler serves other proxies' purges (app messages to this node) on
// the caches that caches returns (every running one): the same local purge
// as the admin API's, never passed on. logger gives where to log each.
func PeerHandler(caches func() []Cache, logger func() *zap.Logger) coraldht.AppHandler {
	return func(ctx context.Context, from coraldht.Contact, payload []byte) ([]byte, error) {
		return handlePeer(ctx, from, payload, caches(), logger())
	}
}

func handlePeer(ctx context.Context, from coraldht.Contact, payload []byte, caches []Cache, logger *zap.Logger) ([]byte, error) {
	spec, err := DecodeRequest(payload)
	if err != nil {
		return EncodeReply(Reply{Status: StatusRefused, Detail: err.Error()}), nil
	}
	if len(caches) == 0 {
		return EncodeReply(Reply{Status: StatusNoCache, Complete: true}), nil
	}
	ctx, cancel := context.WithTimeout(ctx, peerMaxTime)
	defer cancel()
	start := time.Now()
	res := Local(ctx, spec, caches)
	what := spec.Norm
	if !spec.Prefix {
		what = spec.Key
	}
	logger.Info("purged for a peer", zap.Stringer("from", from.Addr), zap.Bool("prefix", spec.Prefix),
		zap.String("what", what), zap.Int("purged", res.Purged), zap.Int("scanned", res.Scanned), zap.Duration("took", time.Since(start)))
	return EncodeReply(Reply{
		Status: StatusOK, Purged: clampU32(res.Purged), Variants: clampU32(res.Variants),
		Aborted: clampU32(res.DownloadsAborted), Pending: clampU32(res.DownloadsPending),
		Scanned: clampU32(res.Scanned), Complete: res.Complete,
	}), nil
}

// Peer is one proxy a network purge asked, or could not ask.
type Peer struct {
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

// NetworkResult is the network phase of a purge.
type NetworkResult struct {
	// Mode: "references", "known" or "all" (see Query).
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
	Purged int    `json:"purged"`
	Peers  []Peer `json:"peers"`
}

// Node is what a network purge asks of the DSHT node (*coraldht.Node).
type Node interface {
	Addr() netip.AddrPort
	Levels() []coraldht.LevelInfo
	RoutingTable(level int) []coraldht.NodeInfo
	Get(ctx context.Context, key coraldht.ID, levels ...int) (coraldht.GetResult, error)
	CallApp(ctx context.Context, addr netip.AddrPort, kind uint8, payload []byte) ([]byte, error)
}

// Ref is what a network purge reads of a reference found in the DSHT.
type Ref struct {
	HTTP netip.AddrPort // the proxy's HTTP address
	DHT  netip.AddrPort // its DSHT node's, where it takes purges; invalid for an older version
}

// Network is how a network purge reaches the other proxies.
type Network struct {
	Node Node
	// Self are this proxy's HTTP addresses (those its handlers put in
	// references): never asked, like the node's own address.
	Self map[netip.AddrPort]bool
	// Permitted says whether a proxy a reference names may be asked at
	// its DSHT address (allow_peers).
	Permitted func(netip.Addr) bool
	// DecodeRef parses a reference's value.
	DecodeRef func([]byte) (Ref, error)
}

// Purge asks the other proxies to purge spec (see the package comment),
// until ctx ends. mode is Query.Mode, not "".
func (n Network) Purge(ctx context.Context, spec Spec, mode string) *NetworkResult {
	res := &NetworkResult{Mode: mode, Peers: []Peer{}}
	payload, err := EncodeRequest(spec)
	if err != nil { // checked by the caller for prefixes; keys always encode
		res.LookupError = err.Error()
		return res
	}
	peers := n.targets(ctx, spec, mode, res)
	n.ask(ctx, peers, payload, res)
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

func (n Network) isSelf(a netip.AddrPort) bool { return a == n.Node.Addr() || n.Self[a] }

// targets are the peers to ask: those the URL's references name (mode
// references or all), those in the node's routing tables that run the
// HTTP service (known or all). Peers that cannot or may not be asked
// carry why.
func (n Network) targets(ctx context.Context, spec Spec, mode string, res *NetworkResult) []*Peer {
	var peers []*Peer
	byNode := map[netip.AddrPort]*Peer{}
	byHTTP := map[netip.AddrPort]*Peer{}
	via := func(p *Peer, v string) {
		if !slices.Contains(p.Via, v) {
			p.Via = append(p.Via, v)
		}
	}
	if mode == "references" || mode == "all" {
		refs, lookupErr := n.references(ctx, spec.Key)
		res.References = len(refs)
		if lookupErr != nil {
			res.LookupError = lookupErr.Error()
		}
		for _, ref := range refs {
			if n.isSelf(ref.DHT) || n.isSelf(ref.HTTP) {
				continue
			}
			if !ref.DHT.IsValid() {
				if byHTTP[ref.HTTP] == nil {
					p := &Peer{HTTP: ref.HTTP.String(), Via: []string{"reference"},
						skip: "its reference names no DSHT address (put by an older version); not asked"}
					byHTTP[ref.HTTP] = p
					peers = append(peers, p)
				}
				continue
			}
			p := byNode[ref.DHT]
			if p == nil {
				p = &Peer{Node: ref.DHT.String(), HTTP: ref.HTTP.String(), addr: ref.DHT}
				if !n.Permitted(ref.DHT.Addr()) {
					p.skip = "its DSHT address is not public and allow_peers does not list it; not asked"
				}
				byNode[ref.DHT] = p
				peers = append(peers, p)
			}
			via(p, "reference")
		}
	}
	if mode == "known" || mode == "all" {
		for _, li := range n.Node.Levels() {
			for _, ni := range n.Node.RoutingTable(li.Level) {
				if !ni.Services.Has(coraldht.ServiceHTTP) || n.isSelf(ni.Addr) {
					continue
				}
				p := byNode[ni.Addr]
				if p == nil {
					p = &Peer{Node: ni.Addr.String(), addr: ni.Addr}
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

// ask sends the purge to the peers, parallel at a time, and records each
// answer in its Peer.
func (n Network) ask(ctx context.Context, peers []*Peer, payload []byte, res *NetworkResult) {
	sem := make(chan struct{}, parallel)
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
			out, err := n.Node.CallApp(ctx, p.addr, Kind, payload)
			p.DurationMS = float64(time.Since(start)) / float64(time.Millisecond)
			if err != nil {
				p.Error = callError(err)
				return
			}
			p.record(out)
		})
	}
	wg.Wait()
}

// record puts a peer's reply into p.
func (p *Peer) record(out []byte) {
	rep, err := DecodeReply(out)
	switch {
	case err != nil:
		p.Error = "answered with a malformed purge reply"
	case rep.Status == StatusRefused:
		p.Reached, p.Error = true, "refused the purge: "+rep.Detail
	case rep.Status == StatusNoCache:
		p.Reached, p.Complete, p.Error = true, true, "runs no coral_proxy cache"
	default:
		p.Reached, p.Complete = true, rep.Complete
		p.Purged, p.Variants, p.Scanned = int(rep.Purged), int(rep.Variants), int(rep.Scanned)
		p.DownloadsAborted, p.DownloadsPending = int(rep.Aborted), int(rep.Pending)
	}
}

// references reads the references under key at every level of the DSHT,
// at once. A level's lookup that finds none is no error; the error
// returned is the last other failure, when no level found any.
func (n Network) references(ctx context.Context, key string) ([]Ref, error) {
	dhtKey := coraldht.KeyFor(key)
	var mu sync.Mutex
	var refs []Ref
	var lastErr error
	var wg sync.WaitGroup
	for _, li := range n.Node.Levels() {
		wg.Go(func() {
			res, err := n.Node.Get(ctx, dhtKey, li.Level)
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				if !errors.Is(err, coraldht.ErrNotFound) {
					lastErr = fmt.Errorf("level %d: %w", li.Level, err)
				}
				return
			}
			for _, v := range res.Values {
				if r, err := n.DecodeRef(v.Data); err == nil {
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

// callError says, for the response, why a peer was not reached.
func callError(err error) string {
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
