package proxy

import (
	"context"
	"fmt"
	"net/http"
	"net/netip"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/coralcdn/coral/module/caddy/httpcache"
)

// fetchFromPeers asks the peers for the object, two at a time: the first
// to answer with the object wins; the next ones are tried if both fail.
// Peers are asked with only-if-cached, so a peer never goes to the origin
// on our behalf. It returns a nil response when no peer had it, and then
// the peers that failed: dead or unreachable, not merely without the
// object (peerFailed).
func (p *Proxy) fetchFromPeers(ctx context.Context, fr fetchRequest, peers []reference) (*http.Response, peerMisses) {
	var miss peerMisses
	for i := 0; i < len(peers); i += 2 {
		batch := peers[i:min(i+2, len(peers))]
		type result struct {
			peer   netip.AddrPort
			resp   *http.Response
			err    error
			failed bool
		}
		results := make(chan result, len(batch))
		pctx, cancel := context.WithCancel(ctx)
		for _, peer := range batch {
			go func() {
				var mu sync.Mutex
				connected := false
				resp, err := p.askPeer(traceConnected(pctx, &connected, &mu), fr, peer)
				mu.Lock()
				defer mu.Unlock()
				results <- result{peer.Addr, resp, err, peerFailed(err, connected)}
			}()
		}
		var win *http.Response
		for range batch {
			r := <-results
			if ctx.Err() == nil {
				miss.add(r.peer, r.failed, r.err)
			}
			if r.resp != nil && win == nil {
				win = r.resp
				continue
			}
			if r.resp != nil {
				r.resp.Body.Close()
			}
		}
		if win != nil {
			// The loser was cancelled or closed above; keep the winner's
			// context alive until its body is read.
			win.Body = &cancelOnClose{ReadCloser: win.Body, cancel: cancel}
			return win, peerMisses{}
		}
		cancel()
	}
	return nil, miss
}

// peerAskerField is the request field in which a proxy asking a peer
// names its own address (its references'): a peer whose download asks
// the asker in turn sees the cycle (asksBack). Never sent to origins.
const peerAskerField = "Coral-Peer"

// peerFreshnessField is the response field in which a proxy tells a peer
// how many more seconds its copy is fresh (in its own cache, under its own
// policy). The peer's copy is never fresh longer: not beyond what the
// origin gave, nor beyond the sender's own extensions (min_ttl, stale
// copies served while the origin is down). It is never stored, nor sent
// to clients.
const peerFreshnessField = "Coral-Fresh"

// maxPeerFreshness bounds how long a copy taken from a peer is fresh,
// whatever the peer claims: as long as the reference that led to it lives.
// A member of the network can serve anything; past this bound the copy is
// revalidated with the origin.
const maxPeerFreshness = refGoodTTL

// peerFreshness is the longest a copy from a peer may be fresh: what its
// peerFreshnessField says (0 when absent, repeated or malformed), at most
// maxPeerFreshness.
func peerFreshness(h http.Header) time.Duration {
	v := h.Values(peerFreshnessField)
	if len(v) != 1 {
		return 0
	}
	d, ok := httpcache.ParseDeltaSeconds(strings.TrimSpace(v[0]))
	if !ok {
		return 0
	}
	return min(d, maxPeerFreshness)
}

// askPeer fetches the Coralized URL from one peer, from its cache only.
func (p *Proxy) askPeer(ctx context.Context, fr fetchRequest, peer reference) (*http.Response, error) {
	u := fr.target.OriginURL()
	u.Scheme, u.Host = "http", peer.Addr.String()
	// The client's fields go along, as to an origin: the peer picks the
	// variant they select.
	h := originRequestHeader(fr.forwarded(), "", p.userAgent)
	h.Set("Cache-Control", "only-if-cached")
	for k, v := range fr.peerFields {
		h[k] = v
	}
	if self := p.selfAddr(); self.IsValid() {
		h.Set(peerAskerField, self.String())
	}
	req := newGet(ctx, u, h)
	req.Host = fr.target.CoralHost(p.zone)
	resp, err := p.peer.Do(req)
	if err == nil {
		if err = checkHeadFields(resp.Header); err != nil {
			resp.Body.Close()
		}
	}
	if err != nil {
		p.metrics.PeerFetch(fetchOutcome(0, err))
		return nil, err
	}
	if !servedFromCache(resp.Header.Get("Cache-Status")) {
		// 504: only-if-cached and not cached. Anything else without a
		// cache's Cache-Status is the peer's own refusal or error, never
		// the object.
		p.metrics.PeerFetch(OutcomeNotCached)
		resp.Body.Close()
		if resp.StatusCode == http.StatusGatewayTimeout && resp.Header.Get("Cache-Status") == notCachedHeaderValue(peerRetryingDetail) {
			return nil, errPeerRetrying
		}
		return nil, fmt.Errorf("%w: %s answered %d", errPeerNotCached, peer.Addr, resp.StatusCode)
	}
	p.metrics.PeerFetch(OutcomeOK)
	resp.Header.Del("Cache-Status")
	if peer.Complete && peer.Left > 0 {
		// Fresh no longer than the complete reference that led here
		// lives on: its owner put it for as long as its copy was fresh.
		// (A reference put while downloading lives 20 s, renewed, and
		// says nothing about freshness.)
		bound := min(peerFreshness(resp.Header), peer.Left)
		resp.Header[peerFreshnessField] = []string{formatAge(bound)}
	}
	return resp, nil
}

// peerControl runs on every socket opened to a peer, with the address
// about to be dialled: the references' filter (run) again, where it
// cannot be missed.
func (p *Proxy) peerControl(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil || !p.peerGuard.permitted(ap.Addr()) {
		return fmt.Errorf("coral_proxy: peer address %s not allowed (allow_peers)", address)
	}
	return nil
}

// selfAddr is the HTTP address put in DSHT references.
func (p *Proxy) selfAddr() netip.AddrPort {
	if a := p.peerAddr.Load(); a != nil {
		return *a
	}
	return netip.AddrPort{}
}

// advertisedAddrs are the addresses this proxy gives others: its HTTP
// address for peers (peer_address, or learned) and its DSHT node's, for
// the node's own addresses (selfaddr.go).
func (p *Proxy) advertisedAddrs() []netip.Addr {
	var out []netip.Addr
	if a := p.peerAddr.Load(); a != nil {
		out = append(out, a.Addr())
	}
	if node := p.dhtNode(); node != nil {
		out = append(out, node.Addr().Addr())
	}
	return out
}
