package coralcaddy

import (
	"context"
	"sync"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// refTable keeps the long-lived DSHT references this proxy has put for
// the objects it holds, and renews each one when its TTL runs out, but only
// if the object was requested since the last put: a reference to an
// object nobody wants lapses on its own. It lives with the cache (across
// reloads), not with one handler configuration.
type refTable struct {
	mu    sync.Mutex
	refs  map[string]*refState
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
	putAt     time.Time
	requested time.Time
}

// renewAhead is how long before a reference expires it is renewed.
const renewAhead = 2 * time.Minute

func newRefTable(store *diskcache.Store, node *coraldht.Node) *refTable {
	return &refTable{refs: make(map[string]*refState), store: store, node: node, now: time.Now}
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
	now := t.now()
	t.refs[key] = &refState{ref: ref, ttl: ttl, putAt: now}
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
	_, ok := t.refs[key]
	delete(t.refs, key)
	return ok
}

// len is how many references the table renews.
func (t *refTable) len() int {
	if t == nil {
		return 0
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.refs)
}

// touch notes that key was requested.
func (t *refTable) touch(key string) {
	if t == nil {
		return
	}
	t.mu.Lock()
	if s, ok := t.refs[key]; ok {
		s.requested = t.now()
	}
	t.mu.Unlock()
}

// due returns the references to renew now, and forgets those that lapse
// (not requested since their put, or no longer cached).
func (t *refTable) due() map[string]refState {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := t.now()
	out := make(map[string]refState)
	for key, s := range t.refs {
		if now.Before(s.putAt.Add(s.ttl - renewAhead)) {
			continue
		}
		if !s.requested.After(s.putAt) {
			delete(t.refs, key)
			continue
		}
		if _, ok := t.store.Peek(key); !ok {
			delete(t.refs, key)
			continue
		}
		s.putAt = now
		out[key] = *s
	}
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
