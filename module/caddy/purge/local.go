package purge

import (
	"context"
	"strings"
	"time"

	"github.com/coralcdn/coral/module/caddy/diskcache"
)

// Cache is one distinct store and what uses it: the coral_proxy handlers
// (their engines) and their reference tables.
type Cache struct {
	Dir   string
	Zones []string
	Store *diskcache.Store
	// VaryIndexField is the metadata field that marks a Vary index (its
	// variants are stored under keys of their own).
	VaryIndexField string
	Handlers       []Handler
	Refs           []RefTable
}

// Handler is what a purge asks of a handler using the store.
type Handler interface {
	// MarkPurged remembers that key was purged now, so that a miss on it
	// goes to the origin, not to peers that may still hold the old copy.
	MarkPurged(key string)
	// Pending returns a channel closed once a download of key that has
	// not reached the store yet gets there (or fails); nil if there is
	// none.
	Pending(key string) <-chan struct{}
}

// RefTable is a table of the DSHT references a handler renews.
type RefTable interface {
	// Forget stops renewing key's reference, reporting whether there was
	// one.
	Forget(key string) bool
}

// CacheResult is what a purge did to one cache.
type CacheResult struct {
	Dir   string   `json:"dir,omitempty"`
	Zones []string `json:"zones,omitempty"`
	// Purged counts the entries removed: complete objects and downloads
	// in progress, Vary indexes and variants included.
	Purged int `json:"purged"`
	// Variants of them were variants of a Vary'd URL (exact purges).
	Variants int `json:"variants"`
	// DownloadsAborted of them were downloads writing into the cache.
	DownloadsAborted int `json:"downloads_aborted"`
	// DownloadsPending are downloads of the URL still waiting for their
	// response header after PendingWait: they store what they get.
	DownloadsPending int `json:"downloads_pending"`
	// Scanned counts the objects whose metadata was read (prefix purges,
	// and exact purges of a Vary index).
	Scanned int `json:"scanned"`
	// ReferencesDropped counts the DSHT references no longer renewed.
	ReferencesDropped int `json:"references_dropped"`
	// Complete is false when the purge stopped early (the node closing).
	Complete bool `json:"complete"`
}

func (r *CacheResult) add(o CacheResult) {
	r.Purged += o.Purged
	r.Variants += o.Variants
	r.DownloadsAborted += o.DownloadsAborted
	r.DownloadsPending += o.DownloadsPending
	r.Scanned += o.Scanned
	r.ReferencesDropped += o.ReferencesDropped
	r.Complete = r.Complete && o.Complete
}

// LocalResult is a local purge over every cache: totals and per cache.
type LocalResult struct {
	CacheResult
	Caches []CacheResult `json:"caches"`
}

// Local purges spec from caches (every running cache). It runs to its end
// unless ctx ends (then Complete is false).
func Local(ctx context.Context, spec Spec, caches []Cache) LocalResult {
	res := LocalResult{CacheResult: CacheResult{Complete: true}, Caches: []CacheResult{}}
	deadline := time.Now().Add(PendingWait)
	for _, c := range caches {
		var cr CacheResult
		if spec.Prefix {
			cr = purgePrefix(ctx, c, spec.Norm)
		} else {
			cr = purgeExact(ctx, c, spec.Key, deadline)
		}
		cr.Dir, cr.Zones = c.Dir, c.Zones
		res.add(cr)
		res.Caches = append(res.Caches, cr)
	}
	return res
}

// purgeKey removes key from c's store (a complete version and any write in
// progress), counting it in r.
func purgeKey(c Cache, key string, r *CacheResult) bool {
	for _, h := range c.Handlers {
		h.MarkPurged(key)
	}
	in, _ := c.Store.Stat(key)
	if c.Store.Delete(key) != nil {
		return false
	}
	r.Purged++
	if in.Writing {
		r.DownloadsAborted++
	}
	return true
}

// forgetRef drops key's reference from c's reference tables.
func forgetRef(c Cache, key string, r *CacheResult) {
	for _, t := range c.Refs {
		if t.Forget(key) {
			r.ReferencesDropped++
		}
	}
}

// purgeExact removes the entry of key, its variants when it is a Vary
// index, and a download of it that reaches the cache before deadline.
func purgeExact(ctx context.Context, c Cache, key string, deadline time.Time) CacheResult {
	r := CacheResult{Complete: true}
	m, ok := c.Store.Peek(key)
	vary := ok && m.Extra[c.VaryIndexField] != ""
	// The reference first: a table may keep it with the object (the
	// proxy's does, in the store's index).
	forgetRef(c, key, &r)
	purgeKey(c, key, &r)
	// A download of the key that has not reached the cache yet: wait for
	// it to get there (or fail), then remove it too.
	for _, h := range c.Handlers {
		ready := h.Pending(key)
		if ready == nil {
			continue
		}
		wait := time.Until(deadline)
		if wait <= 0 {
			r.DownloadsPending++
			continue
		}
		t := time.NewTimer(wait)
		select {
		case <-ready:
			t.Stop()
			purgeKey(c, key, &r)
		case <-t.C:
			r.DownloadsPending++
		case <-ctx.Done():
			t.Stop()
			r.DownloadsPending++
		}
	}
	if !vary {
		return r
	}
	// The variants: every object stored for the same URL.
	c.Store.Walk(batch, func(infos []diskcache.Info) bool {
		for _, in := range infos {
			if in.Key == key {
				continue
			}
			r.Scanned++
			m, ok := c.Store.Peek(in.Key)
			if !ok {
				continue
			}
			if n, ok := StoredNorm(m.Extra["url"]); ok && KeyOfNorm(n) == key && purgeKey(c, in.Key, &r) {
				r.Variants++
			}
		}
		return ctx.Err() == nil
	})
	if ctx.Err() != nil {
		r.Complete = false
	}
	return r
}

// purgePrefix removes every object of c whose stored URL, normalized,
// starts with prefix.
func purgePrefix(ctx context.Context, c Cache, prefix string) CacheResult {
	r := CacheResult{Complete: true}
	c.Store.Walk(batch, func(infos []diskcache.Info) bool {
		for _, in := range infos {
			r.Scanned++
			m, ok := c.Store.Peek(in.Key)
			if !ok {
				continue
			}
			n, ok := StoredNorm(m.Extra["url"])
			if !ok || !strings.HasPrefix(n, prefix) {
				continue
			}
			// The reference is per URL: the key of the URL's entry
			// (forgotten before the entry is gone, as in purgeExact).
			forgetRef(c, KeyOfNorm(n), &r)
			purgeKey(c, in.Key, &r)
		}
		return ctx.Err() == nil
	})
	if ctx.Err() != nil {
		r.Complete = false
	}
	return r
}
