package coralcaddy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/module/caddy/diskcache"
)

func init() {
	caddy.RegisterModule(AdminAPI{})
}

// AdminAPI is the admin API module "admin.api.coral". Caddy loads every
// registered admin.api.* module into its admin server, so it needs no
// configuration. It serves, on the admin address:
//
//	GET /coral/status   the DSHT node, its levels and counters, the caches
//	                    and the most recent origin and peer fetches
//	GET /coral/cache    the objects of a cache, in pages:
//	                    ?limit=N (default 100, at most 1000),
//	                    ?after=KEY (the previous page's "next"),
//	                    ?dir=DIR (which cache; default the newest)
//	POST /coral/purge   remove a URL from every cache of this Caddy:
//	                    url=URL (Coralized or the origin's; in the query
//	                    or a form body), prefix=1 (every URL under it),
//	                    network=1 (also at the proxies that hold a copy,
//	                    asked over the DSHT), network=all, timeout=10s;
//	                    see purge.go
//	GET /coral/health   200 when joined and not draining, else 503
//	POST /coral/drain   take the node out of DNS answers; DELETE: undo;
//	                    see reload.go
//
// Like the rest of Caddy's admin API these answer only on the admin
// address, subject to its origin checks and, when configured, its remote
// access control; never on a site's listener.
//
// It finds the running coral app and coral_proxy handlers through a
// package-level registry that their Provision and Cleanup update.
type AdminAPI struct{}

// CaddyModule returns the Caddy module information.
func (AdminAPI) CaddyModule() caddy.ModuleInfo {
	return caddy.ModuleInfo{ID: "admin.api.coral", New: func() caddy.Module { return new(AdminAPI) }}
}

// Routes implements caddy.AdminRouter.
func (a *AdminAPI) Routes() []caddy.AdminRoute {
	return []caddy.AdminRoute{
		{Pattern: "/coral/status", Handler: caddy.AdminHandlerFunc(a.handleStatus)},
		{Pattern: "/coral/cache", Handler: caddy.AdminHandlerFunc(a.handleCache)},
		{Pattern: "/coral/purge", Handler: caddy.AdminHandlerFunc(a.handlePurge)},
		{Pattern: "/coral/health", Handler: caddy.AdminHandlerFunc(a.handleHealth)},
		{Pattern: "/coral/drain", Handler: caddy.AdminHandlerFunc(a.handleDrain)},
		{Pattern: "/coral/keys", Handler: caddy.AdminHandlerFunc(a.handleKeys)},
		{Pattern: "/coral/keys/install", Handler: caddy.AdminHandlerFunc(a.handleKeys)},
		{Pattern: "/coral/keys/primary", Handler: caddy.AdminHandlerFunc(a.handleKeys)},
		{Pattern: "/coral/keys/remove", Handler: caddy.AdminHandlerFunc(a.handleKeys)},
	}
}

// Provision registers the coral metrics on the configuration's registry.
// Caddy replaces its admin server, and /metrics with it, before it
// provisions the apps: should the configuration fail, /metrics goes on
// serving its registry, which must still show the node and caches that
// keep running (see coralCollector).
func (a *AdminAPI) Provision(ctx caddy.Context) error {
	if _, err := newProxyMetrics(ctx.GetMetricsRegistry(), nil, nil); err != nil {
		return err
	}
	return nil
}

// The running apps and handlers, in the order they were provisioned. A
// reload provisions the new configuration before cleaning up the old one,
// so for a moment both are here; the newest comes last.
var adminRegistry struct {
	mu      sync.Mutex
	apps    []*App
	proxies []*Handler
}

// registerApp makes a provisioned coral app visible to the admin API. Call
// it at the end of App.Provision, once the node is there.
func registerApp(a *App) {
	adminRegistry.mu.Lock()
	defer adminRegistry.mu.Unlock()
	if !slices.Contains(adminRegistry.apps, a) {
		adminRegistry.apps = append(adminRegistry.apps, a)
	}
	if e := a.current(); e != nil && e.node != nil && a.run == nil {
		// An app built by hand (tests); current registers the purge
		// handler on every node it sees.
		e.node.HandleApp(purgeKind, peerPurgeHandler(adminCaches))
	}
}

// runningNode is the DSHT node of the newest started coral app, as it runs
// now, or nil.
func runningNode() *coraldht.Node {
	if e := runningEntry(); e != nil {
		return e.node
	}
	return nil
}

// runningApp is the newest started coral app with a node, or nil.
func runningApp() (*App, *nodeEntry) {
	apps, _ := adminRegistered()
	for i := len(apps) - 1; i >= 0; i-- {
		if e := apps[i].current(); e != nil && e.node != nil {
			return apps[i], e
		}
	}
	return nil, nil
}

func runningEntry() *nodeEntry {
	_, e := runningApp()
	return e
}

// unregisterApp removes the app; call it first thing in App.Cleanup.
func unregisterApp(a *App) {
	adminRegistry.mu.Lock()
	defer adminRegistry.mu.Unlock()
	adminRegistry.apps = slices.DeleteFunc(adminRegistry.apps, func(x *App) bool { return x == a })
}

// registerProxy makes a provisioned coral_proxy handler (its store) visible
// to the admin API. Call it at the end of Handler.Provision, once h.store
// is set; the handler's fields must not change afterwards.
func registerProxy(h *Handler) {
	adminRegistry.mu.Lock()
	defer adminRegistry.mu.Unlock()
	if !slices.Contains(adminRegistry.proxies, h) {
		adminRegistry.proxies = append(adminRegistry.proxies, h)
	}
}

// unregisterProxy removes the handler; call it first thing in
// Handler.Cleanup, before the store is released.
func unregisterProxy(h *Handler) {
	adminRegistry.mu.Lock()
	defer adminRegistry.mu.Unlock()
	adminRegistry.proxies = slices.DeleteFunc(adminRegistry.proxies, func(x *Handler) bool { return x == h })
}

func adminRegistered() (apps []*App, proxies []*Handler) {
	adminRegistry.mu.Lock()
	defer adminRegistry.mu.Unlock()
	return slices.Clone(adminRegistry.apps), slices.Clone(adminRegistry.proxies)
}

// adminCacheRef is one distinct store and the handlers using it: their
// zones, the reference tables of the store (one per store, but a handler
// set up outside Caddy may have none) and their fetch engines.
type adminCacheRef struct {
	dir     string
	store   *diskcache.Store
	zones   []string
	refs    []*refTable
	engines []*engine
}

// adminCaches lists the distinct stores of the registered handlers,
// newest first.
func adminCaches() []adminCacheRef {
	_, proxies := adminRegistered()
	var out []adminCacheRef
	for i := len(proxies) - 1; i >= 0; i-- {
		h := proxies[i]
		if h.store == nil {
			continue
		}
		j := slices.IndexFunc(out, func(c adminCacheRef) bool { return c.store == h.store })
		if j < 0 {
			dir := h.storeKey
			if dir == "" {
				dir = h.CacheDir
			}
			out = append(out, adminCacheRef{dir: dir, store: h.store})
			j = len(out) - 1
		}
		if !slices.Contains(out[j].zones, h.Zone) {
			out[j].zones = append(out[j].zones, h.Zone)
		}
		if h.eng != nil {
			out[j].engines = append(out[j].engines, h.eng)
			if h.eng.refs != nil && !slices.Contains(out[j].refs, h.eng.refs) {
				out[j].refs = append(out[j].refs, h.eng.refs)
			}
		}
	}
	return out
}

// Recent fetches: a small ring the download path appends to.

const (
	recentFetchCount  = 64
	recentFetchURLMax = 2048
)

// adminFetch is one recorded fetch.
type adminFetch struct {
	Time       time.Time `json:"time"`
	URL        string    `json:"url"`
	Source     string    `json:"source"` // origin or peer-l<level>
	Status     int       `json:"status"` // 0: no response (the error is not kept)
	Bytes      int64     `json:"bytes"`
	DurationMS float64   `json:"duration_ms"`
}

var adminFetchLog struct {
	mu   sync.Mutex
	ring [recentFetchCount]adminFetch
	n    int // fetches recorded in all
}

// recordFetch notes a finished fetch from an origin or a peer for
// /coral/status: the URL fetched, where from (origin, peer-l<level>), the
// response status (0 if there was none), the body bytes received and how
// long it took. It keeps the last 64, process-wide.
func recordFetch(url, source string, status int, bytes int64, dur time.Duration) {
	if len(url) > recentFetchURLMax {
		url = url[:recentFetchURLMax]
	}
	f := adminFetch{Time: time.Now(), URL: url, Source: source, Status: status, Bytes: bytes,
		DurationMS: float64(dur) / float64(time.Millisecond)}
	adminFetchLog.mu.Lock()
	adminFetchLog.ring[adminFetchLog.n%recentFetchCount] = f
	adminFetchLog.n++
	adminFetchLog.mu.Unlock()
}

// adminLastFetches returns the recorded fetches, newest first.
func adminLastFetches() []adminFetch {
	adminFetchLog.mu.Lock()
	defer adminFetchLog.mu.Unlock()
	k := min(adminFetchLog.n, recentFetchCount)
	out := make([]adminFetch, 0, k)
	for i := 1; i <= k; i++ {
		out = append(out, adminFetchLog.ring[(adminFetchLog.n-i)%recentFetchCount])
	}
	return out
}

// The /coral/status document.

type adminStatus struct {
	Node          *adminNode   `json:"node"` // null without a coral app
	Levels        []adminLevel `json:"levels"`
	DHT           *adminDHT    `json:"dht"`
	Caches        []adminCache `json:"caches"`
	RecentFetches []adminFetch `json:"recent_fetches"`
	Reload        *adminReload `json:"reload,omitempty"` // null before the first configuration started
}

type adminNode struct {
	ID        string     `json:"id"`
	Address   string     `json:"address"` // advertised
	Listen    string     `json:"listen"`
	Bootstrap []string   `json:"bootstrap,omitempty"`
	Joined    bool       `json:"joined"`
	Draining  bool       `json:"draining"`          // POST /coral/drain
	Started   *time.Time `json:"started,omitempty"` // when the node started (it outlives reloads)
}

type adminLevel struct {
	Level          int        `json:"level"`
	Threshold      string     `json:"threshold"` // RTT bound, "0s" at level 0
	Cluster        string     `json:"cluster"`   // short cluster ID, "" at level 0
	ClusterLogSize float64    `json:"cluster_log_size"`
	Contacts       int        `json:"contacts"`
	Pinned         bool       `json:"pinned"`
	Changes        int        `json:"changes"`
	LastChange     *time.Time `json:"last_change,omitempty"`
}

type adminDHT struct {
	RequestsIn     uint64            `json:"requests_in"`
	RequestsInBy   map[string]uint64 `json:"requests_in_by_type,omitempty"`
	RequestsOut    uint64            `json:"requests_out"`
	RepliesIn      uint64            `json:"replies_in"`
	RepliesOut     uint64            `json:"replies_out"`
	Refused        uint64            `json:"refused"`
	Timeouts       uint64            `json:"timeouts"`
	Drops          uint64            `json:"drops"`
	DropsBy        map[string]uint64 `json:"drops_by_reason,omitempty"`
	Gets           uint64            `json:"gets"`
	GetHits        uint64            `json:"get_hits"`
	GetFailures    uint64            `json:"get_failures"` // no node answered, or a timeout
	PutFailures    uint64            `json:"put_failures"` // puts and put+gets, likewise
	Puts           uint64            `json:"puts"`
	PutGets        uint64            `json:"put_gets"`
	Lookups        uint64            `json:"lookups"`
	StoredKeys     int               `json:"stored_keys"`
	StoredValues   int               `json:"stored_values"`
	Peers          int               `json:"peers"`
	ClusterRounds  uint64            `json:"cluster_rounds"`
	ClusterChanges uint64            `json:"cluster_changes"`
	// What became of other nodes' store requests: values stored, and
	// stores refused (full for the key, or out of memory) or evicted.
	StoresAccepted uint64 `json:"stores_accepted"`
	StoresRefused  uint64 `json:"stores_refused"`
	StoresEvicted  uint64 `json:"stores_evicted"`
	// HotKeys are the keys with the most requests in the last minute (at
	// most ten); Loaded ones are being answered "loaded" (Coral's rate
	// limit per key).
	HotKeys []adminKeyLoad `json:"hot_keys,omitempty"`
	// NetworkKeys are the node's installed network keys, by fingerprint,
	// the primary first (see keys.go).
	NetworkKeys []adminNetworkKey `json:"network_keys"`
}

type adminKeyLoad struct {
	Key           string `json:"key"` // short form
	Level         int    `json:"level"`
	Gets          uint64 `json:"gets"`
	PutProbes     uint64 `json:"put_probes"`
	Stores        uint64 `json:"stores"`
	LoadedAnswers uint64 `json:"loaded_answers"`
	LastMinute    uint64 `json:"last_minute"`
	Loaded        bool   `json:"loaded"`
}

type adminCache struct {
	Dir             string   `json:"dir"`
	Zones           []string `json:"zones"`
	Objects         int      `json:"objects"`
	Bytes           int64    `json:"bytes"`
	MaxBytes        int64    `json:"max_bytes"`
	Hits            int64    `json:"hits"`
	Misses          int64    `json:"misses"`
	Evictions       int64    `json:"evictions"`
	EvictedBytes    int64    `json:"evicted_bytes"`
	InProgress      int      `json:"in_progress"`
	InProgressBytes int64    `json:"in_progress_bytes"`
	Readers         int64    `json:"readers"`
	Commits         int64    `json:"commits"`
	Aborts          int64    `json:"aborts"`
	Corrupt         int64    `json:"corrupt"`
	// References counts the long-lived DSHT references this proxy keeps
	// renewing for the cache's objects (one per URL requested since its
	// last put; see refs.go).
	References int `json:"references"`
}

func (a *AdminAPI) handleStatus(w http.ResponseWriter, r *http.Request) error {
	if err := adminOnlyGET(w, r); err != nil {
		return err
	}
	return adminJSON(w, adminBuildStatus())
}

func adminBuildStatus() adminStatus {
	st := adminStatus{Levels: []adminLevel{}, Caches: adminCacheStats(), RecentFetches: adminLastFetches(), Reload: reloads.status()}
	apps, _ := adminRegistered()
	for i := len(apps) - 1; i >= 0; i-- {
		if st.setNode(apps[i]) {
			break
		}
	}
	return st
}

// setNode fills in a's node, its levels and its counters, and reports
// whether a has a node.
func (st *adminStatus) setNode(a *App) bool {
	e := a.current()
	if e == nil || e.node == nil {
		return false
	}
	n := e.node
	st.Node = &adminNode{ID: n.ID().String(), Address: n.Addr().String(), Listen: a.Listen,
		Bootstrap: a.Bootstrap, Joined: e.joined.Load(), Draining: a.draining()}
	if !e.start.IsZero() {
		t := e.start
		st.Node.Started = &t
	}
	st.Levels = []adminLevel{}
	for _, li := range n.Levels() {
		al := adminLevel{Level: li.Level, Threshold: li.Threshold.String(), ClusterLogSize: li.Cluster.LogSize,
			Contacts: li.Contacts, Pinned: li.Pinned, Changes: li.Changes}
		if !li.Cluster.ID.IsZero() {
			al.Cluster = li.Cluster.ID.Short()
		}
		if !li.LastChange.IsZero() {
			t := li.LastChange
			al.LastChange = &t
		}
		st.Levels = append(st.Levels, al)
	}
	st.DHT = adminDHTSummary(n.Stats())
	return true
}

// adminCacheStats returns the counters of every running cache, newest
// first.
func adminCacheStats() []adminCache {
	out := []adminCache{}
	for _, c := range adminCaches() {
		s := c.store.Stats()
		refs := 0
		for _, t := range c.refs {
			refs += t.len()
		}
		out = append(out, adminCache{
			Dir: c.dir, Zones: c.zones, Objects: s.Entries, Bytes: s.Bytes, MaxBytes: s.MaxBytes,
			Hits: s.Hits, Misses: s.Misses, Evictions: s.Evictions, EvictedBytes: s.EvictedBytes,
			InProgress: s.Writing, InProgressBytes: s.WritingBytes, Readers: s.Readers,
			Commits: s.Commits, Aborts: s.Aborts, Corrupt: s.Corrupt, References: refs,
		})
	}
	return out
}

func adminDHTSummary(s coraldht.Stats) *adminDHT {
	d := &adminDHT{
		RequestsIn: s.RequestsIn.Total(), RequestsOut: s.RequestsOut.Total(),
		RepliesIn: s.RepliesIn.Total(), RepliesOut: s.RepliesOut.Total(),
		Refused: s.Refused, Timeouts: s.Timeouts,
		Gets: s.Gets, GetHits: s.GetHits, GetFailures: s.GetFailures, PutFailures: s.PutFailures, Puts: s.Puts, PutGets: s.PutGets, Lookups: s.Lookups,
		StoredKeys: s.StoredKeys, StoredValues: s.StoredValues, Peers: s.Peers,
		ClusterRounds: s.ClusterRounds, ClusterChanges: s.ClusterChanges,
		StoresAccepted: s.Store.Stored, StoresRefused: s.Store.RefusedFull + s.Store.RefusedExhausted,
		StoresEvicted: s.Store.EvictedForNewer + s.Store.EvictedForSpace,
		NetworkKeys:   adminNetworkKeys(s.Keys),
	}
	in := s.RequestsIn
	for _, t := range []struct {
		name string
		v    uint64
	}{{"ping", in.Ping}, {"find_node", in.FindNode}, {"get", in.Get}, {"put_probe", in.PutProbe}, {"store", in.Store}, {"members", in.Members}, {"app", in.App}} {
		if t.v == 0 {
			continue
		}
		if d.RequestsInBy == nil {
			d.RequestsInBy = map[string]uint64{}
		}
		d.RequestsInBy[t.name] = t.v
	}
	for _, k := range s.TopKeys {
		d.HotKeys = append(d.HotKeys, adminKeyLoad{Key: k.Key.Short(), Level: k.Level, Gets: k.Gets, PutProbes: k.PutProbes,
			Stores: k.Stores, LoadedAnswers: k.LoadedAnswers, LastMinute: k.LastMinute, Loaded: k.Loaded})
	}
	dr := s.Drops
	for _, r := range []struct {
		name string
		v    uint64
	}{{"oversize", dr.Oversize}, {"bad_auth", dr.BadAuth}, {"malformed", dr.Malformed}, {"stale", dr.Stale}, {"replay", dr.Replay},
		{"queue_full", dr.QueueFull}, {"unsolicited", dr.Unsolicited}, {"self", dr.Self}, {"misdirected", dr.Misdirected}} {
		if r.v == 0 {
			continue
		}
		if d.DropsBy == nil {
			d.DropsBy = map[string]uint64{}
		}
		d.DropsBy[r.name] = r.v
		d.Drops += r.v
	}
	return d
}

// The /coral/cache document.

const (
	adminCacheDefaultLimit = 100
	adminCacheMaxLimit     = 1000
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
	caches := adminCaches()
	if len(caches) == 0 {
		return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("no coral_proxy cache is running")}
	}
	c := caches[0]
	if dir := q.Get("dir"); dir != "" {
		i := slices.IndexFunc(caches, func(c adminCacheRef) bool { return c.dir == dir })
		if i < 0 {
			return caddy.APIError{HTTPStatus: http.StatusNotFound, Err: fmt.Errorf("no coral_proxy cache in %q", dir)}
		}
		c = caches[i]
	}
	return adminJSON(w, adminPageOf(c, after, limit))
}

func adminPageOf(c adminCacheRef, after string, limit int) adminCachePage {
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
func adminRecentObjects(c adminCacheRef, n int) []adminObject {
	out := []adminObject{}
	// A few more than n, for the Vary indexes left out; the store is
	// walked from its most recent end only (not copied whole).
	for _, in := range c.store.Recent(2*n + 8) {
		if len(out) >= n {
			break
		}
		if o, m, ok := adminObjectOf(c.store, in); ok && m.Extra[varyIndexField] == "" {
			out = append(out, o)
		}
	}
	return out
}

func adminOnlyGET(w http.ResponseWriter, r *http.Request) error {
	if r.Method == http.MethodGet {
		return nil
	}
	w.Header().Set("Allow", http.MethodGet)
	return caddy.APIError{HTTPStatus: http.StatusMethodNotAllowed, Err: fmt.Errorf("method %s not allowed; use GET", r.Method)}
}

func adminJSON(w http.ResponseWriter, v any) error {
	w.Header().Set("Content-Type", "application/json")
	if err := json.NewEncoder(w).Encode(v); err != nil {
		return caddy.APIError{HTTPStatus: http.StatusInternalServerError, Err: err}
	}
	return nil
}

// Interface guards.
var (
	_ caddy.Module      = (*AdminAPI)(nil)
	_ caddy.AdminRouter = (*AdminAPI)(nil)
	_ caddy.Provisioner = (*AdminAPI)(nil)
)
