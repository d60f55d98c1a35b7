package coralcaddy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"sync"
	"time"
)

// What a download does when a peer it asked fails (its proxy died, refused
// the connection, or cannot be reached across a partition): it does not go
// straight to the origin. Every proxy that was copying from (or waiting on)
// that peer would then fetch the object once more, each on its own. It
// does its put+get again instead, leaving out the peers that failed, and
// asks the peers that returns. The put+get is answered at the key's
// closest node in the order the proxies come: the first retrier finds no
// live peer with the object and becomes the new downloader, the later ones
// find its fresh reference and copy from it as it arrives.
//
// The retriers lost their peer at the same instant, so each waits a random
// delay first (below peerRetryJitter), and while it waits answers the
// other retriers' requests with 504 at once rather than keeping them until
// peer_timeout: otherwise two retriers asking each other would both give
// up to the origin. After maxPeerRetries rounds, or when no peer is left,
// the origin remains the fallback; every round is bounded by the same
// timeouts as the first.
const (
	maxPeerRetries  = 3
	peerRetryJitter = time.Second
)

// errPeerNotCached is a peer's answer that it has not got the object (504
// to only-if-cached, or a refusal): the peer is alive. errPeerRetrying is
// the 504 of a peer that lost its own peer and retries (the Cache-Status
// detail peerRetryingDetail).
var (
	errPeerNotCached = errors.New("peer does not have it")
	errPeerRetrying  = fmt.Errorf("%w: it lost its own peer and retries", errPeerNotCached)
)

const peerRetryingDetail = "retrying"

// peerRetryState says whether a download has lost its peer and waits to
// retry (while it does, peers asking it get 504 at once), and wakes the
// peers that were waiting for it when it starts to.
type peerRetryState struct {
	mu       sync.Mutex
	retrying bool
	lost     chan struct{} // closed when the download starts waiting to retry
}

// state returns whether the download waits to retry now, and a channel
// closed when it next starts to. Take the channel before deciding to wait.
func (s *peerRetryState) state() (retrying bool, lost <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.lost == nil {
		s.lost = make(chan struct{})
	}
	return s.retrying, s.lost
}

func (s *peerRetryState) set(retrying bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.retrying = retrying
	if retrying && s.lost != nil {
		close(s.lost)
		s.lost = nil
	}
}

// peerFailed reports whether err, from asking a peer, means the peer is
// gone or unreachable (leave it out of the next put+get's peers) rather
// than alive: it answered without the object, or it accepted the
// connection but took too long (it may be waiting on its own peer).
func peerFailed(err error, connected bool) bool {
	if err == nil || errors.Is(err, errPeerNotCached) || errors.Is(err, context.Canceled) {
		return false
	}
	var ne net.Error
	if connected && (errors.As(err, &ne) && ne.Timeout() || errors.Is(err, context.DeadlineExceeded)) {
		return false
	}
	return true
}

// traceConnected returns ctx with a trace that sets *connected once a
// connection to the peer is obtained.
func traceConnected(ctx context.Context, connected *bool, mu *sync.Mutex) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(httptrace.GotConnInfo) {
			mu.Lock()
			*connected = true
			mu.Unlock()
		},
	})
}

// peerMisses is what the peers asked for an object said when none had it:
// which failed (dead or unreachable), and which lost their own peer and
// retry as well (errPeerRetrying).
type peerMisses struct {
	failed   map[netip.AddrPort]bool
	retrying []netip.AddrPort
}

// add notes what asking peer brought.
func (m *peerMisses) add(peer netip.AddrPort, failed bool, err error) {
	if failed {
		if m.failed == nil {
			m.failed = make(map[netip.AddrPort]bool)
		}
		m.failed[peer] = true
	}
	if errors.Is(err, errPeerRetrying) {
		m.retrying = append(m.retrying, peer)
	}
}

// retry reports whether a download that got m from its peers should do
// its put+get again rather than go to the origin: a peer failed, or a
// peer with a lower address than self retries too. Of the proxies that
// lost their peer at once and see one another retrying, the one with the
// lowest address goes to the origin; the others find it downloading in
// their next round.
func (m *peerMisses) retry(self netip.AddrPort) bool {
	if len(m.failed) > 0 {
		return true
	}
	for _, p := range m.retrying {
		if p.Compare(self) < 0 {
			return true
		}
	}
	return false
}

// retryPeers runs when the peers asked for fr had no copy but said to
// retry (miss.retry): it waits a random delay, does the put+get again and
// asks the peers it returns but the failed ones, up to maxPeerRetries
// times. It returns the response of the first peer that had it, or nil
// (go to the origin), and the DSHT level of the last put+get. Meanwhile
// peers asking this proxy get 504 at once.
func (e *engine) retryPeers(ctx context.Context, fr fetchRequest, d *download, asked []reference, miss peerMisses, level int) (*http.Response, int, error) {
	d.peerRetry.set(true)
	defer d.peerRetry.set(false)
	self := e.selfAddr()
	failed := miss.failed
	// The peers asked before are asked again with those the new put+get
	// returns: a get answers with the first values it finds, which may be
	// only the dead peer's reference, while a peer that said it retries
	// may be the new downloader by now.
	known := append([]reference(nil), asked...)
	for round := 0; round < maxPeerRetries && miss.retry(self); round++ {
		t := time.NewTimer(e.peerRetryDelay())
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, level, ctx.Err()
		}
		e.metrics.peerFetch(metricPeerRetry)
		peers, lvl := e.putGetPeers(ctx, fr)
		level = lvl
		var live []reference
		seen := make(map[netip.AddrPort]bool)
		for _, p := range append(peers, known...) {
			if !failed[p.Addr] && !seen[p.Addr] {
				seen[p.Addr] = true
				live = append(live, p)
			}
		}
		known = live
		var resp *http.Response
		resp, miss = e.fetchFromPeers(ctx, fr, live)
		if resp != nil {
			return resp, level, nil
		}
		for a := range miss.failed {
			if failed == nil {
				failed = make(map[netip.AddrPort]bool)
			}
			failed[a] = true
		}
	}
	return nil, level, nil
}

// peerRetryDelay is how long a download that lost its peer waits before
// its next put+get: random below peerRetryJitter (tests may fix it).
func (e *engine) peerRetryDelay() time.Duration {
	if e.retryDelay != nil {
		return e.retryDelay()
	}
	return rand.N(peerRetryJitter)
}
