package proxy

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"slices"
	"sync"
	"time"

	"go.uber.org/zap"

	"github.com/coralcdn/coral/coraldht"
)

// What a download does when a peer it asked fails (its proxy died, refused
// the connection, or cannot be reached across a partition): it does not go
// straight to the origin. Every proxy that was copying from (or waiting on)
// that peer would then fetch the object once more, each on its own. It
// does its put+get again instead, leaving out the peers that failed, and
// asks the peers that returns.
//
// Who of the retriers fetches from the origin is decided by one more
// put+get, on a key of their own: the URL's key joined with the address
// of the peer they lost (retryKey). Nobody else stores under it, so the
// put+gets of the retriers serialize at its closest node in their
// cluster and exactly one of them finds no value there: that one goes to
// the origin at once, and the others find it first in their answer and
// copy from it as it arrives. The URL's own key cannot decide this: its
// get answers with the first values it finds, which after a partition or
// a death are often only the lost peer's reference, so two retriers
// could each see nobody but the dead peer and each go to the origin.
//
// The retriers lost their peer at the same instant, so each waits a random
// delay first (below Config.PeerRetryJitter, 1 s by default), and while it waits answers the
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
// peer that comes before self retries too. A peer comes first when the
// retry key's put+get named it (ahead, it stored there before self), and
// otherwise when its address is lower: of the proxies that lost their
// peer at once and see one another retrying, the first one goes to the
// origin; the others find it downloading in their next round.
func (m *peerMisses) retry(self netip.AddrPort, ahead map[netip.AddrPort]bool) bool {
	if len(m.failed) > 0 {
		return true
	}
	for _, p := range m.retrying {
		if ahead[p] || p.Compare(self) < 0 {
			return true
		}
	}
	return false
}

// merge adds what other peers said.
func (m *peerMisses) merge(o peerMisses) {
	for a := range o.failed {
		m.add(a, true, nil)
	}
	m.retrying = append(m.retrying, o.retrying...)
}

// lowest returns the failed peer with the lowest address: the peer whose
// loss names the retry key. The retriers of one download usually lost
// only its downloader; when some lost more peers, the lowest is still
// the one they share in the common case of one lost downloader among
// several references.
func (m *peerMisses) lowest() netip.AddrPort {
	var low netip.AddrPort
	for a := range m.failed {
		if !low.IsValid() || a.Compare(low) < 0 {
			low = a
		}
	}
	return low
}

// retryKey is the DSHT key on which the proxies that lost peer lost for
// the URL with cache key baseKey decide which of them goes to the origin.
func retryKey(baseKey string, lost netip.AddrPort) coraldht.ID {
	return coraldht.KeyFor(baseKey + "\x00retry\x00" + lost.String())
}

// retryPeers runs when the peers asked for fr had no copy but said to
// retry (miss.retry): it waits a random delay, does the put+get on the
// URL's key again and asks the peers it returns but the failed ones, then
// the put+get on the retry key, and goes to the origin if it is the first
// there, or else asks the retriers ahead of it; up to maxPeerRetries
// times. While a retrier ahead of it on the retry key still says it
// retries (its put+get may wait on a dead node's timeout), it asks that
// one again every rivalPoll, for up to peer_timeout, without spending a
// round. It returns the response of the first peer that had it, or nil
// (go to the origin), and the DSHT level of the last put+get. Meanwhile
// peers asking this proxy get 504 at once.
func (p *Proxy) retryPeers(ctx context.Context, fr fetchRequest, d *download, asked []reference, miss peerMisses, level int) (*http.Response, int, error) {
	d.peerRetry.set(true)
	defer d.peerRetry.set(false)
	r := &retrier{p: p, fr: fr, self: p.selfAddr(), failed: miss.failed, lost: miss.lowest(),
		ahead: make(map[netip.AddrPort]bool), known: slices.Clone(asked), level: level}
	waitAheadUntil := time.Now().Add(p.peerTimeout)
	for rounds := 0; rounds < maxPeerRetries && miss.retry(r.self, r.ahead); {
		waitAhead := r.aheadRetrying(miss) && time.Now().Before(waitAheadUntil)
		delay := rivalPoll
		if !waitAhead {
			delay = p.peerRetryDelay()
			rounds++
		}
		t := time.NewTimer(delay)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			return nil, r.level, ctx.Err()
		}
		var resp *http.Response
		var origin bool
		if waitAhead {
			resp, miss = p.fetchFromPeers(ctx, fr, r.rivals)
		} else {
			p.metrics.PeerFetch(OutcomeRetry)
			resp, miss, origin = r.round(ctx)
		}
		if resp != nil || origin {
			return resp, r.level, nil
		}
		r.noteFailed(miss)
	}
	return nil, r.level, nil
}

// rivalPoll is how often a retrier asks a retrier ahead of it on the
// retry key that still says it retries.
const rivalPoll = 100 * time.Millisecond

// retrier is the state of one download's retries.
type retrier struct {
	p      *Proxy
	fr     fetchRequest
	self   netip.AddrPort
	failed map[netip.AddrPort]bool
	lost   netip.AddrPort          // the failed peer that names the retry key
	ahead  map[netip.AddrPort]bool // retriers the retry key put first
	rivals []reference             // those of them not failed
	placed bool                    // this proxy's reference is on the retry key
	known  []reference             // peers asked in the last round
	level  int                     // the DSHT level of the last put+get
}

// round does the put+get on the URL's key and asks the live peers it
// names; if none has the object, the put+get on the retry key decides
// whether this proxy is the one to go to the origin (origin), or which
// retriers ahead of it to ask. The URL's key comes first: a proxy that
// another retrier's 504 sent to the origin (the lowest-address rule) is
// found there, and it never stored on the retry key.
func (r *retrier) round(ctx context.Context) (resp *http.Response, miss peerMisses, origin bool) {
	peers, lvl := r.p.putGetPeers(ctx, r.fr)
	r.level = lvl
	asked := make(map[netip.AddrPort]bool)
	var live []reference
	for _, p := range slices.Concat(r.rivals, peers, r.known) {
		if !r.failed[p.Addr] && !asked[p.Addr] {
			asked[p.Addr] = true
			live = append(live, p)
		}
	}
	r.known = live
	if resp, miss = r.p.fetchFromPeers(ctx, r.fr, live); resp != nil {
		return resp, miss, false
	}
	r.noteFailed(miss)
	// The retry key is put+got once, in the first round that reaches it:
	// a second put+get would find this proxy's own reference (or only
	// that) and prove nothing. The rivals it named come first; when all
	// of them have failed, this proxy goes.
	if r.lost.IsValid() && !r.placed {
		rivals, first, ok := r.p.putGetRivals(ctx, r.fr, r.lost, r.failed)
		if first {
			return nil, miss, true
		}
		r.placed, r.rivals = ok, rivals
		for _, p := range rivals {
			r.ahead[p.Addr] = true
		}
		rivals = slices.DeleteFunc(slices.Clone(rivals), func(p reference) bool { return asked[p.Addr] })
		if len(rivals) > 0 {
			var more peerMisses
			if resp, more = r.p.fetchFromPeers(ctx, r.fr, rivals); resp != nil {
				return resp, more, false
			}
			miss.merge(more)
		}
	}
	r.rivals = slices.DeleteFunc(r.rivals, func(p reference) bool { return r.failed[p.Addr] })
	return nil, miss, r.placed && len(r.rivals) == 0
}

// aheadRetrying reports whether a retrier ahead of this one on the retry
// key said it retries.
func (r *retrier) aheadRetrying(miss peerMisses) bool {
	for _, p := range miss.retrying {
		if r.ahead[p] && !r.failed[p] {
			return true
		}
	}
	return false
}

func (r *retrier) noteFailed(miss peerMisses) {
	for a := range miss.failed {
		if r.failed == nil {
			r.failed = make(map[netip.AddrPort]bool)
		}
		r.failed[a] = true
	}
}

// putGetRivals does the put+get on the retry key for lost: it returns
// the other retriers that stored there before this proxy, less the failed
// ones, whether this proxy is the first (the put+get succeeded and named
// nobody alive), which makes it the one to go to the origin, and whether
// the put+get succeeded.
func (p *Proxy) putGetRivals(ctx context.Context, fr fetchRequest, lost netip.AddrPort, failed map[netip.AddrPort]bool) (rivals []reference, first, ok bool) {
	self := p.selfAddr()
	node := p.dhtNode()
	if node == nil || !self.IsValid() {
		return nil, false, false
	}
	res, err := node.PutGet(ctx, retryKey(fr.baseKey, lost), p.selfReference(self).encode(), refFetchingTTL)
	if err != nil {
		p.logger.Debug("put+get on the retry key failed", zap.Error(err))
		return nil, false, false
	}
	rivals = slices.DeleteFunc(p.peerReferences(fr, res.Values, self), func(r reference) bool { return failed[r.Addr] })
	return rivals, len(rivals) == 0, true
}

// peerRetryDelay is how long a download that lost its peer waits before
// its next put+get: random below Config.PeerRetryJitter.
func (p *Proxy) peerRetryDelay() time.Duration {
	if p.peerRetryJitter <= 0 {
		return 0
	}
	return rand.N(p.peerRetryJitter)
}
