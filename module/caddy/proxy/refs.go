package proxy

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// References keeps the long-lived DSHT references this proxy has put for
// the objects it holds, and renews each one when its TTL runs out, but only
// if the object was requested since the last put: a reference to an
// object nobody wants lapses on its own. It lives with the cache (across
// reloads), not with one proxy configuration.
//
// Every hit notes its request (touch), so touch takes no lock: the
// references are in a sync.Map, read without one, and a request only sets
// a flag. mu serializes the writers (put, forget, due).
type References struct {
	mu    sync.Mutex
	refs  sync.Map // object key → *refState
	store *diskcache.Store
	// node finds the node running now (Config.Node): the table outlives
	// configurations, and so restarts of the node.
	node func() DHT

	cancel context.CancelFunc
	done   chan struct{}
}

type refState struct {
	ref       reference
	ttl       time.Duration
	putAt     time.Time   // under mu
	requested atomic.Bool // since putAt
}

// refRenewal is a reference to put again.
type refRenewal struct {
	ref reference
	ttl time.Duration
}

// renewAhead is how long before a reference expires it is renewed.
const renewAhead = 2 * time.Minute

// NewReferences is the reference table of store, whose references are put
// through the node that node returns (Config.Node; nil: never a node). Run
// starts renewing them.
func NewReferences(store *diskcache.Store, node func() DHT) *References {
	return &References{store: store, node: node}
}

// dhtNode is the node to put references through now, or nil.
func (t *References) dhtNode() DHT {
	if t.node == nil {
		return nil
	}
	return t.node()
}

// put records a reference just put for key.
func (t *References) put(key string, ref reference, ttl time.Duration) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refs.Store(key, &refState{ref: ref, ttl: ttl, putAt: time.Now()})
}

// Forget stops renewing the reference put for key: its object was purged
// (it makes *References a purge.RefTable). The reference already in the DSHT runs out on its own (at
// most refGoodTTL); a proxy that follows it meanwhile gets 504 from this
// one (only-if-cached) and moves on. It reports whether there was one.
func (t *References) Forget(key string) bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.refs.LoadAndDelete(key)
	return ok
}

// Len is how many references the table renews (for the admin API).
func (t *References) Len() int {
	if t == nil {
		return 0
	}
	n := 0
	t.refs.Range(func(any, any) bool {
		n++
		return true
	})
	return n
}

// touch notes that key was requested.
func (t *References) touch(key string) {
	if t == nil {
		return
	}
	if v, ok := t.refs.Load(key); ok {
		if s := v.(*refState); !s.requested.Load() {
			// Only the first request after a put writes: the flag's cache
			// line is not bounced between CPUs on every hit.
			s.requested.Store(true)
		}
	}
}

// due returns the references to renew now, and forgets those that lapse
// (not requested since their put, or no longer cached).
func (t *References) due() map[string]refRenewal {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	out := make(map[string]refRenewal)
	t.refs.Range(func(k, v any) bool {
		key, s := k.(string), v.(*refState)
		if now.Before(s.putAt.Add(s.ttl - renewAhead)) {
			return true
		}
		// Swap, not Load: a request after this point counts for the
		// next renewal, not this one.
		_, cached := t.store.Peek(key)
		if !s.requested.Swap(false) || !cached {
			t.refs.Delete(key)
			return true
		}
		s.putAt = now
		out[key] = refRenewal{ref: s.ref, ttl: s.ttl}
		return true
	})
	return out
}

// Run renews references every interval until Stop.
func (t *References) Run(interval time.Duration) {
	ctx, cancel := context.WithCancel(context.Background())
	t.cancel, t.done = cancel, make(chan struct{})
	go func() {
		defer close(t.done)
		tick := time.NewTicker(interval)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			for key, s := range t.due() {
				pctx, pcancel := context.WithTimeout(ctx, 5*time.Second)
				if node := t.dhtNode(); node != nil {
					_, _ = node.Put(pctx, coraldht.KeyFor(key), s.ref.encode(), s.ttl)
				}
				pcancel()
			}
		}
	}()
}

// Stop ends what Run started and waits for it.
func (t *References) Stop() {
	if t.cancel != nil {
		t.cancel()
		<-t.done
	}
}
