package proxy

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/textproto"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// Downloads in progress: one per object per proxy, however many clients
// and peers wait for it. The download writes into the disk cache, and
// every client reads the in-progress object from there, getting what has
// arrived at once and the rest as it comes.

// download is one fetch in progress at this proxy.
type download struct {
	ready chan struct{} // closed once the object exists in the store (or the fetch failed)
	done  chan struct{} // closed once the download has ended and left the in-flight table
	err   error         // why, if it failed before the object existed; set before ready closes
	// direct carries a response that may not be stored (no-store, private,
	// a transient error) to the request that started the download; the
	// requests that joined it fetch on their own.
	direct *http.Response
	// shared is direct when the requests that joined the download may
	// have it too (shareError): its head and whole body, and the fields
	// the origin was sent, which a joiner must have sent alike.
	shared *sharedAnswer
	// relay is direct's download slot, and cancelRelay ends its fetch.
	relay       *relaySlot
	cancelRelay context.CancelFunc
	source      string // where the bytes come from: "origin" or "peer-l<level>"
	// For revalidations of a stale copy: the origin said 304 and the copy
	// is fresh again (revalidated), or the origin failed and the stale copy
	// is served with its expiry extended (stale).
	revalidated, stale bool
	// cancel ends the fetch: its requests and connections.
	cancel context.CancelFunc
	// slot is the download slot this download holds (downloadSlots): its
	// origin, the client that started it, and the origin address.
	slot *slotHold
	// key is the in-flight key the download runs under; storeKey, if
	// different, the key it stores the object under (a variant's), where
	// it is found as well.
	key, storeKey string
	// holders counts the requests waiting for or reading this download
	// (clients, and peers streaming it); guarded by Proxy.mu. When the
	// last one goes, the download is cancelled unless nearlyDone or
	// background (started for nobody: a stale-while-revalidate refresh).
	holders    int
	background bool
	abandoned  atomic.Bool // cancelled by letGo
	// received and expected count the body's bytes as they arrive and as
	// declared (-1: not known yet, or never).
	received, expected atomic.Int64
	// interim carries the origin's interim responses (1xx but 100 and
	// 101) to the request that started the download, which relays them
	// (RFC 9110 §15.2: a proxy forwards them). They are never stored.
	interim chan interimResponse
	// peerRetry says whether the download lost its peer and waits to do
	// its put+get again (refetch.go).
	peerRetry peerRetryState
	// asking is the addresses of the peers the download asks first, once
	// known (askingPeers); askingKnown is closed then. Nil: never closed.
	asking      atomic.Pointer[[]netip.AddrPort]
	askingLevel int // the DSHT level they were found at; set before askingKnown closes
	askingKnown chan struct{}
	askingOnce  sync.Once
	// starter is a Reader of the object opened for the request that
	// started the download before any byte is written: should the disk
	// refuse the body, the write is relayed to the Readers it has
	// (diskcache's ErrNotStored), and one opened later would find nothing.
	starter atomic.Pointer[diskcache.Reader]
	// relayed says the disk refused the object: its download relays it
	// to the Readers it had, and a request that joins later fetches its
	// own copy (fetchOwn).
	relayed atomic.Bool
}

// takeStarter returns the Reader kept for the request that started d, if
// any (the caller closes it).
func (d *download) takeStarter() *diskcache.Reader {
	return d.starter.Swap(nil)
}

// askingPeers records the peers d asks first (none: it goes to the
// origin), for the requests of those peers that wait for d
// (serveOnlyIfCached).
func (d *download) askingPeers(peers []reference, level int) {
	addrs := make([]netip.AddrPort, len(peers))
	for i, r := range peers {
		addrs[i] = r.Addr
	}
	d.asking.Store(&addrs)
	if d.askingKnown != nil {
		d.askingOnce.Do(func() {
			d.askingLevel = level
			close(d.askingKnown)
		})
	}
}

// storedMeanwhile opens the object of a request whose lookup missed, if
// it has been stored since.
func (p *Proxy) storedMeanwhile(ctx context.Context, fr fetchRequest) (*diskcache.Reader, bool) {
	if !fr.missing {
		return nil, false
	}
	return p.store.GetContext(ctx, fr.key)
}

// errStoredMeanwhile says startDownload found the object stored once it
// had a download slot: the caller looks it up again.
var errStoredMeanwhile = errors.New("coral_proxy: stored while waiting for a download slot")

// interimResponse is one 1xx response from the origin.
type interimResponse struct {
	status int
	header http.Header
}

// interimWait bounds how long the origin's response waits for its
// requester to take an interim response: a requester that has gone, or
// does not read, does not hold the download up.
const interimWait = time.Second

// traceInterim returns ctx with a trace that passes the interim responses
// of a request to d's requester, at most maxInterimResponses of them: the
// one after that ends the fetch.
func traceInterim(ctx context.Context, d *download) context.Context {
	var limit interimLimiter
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		Got1xxResponse: func(code int, header textproto.MIMEHeader) error {
			if err := limit.next(); err != nil {
				return err
			}
			if err := checkHeadFields(http.Header(header)); err != nil {
				return err
			}
			if code == http.StatusContinue || code == http.StatusSwitchingProtocols {
				return nil
			}
			t := time.NewTimer(interimWait)
			defer t.Stop()
			select {
			case d.interim <- interimResponse{status: code, header: http.Header(header).Clone()}:
			case <-t.C:
			case <-ctx.Done():
			}
			return nil
		},
	})
}

// startDownload returns the download for fr.key, starting one if none runs
// (started). Starting one takes a download slot: when none is free it waits
// at most wait for one (0: not at all), and returns errDownloadsBusy after
// that, or ctx's error when ctx (the request's) ends first. With hold, the
// download is held for the caller, who must letGo of it.
func (p *Proxy) startDownload(ctx context.Context, fr fetchRequest, wait time.Duration, hold bool) (d *download, started bool, err error) {
	if d := p.holdInflight(fr.key, hold); d != nil {
		return d, false, nil
	}
	slot, err := p.slots.acquire(ctx, fr.originSlot(), p.clientKey(&fr), wait)
	if err != nil {
		return nil, false, err
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if d, ok := p.inflight[fr.key]; ok {
		p.slots.release(slot) // another request started it meanwhile
		if hold {
			d.holders++
		}
		// A download of the key may have ended while this request waited for
		// its slot (or between its lookup and now): it is stored, and a second
		// fetch would ask the origin again. The store never calls back into
		// the proxy, so asking it under p.mu is safe; without a stored copy
		// (the common case) it is an index lookup.
		if rd, ok := p.storedMeanwhile(ctx, fr); ok {
			rd.Close()
			p.slots.release(slot)
			return nil, false, errStoredMeanwhile
		}
		return d, false, nil
	}
	d = &download{ready: make(chan struct{}), done: make(chan struct{}), slot: slot,
		key: fr.key, interim: make(chan interimResponse), askingKnown: make(chan struct{})}
	d.expected.Store(-1)
	if hold {
		d.holders = 1
	} else {
		d.background = true
	}
	dctx, cancel := p.downloadContext()
	dctx = withSlotHold(dctx, slot)
	d.cancel = cancel
	p.inflight[fr.key] = d
	go p.run(dctx, fr, d)
	return d, true, nil
}

// inflightFor returns the download running for key, if any.
func (p *Proxy) inflightFor(key string) *download {
	return p.holdInflight(key, false)
}

// holdInflight returns the download running for key, if any, held for the
// caller (who must letGo of it) if hold.
func (p *Proxy) holdInflight(key string, hold bool) *download {
	p.mu.Lock()
	defer p.mu.Unlock()
	d := p.inflight[key]
	if d != nil && hold {
		d.holders++
	}
	return d
}

// letGo ends the caller's hold on d. A download that still runs, that
// nobody holds any more and that is not nearly done is cancelled: it
// leaves the in-flight table at once and frees its slot as it ends.
func (p *Proxy) letGo(d *download) {
	if d == nil {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	d.holders--
	if d.holders > 0 || d.background || p.inflight[d.key] != d || d.nearlyDone() {
		return
	}
	p.finishLocked(d)
	d.abandoned.Store(true)
	d.cancel()
}

// nearlyDone reports whether at least nearlyDonePercent of d's declared
// length has arrived.
func (d *download) nearlyDone() bool {
	want := d.expected.Load()
	return want > 0 && d.received.Load()*100 >= want*nearlyDonePercent
}

// finish takes d out of the in-flight table (where it is still the
// download for its keys).
func (p *Proxy) finish(d *download) {
	p.mu.Lock()
	p.finishLocked(d)
	p.mu.Unlock()
}

func (p *Proxy) finishLocked(d *download) {
	for _, k := range []string{d.key, d.storeKey} {
		if k != "" && p.inflight[k] == d {
			delete(p.inflight, k)
		}
	}
}

// storingAs notes that d stores its object under key, so requests for
// that key find and hold it.
func (p *Proxy) storingAs(d *download, key string) {
	if key == d.key {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.inflight[d.key] != d {
		return // already cancelled or finished
	}
	d.storeKey = key
	if _, ok := p.inflight[key]; !ok {
		p.inflight[key] = d
	}
}

// errAbandoned is why a download was cancelled: no client waited for it
// any more (letGo).
var errAbandoned = errors.New("abandoned: no client wants it any more")
