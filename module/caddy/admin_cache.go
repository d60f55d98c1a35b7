package coralcaddy

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/proxy"
)

type adminCachePage struct {
	Dir     string        `json:"dir"`
	Total   int           `json:"total"` // keys in the cache, complete or being written
	Objects []adminObject `json:"objects"`
	// Next is the after= value of the next page; empty on the last page.
	Next string `json:"next,omitempty"`
}

type adminObject struct {
	Key       string     `json:"key"`
	URL       string     `json:"url,omitempty"`
	Status    int        `json:"status,omitempty"`
	Size      int64      `json:"size"` // of the complete version; -1 if there is none yet
	Source    string     `json:"source,omitempty"`
	Stored    *time.Time `json:"stored,omitempty"`
	Expires   *time.Time `json:"expires,omitempty"`
	LastUsed  *time.Time `json:"last_used,omitempty"`
	Writing   bool       `json:"writing,omitempty"`
	Written   int64      `json:"written,omitempty"`
	WriteSize int64      `json:"write_size,omitempty"` // -1 while unknown
}

// handleCache lists a cache's objects in key order, which stays put while
// objects are used, so pages neither repeat nor skip objects that remain
// cached.
func (a *AdminAPI) handleCache(w http.ResponseWriter, r *http.Request) error {
	if err := adminOnlyGET(w, r); err != nil {
		return err
	}
	q := r.URL.Query()
	limit := adminCacheDefaultLimit
	if v := q.Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 {
			return caddy.APIError{HTTPStatus: http.StatusBadRequest, Err: fmt.Errorf("limit %q: want a positive number", v)}
		}
		limit = min(n, adminCacheMaxLimit)
	}
	after := q.Get("after")
	caches := runningCaches()
	if len(caches) == 0 {
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("no coral_proxy cache is running")}
	}
	c := caches[0]
	if dir := q.Get("dir"); dir != "" {
		i := slices.IndexFunc(caches, func(c cacheRef) bool { return c.dir == dir })
		if i < 0 {
			return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("no coral_proxy cache in %q", dir)}
		}
		c = caches[i]
	}
	return adminJSON(w, adminPageOf(c, after, limit))
}

func adminPageOf(c cacheRef, after string, limit int) adminCachePage {
	var infos []diskcache.Info
	c.store.Range(func(in diskcache.Info) bool {
		infos = append(infos, in)
		return true
	})
	slices.SortFunc(infos, func(a, b diskcache.Info) int { return strings.Compare(a.Key, b.Key) })
	start := 0
	if after != "" {
		start, _ = slices.BinarySearchFunc(infos, after, func(in diskcache.Info, k string) int { return strings.Compare(in.Key, k) })
		if start < len(infos) && infos[start].Key == after {
			start++
		}
	}
	end := min(start+limit, len(infos))
	page := adminCachePage{Dir: c.dir, Total: len(infos), Objects: make([]adminObject, 0, end-start)}
	for _, in := range infos[start:end] {
		o, _, _ := adminObjectOf(c.store, in)
		page.Objects = append(page.Objects, o)
	}
	if end < len(infos) && end > start {
		page.Next = infos[end-1].Key
	}
	return page
}

// adminObjectOf describes the object in, with its metadata (which it
// returns too; ok is false if the object went away meanwhile).
func adminObjectOf(store *diskcache.Store, in diskcache.Info) (o adminObject, m diskcache.Meta, ok bool) {
	o = adminObject{Key: in.Key, Size: in.Size, Writing: in.Writing}
	if in.Writing {
		o.Written, o.WriteSize = in.Written, in.WriteSize
	}
	if !in.LastUsed.IsZero() {
		t := in.LastUsed
		o.LastUsed = &t
	}
	if m, ok = store.Peek(in.Key); ok {
		o.URL, o.Status, o.Source = m.Extra["url"], m.Status, m.Extra["source"]
		if !m.Stored.IsZero() {
			t := m.Stored
			o.Stored = &t
		}
		if !m.Expires.IsZero() {
			t := m.Expires
			o.Expires = &t
		}
	}
	return o, m, ok
}

// adminRecentObjects returns up to n of a cache's most recently used
// complete objects, most recent first, leaving out Vary indexes (which
// only point at the variants).
func adminRecentObjects(c cacheRef, n int) []adminObject {
	out := []adminObject{}
	// A few more than n, for the Vary indexes left out; the store is
	// walked from its most recent end only (not copied whole).
	for _, in := range c.store.Recent(2*n + 8) {
		if len(out) >= n {
			break
		}
		if o, m, ok := adminObjectOf(c.store, in); ok && !proxy.IsVaryIndex(m) {
			out = append(out, o)
		}
	}
	return out
}

const (
	adminCacheDefaultLimit = 100
	adminCacheMaxLimit     = 1000
)
