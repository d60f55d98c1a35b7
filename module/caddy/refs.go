package coralcaddy

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// refTable keeps the long-lived DSHT references this proxy has put for
// the objects it holds, and renews each one when its TTL runs out, but only
// if the object was requested since the last put: a reference to an
// object nobody wants lapses on its own. It lives with the cache (across
// reloads), not with one handler configuration.
//
// Every hit notes its request (touch), so touch takes no lock: the
// references are in a sync.Map, read without one, and a request only sets
// a flag. mu serializes the writers (put, forget, due).
type refTable struct {
	mu    sync.Mutex
	refs  sync.Map // object key → *refState
	store *diskcache.Store
	node  *coraldht.Node
	// nodeFunc, when set, finds the node running now: the table outlives
	// configurations, and so restarts of the node.
	nodeFunc func() *coraldht.Node
	now      func() time.Time

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

func newRefTable(store *diskcache.Store, node *coraldht.Node) *refTable {
	return &refTable{store: store, node: node, now: time.Now}
}

func (t *refTable) dhtNode() *coraldht.Node {
	if t.nodeFunc != nil {
		return t.nodeFunc()
	}
	return t.node
}

// put records a reference just put for key.
func (t *refTable) put(key string, ref reference, ttl time.Duration) {
	if t == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	t.refs.Store(key, &refState{ref: ref, ttl: ttl, putAt: t.now()})
}

// forget stops renewing the reference put for key: its object was purged
// (purge.go). The reference already in the DSHT runs out on its own (at
// most refGoodTTL); a proxy that follows it meanwhile gets 504 from this
// one (only-if-cached) and moves on. It reports whether there was one.
func (t *refTable) forget(key string) bool {
	if t == nil {
		return false
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	_, ok := t.refs.LoadAndDelete(key)
	return ok
}

// len is how many references the table renews (for the admin API).
func (t *refTable) len() int {
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
func (t *refTable) touch(key string) {
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
func (t *refTable) due() map[string]refRenewal {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
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

// run renews references every interval until stopped.
func (t *refTable) run(interval time.Duration) {
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

func (t *refTable) stop() {
	if t.cancel != nil {
		t.cancel()
		<-t.done
	}
}
