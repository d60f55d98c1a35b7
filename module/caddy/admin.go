package coralcaddy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"sync"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/module/caddy/proxy"
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
//	                    see package purge
//	GET /coral/health   200 when joined and not draining, else 503
//	POST /coral/drain   take the node out of DNS answers; DELETE: undo;
//	                    see reload.go
//	POST /coral/load    Caddy's /load, adapting the body here and counting
//	                    any failure in the reload metrics; see reloadcmd.go
//	GET /coral/blacklist  the fleet-wide blacklist in force and its fetches;
//	                    POST: install a signed list; see fleetblacklist.go
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
		{Pattern: "/coral/load", Handler: caddy.AdminHandlerFunc(a.handleLoad)},           // reloadcmd.go
		{Pattern: "/coral/blacklist", Handler: caddy.AdminHandlerFunc(a.handleBlacklist)}, // fleetblacklist.go
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

// Recent fetches: a small ring the proxies append to (Config.Fetched).

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
func recordFetch(fetch proxy.Fetch) {
	url := fetch.URL
	if len(url) > recentFetchURLMax {
		url = url[:recentFetchURLMax]
	}
	f := adminFetch{Time: time.Now(), URL: url, Source: fetch.Source, Status: fetch.Status, Bytes: fetch.Bytes,
		DurationMS: float64(fetch.Took) / float64(time.Millisecond)}
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
	// Suspects are the source prefixes that did what honest nodes do not
	// (coraldht.Node.Suspects), most events first, at most ten.
	Suspects []adminSuspect `json:"suspects,omitempty"`
}

// adminSuspect is one suspect source prefix: its events by kind (non-zero
// ones), when it was first and last seen, the last sources and the
// addresses they claimed, and its certificate's serial in node identity
// mode.
type adminSuspect struct {
	Prefix      string            `json:"prefix"`
	Events      uint64            `json:"events"`
	EventsBy    map[string]uint64 `json:"events_by_kind"`
	First       time.Time         `json:"first"`
	Last        time.Time         `json:"last"`
	Sources     []string          `json:"sources,omitempty"`
	Claimed     []string          `json:"claimed,omitempty"`
	Certificate uint64            `json:"certificate,omitempty"`
}

// maxAdminSuspects is how many suspects the status document lists.
const maxAdminSuspects = 10

func adminSuspects(list []coraldht.Suspect) []adminSuspect {
	var out []adminSuspect
	for _, s := range list[:min(len(list), maxAdminSuspects)] {
		a := adminSuspect{Prefix: s.Prefix.String(), Events: s.Events.Total(), EventsBy: map[string]uint64{},
			First: s.First, Last: s.Last, Certificate: s.Certificate}
		for _, k := range coraldht.AbuseKinds() {
			if v := s.Events.Count(k); v > 0 {
				a.EventsBy[k.String()] = v
			}
		}
		for _, src := range s.Sources {
			a.Sources = append(a.Sources, src.String())
		}
		for _, c := range s.Claimed {
			a.Claimed = append(a.Claimed, c.String())
		}
		out = append(out, a)
	}
	return out
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
	// DiskWriteErrors counts writes the file system failed; DiskLimitBytes
	// is the bound in effect when the disk was found full below MaxBytes
	// (0: none); Relays counts objects relayed whole but not stored.
	DiskWriteErrors int64 `json:"disk_write_errors"`
	DiskLimitBytes  int64 `json:"disk_limit_bytes"`
	Relays          int64 `json:"relays"`
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
	apps, _ := runningAll()
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
	if e == nil || e.Node() == nil {
		return false
	}
	n := e.Node()
	st.Node = &adminNode{ID: n.ID().String(), Address: n.Addr().String(), Listen: a.Listen,
		Bootstrap: a.Bootstrap, Joined: e.Joined(), Draining: a.draining()}
	if !e.Started().IsZero() {
		t := e.Started()
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
	st.DHT.Suspects = adminSuspects(n.Suspects())
	return true
}

// adminCacheStats returns the counters of every running cache, newest
// first.
func adminCacheStats() []adminCache {
	out := []adminCache{}
	for _, c := range runningCaches() {
		s := c.store.Stats()
		refs := 0
		for _, t := range c.refs {
			refs += t.Len()
		}
		out = append(out, adminCache{
			Dir: c.dir, Zones: c.zones, Objects: s.Entries, Bytes: s.Bytes, MaxBytes: s.MaxBytes,
			Hits: s.Hits, Misses: s.Misses, Evictions: s.Evictions, EvictedBytes: s.EvictedBytes,
			InProgress: s.Writing, InProgressBytes: s.WritingBytes, Readers: s.Readers,
			Commits: s.Commits, Aborts: s.Aborts, Corrupt: s.Corrupt, References: refs,
			DiskWriteErrors: s.DiskWriteErrors, DiskLimitBytes: s.DiskLimitBytes, Relays: s.Relays,
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
	for _, r := range coraldht.DropReasons() {
		v := s.Drops.Count(r)
		if v == 0 {
			continue
		}
		if d.DropsBy == nil {
			d.DropsBy = map[string]uint64{}
		}
		d.DropsBy[r.String()] = v
		d.Drops += v
	}
	return d
}

// The /coral/cache document.

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
