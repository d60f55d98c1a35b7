package coralcaddy

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/coralcdn/coral/module/caddy/diskcache"
	"github.com/coralcdn/coral/module/caddy/proxy"
)

// adminTestCall runs an admin route's handler as Caddy's admin server
// would, returning the recorded response and the handler's error.
func adminTestCall(t *testing.T, route, method, target string) (*httptest.ResponseRecorder, error) {
	t.Helper()
	var api AdminAPI
	for _, r := range api.Routes() {
		if r.Pattern == route {
			w := httptest.NewRecorder()
			err := r.Handler.ServeHTTP(w, httptest.NewRequest(method, target, nil))
			return w, err
		}
	}
	t.Fatalf("no admin route %s", route)
	return nil, nil
}

// adminTestGet calls a route with GET and decodes its JSON answer into v
// (and into a generic map, returned for checking the field names).
func adminTestGet(t *testing.T, route, target string, v any) map[string]any {
	t.Helper()
	w, err := adminTestCall(t, route, http.MethodGet, target)
	if err != nil {
		t.Fatalf("GET %s: %v", target, err)
	}
	if w.Code != http.StatusOK {
		t.Fatalf("GET %s: status %d", target, w.Code)
	}
	if ct := w.Header().Get("Content-Type"); ct != "application/json" {
		t.Errorf("GET %s: Content-Type %q", target, ct)
	}
	if err := json.Unmarshal(w.Body.Bytes(), v); err != nil {
		t.Fatalf("GET %s: %v\n%s", target, err, w.Body)
	}
	var generic map[string]any
	if err := json.Unmarshal(w.Body.Bytes(), &generic); err != nil {
		t.Fatal(err)
	}
	return generic
}

func adminTestStatusCode(err error) int {
	var ae caddy.APIError
	if errors.As(err, &ae) {
		return ae.HTTPStatus
	}
	return 0
}

func hasKeys(t *testing.T, what string, m map[string]any, keys ...string) {
	t.Helper()
	for _, k := range keys {
		if _, ok := m[k]; !ok {
			t.Errorf("%s has no %q: %v", what, k, m)
		}
	}
}

// startRegistryTest runs Caddy with a coral app on listen (bootstrapping
// through boot, if not "") and one coral_proxy per zone, all with their
// cache in dir (64 MiB): an app and handlers as Caddy provisions them, for
// the tests of what the admin API and the status page read of them. The
// handlers are provisioned in the order of zones. It returns the shared
// store.
func startRegistryTest(t *testing.T, listen, boot, dir string, zones ...string) *diskcache.Store {
	t.Helper()
	port := 9180 + int(testProxyPort.Add(1))
	bootstrap := ""
	if boot != "" {
		bootstrap = "bootstrap " + boot
	}
	var sites strings.Builder
	for i, zone := range zones {
		proxy := fmt.Sprintf("coral_proxy %s {\n\t\t\tcache_dir %s\n\t\t\tcache_size 64MiB\n\t\t}", zone, dir)
		if i == len(zones)-1 {
			fmt.Fprintf(&sites, "\thandle {\n\t\t%s\n\t}\n", proxy)
		} else {
			fmt.Fprintf(&sites, "\t@z%[1]d host *.%[2]s\n\thandle @z%[1]d {\n\t\t%[3]s\n\t}\n", i, zone, proxy)
		}
	}
	caddytest.NewTester(t).InitServer(fmt.Sprintf(`{
	skip_install_trust
	admin {$CORAL_TEST_ADMIN}
	http_port %[1]d
	grace_period 1ns
	coral {
		listen %[2]s
		%[3]s
	}
}
:%[1]d {
%[4]s}`, port, listen, bootstrap, sites.String()), "caddyfile")
	return newestHandler(t).store
}

// newestHandler is the coral_proxy handler Caddy provisioned last.
func newestHandler(t testing.TB) *Handler {
	t.Helper()
	_, proxies := runningAll()
	if len(proxies) == 0 {
		t.Fatal("no coral_proxy handler runs")
	}
	return proxies[len(proxies)-1]
}

// waitWritten waits until store writes no object: the downloads of the
// test's requests are committed (after their last byte reached the
// client).
func waitWritten(t *testing.T, store *diskcache.Store) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); store.Stats().Writing != 0; {
		if time.Now().After(deadline) {
			t.Fatal("a download still runs after 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// stopCoral runs Caddy without any coral app or handler: those of the
// test before are cleaned up.
func stopCoral(t *testing.T) {
	t.Helper()
	port := 9180 + int(testProxyPort.Add(1))
	caddytest.NewTester(t).InitServer(fmt.Sprintf(`{
	skip_install_trust
	admin {$CORAL_TEST_ADMIN}
	http_port %[1]d
}
:%[1]d {
	respond "no coral here"
}`, port), "caddyfile")
	if apps, proxies := runningAll(); len(apps)+len(proxies) != 0 {
		t.Fatalf("%d apps and %d handlers still registered", len(apps), len(proxies))
	}
}

func TestAdminModule(t *testing.T) {
	info, err := caddy.GetModule("admin.api.coral")
	if err != nil {
		t.Fatal(err)
	}
	router, ok := info.New().(caddy.AdminRouter)
	if !ok {
		t.Fatal("admin.api.coral is not an AdminRouter")
	}
	var patterns []string
	for _, r := range router.Routes() {
		patterns = append(patterns, r.Pattern)
	}
	if !slices.Equal(patterns, []string{"/coral/status", "/coral/cache", "/coral/purge", "/coral/health", "/coral/drain", "/coral/keys", "/coral/keys/install", "/coral/keys/primary", "/coral/keys/remove", "/coral/load", "/coral/blacklist"}) {
		t.Errorf("routes %v", patterns)
	}

	for _, route := range []string{"/coral/status", "/coral/cache"} {
		for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodHead} {
			w, err := adminTestCall(t, route, method, route)
			if code := adminTestStatusCode(err); code != http.StatusMethodNotAllowed {
				t.Errorf("%s %s: %v (status %d), want 405", method, route, err, code)
			}
			if got := w.Header().Get("Allow"); got != "GET" {
				t.Errorf("%s %s: Allow %q", method, route, got)
			}
		}
	}
}

func TestAdminStatus(t *testing.T) {
	const addr = "127.0.5.3:4000"
	metricsTestNode(t, "127.0.5.4:4000") // the bootstrap node: the app joins through it
	dir := t.TempDir()
	// Two handlers share the cache.
	store := startRegistryTest(t, addr, "127.0.5.4:4000", dir, "nyud.test", "other.test")
	waitJoinedStatus(t)
	node := runningNode()

	metricsTestPut(t, store, metricsTestKey(0), "http://www.example.com/a", "hello")
	metricsTestPut(t, store, metricsTestKey(1), "http://www.example.com/b", "hello, world")
	metricsTestStart(t, store, metricsTestKey(2), "http://www.example.com/c", "par")
	if rd, ok := store.Get(metricsTestKey(0)); ok {
		rd.Close()
	} else {
		t.Fatal("stored object missing")
	}
	if _, ok := store.Get(metricsTestKey(9)); ok {
		t.Fatal("unexpected object")
	}

	recordFetch(proxy.Fetch{URL: "http://www.example.com/a", Source: "origin", Status: 200, Bytes: 5, Took: 1500 * time.Microsecond})
	recordFetch(proxy.Fetch{URL: "http://www.example.com/b", Source: "peer-l1", Status: 404, Bytes: 12, Took: 2 * time.Second})
	recordFetch(proxy.Fetch{URL: "http://www.example.com/" + strings.Repeat("x", 5000), Source: "origin", Took: time.Second})

	var st adminStatus
	generic := adminTestGet(t, "/coral/status", "/coral/status", &st)
	hasKeys(t, "status", generic, "node", "levels", "dht", "caches", "recent_fetches")
	if n, ok := generic["node"].(map[string]any); ok {
		hasKeys(t, "node", n, "id", "address", "listen", "joined")
	}
	if ls, ok := generic["levels"].([]any); ok && len(ls) > 0 {
		hasKeys(t, "level", ls[0].(map[string]any), "level", "threshold", "cluster", "cluster_log_size", "contacts", "pinned", "changes")
	}
	if d, ok := generic["dht"].(map[string]any); ok {
		hasKeys(t, "dht", d, "requests_in", "requests_out", "replies_in", "replies_out", "drops", "timeouts", "lookups",
			"stored_keys", "stored_values", "cluster_changes")
	}
	if cs, ok := generic["caches"].([]any); ok && len(cs) > 0 {
		hasKeys(t, "cache", cs[0].(map[string]any), "dir", "zones", "objects", "bytes", "max_bytes", "hits", "misses", "evictions", "in_progress")
	}

	if st.Node == nil {
		t.Fatal("no node in the status")
	}
	if st.Node.ID != node.ID().String() || st.Node.Address != addr || st.Node.Listen != addr || !st.Node.Joined ||
		!slices.Equal(st.Node.Bootstrap, []string{"127.0.5.4:4000"}) {
		t.Errorf("node %+v; want ID %s at %s, joined", *st.Node, node.ID(), addr)
	}
	levels := node.Levels()
	if len(st.Levels) != len(levels) || len(levels) != 3 {
		t.Fatalf("levels %+v; node has %d", st.Levels, len(levels))
	}
	for i, l := range st.Levels {
		li := levels[i]
		want := adminLevel{Level: i, Threshold: li.Threshold.String(), ClusterLogSize: li.Cluster.LogSize,
			Contacts: li.Contacts, Pinned: li.Pinned, Changes: li.Changes}
		if i > 0 {
			want.Cluster = li.Cluster.ID.Short()
		}
		l.LastChange = nil
		if l != want {
			t.Errorf("level %d: %+v, want %+v", i, l, want)
		}
	}
	if st.Levels[0].Threshold != "0s" || st.Levels[0].Cluster != "" || st.Levels[1].Threshold != "60ms" || st.Levels[2].Threshold != "20ms" {
		t.Errorf("levels %+v", st.Levels)
	}
	if st.DHT == nil {
		t.Fatal("no dht in the status")
	}
	if s := node.Stats(); st.DHT.StoredKeys != s.StoredKeys || st.DHT.Lookups > s.Lookups {
		t.Errorf("dht %+v; Stats %+v", *st.DHT, s)
	}

	i := slices.IndexFunc(st.Caches, func(c adminCache) bool { return c.Dir == dir })
	if i < 0 {
		t.Fatalf("caches %+v", st.Caches)
	}
	c := st.Caches[i]
	ss := store.Stats()
	want := adminCache{Dir: dir, Zones: []string{"other.test", "nyud.test"}, Objects: 2, Bytes: ss.Bytes,
		MaxBytes: 64 << 20, Hits: 1, Misses: 1, InProgress: 1, InProgressBytes: ss.WritingBytes, Commits: 2}
	if !slices.Equal(c.Zones, want.Zones) {
		t.Errorf("zones %v, want %v (the newest handler first)", c.Zones, want.Zones)
	}
	if !reflect.DeepEqual(c, want) {
		t.Errorf("cache %+v\nwant %+v", c, want)
	}
	if slices.ContainsFunc(st.Caches[i+1:], func(c adminCache) bool { return c.Dir == want.Dir }) {
		t.Error("a cache shared by two handlers is listed twice")
	}

	// The fetches, newest first.
	if len(st.RecentFetches) < 3 {
		t.Fatalf("recent fetches %+v", st.RecentFetches)
	}
	f := st.RecentFetches
	if len(f[0].URL) != recentFetchURLMax || f[0].Status != 0 {
		t.Errorf("newest fetch %+v: URL not cut to %d", f[0], recentFetchURLMax)
	}
	if f[1].URL != "http://www.example.com/b" || f[1].Source != "peer-l1" || f[1].Status != 404 || f[1].Bytes != 12 || f[1].DurationMS != 2000 {
		t.Errorf("second fetch %+v", f[1])
	}
	if f[2].URL != "http://www.example.com/a" || f[2].Source != "origin" || f[2].Status != 200 || f[2].Bytes != 5 || f[2].DurationMS != 1.5 ||
		time.Since(f[2].Time) > time.Minute || f[2].Time.After(f[1].Time) {
		t.Errorf("third fetch %+v", f[2])
	}

	// Once the app and handlers are cleaned up, they are gone from it.
	stopCoral(t)
	st = adminStatus{}
	adminTestGet(t, "/coral/status", "/coral/status", &st)
	if st.Node != nil && st.Node.ID == node.ID().String() {
		t.Error("the unregistered app is still reported")
	}
	if slices.ContainsFunc(st.Caches, func(c adminCache) bool { return c.Dir == want.Dir }) {
		t.Error("the unregistered handlers' cache is still reported")
	}
}

func TestAdminRecentFetchRing(t *testing.T) {
	for i := range recentFetchCount + 10 {
		recordFetch(proxy.Fetch{URL: "http://ring.example/" + strings.Repeat("i", i), Source: "origin", Status: 200, Bytes: int64(i)})
	}
	got := adminLastFetches()
	if len(got) != recentFetchCount {
		t.Fatalf("%d fetches kept, want %d", len(got), recentFetchCount)
	}
	for i, f := range got {
		if want := int64(recentFetchCount + 9 - i); f.Bytes != want {
			t.Fatalf("fetch %d of the ring: bytes %d, want %d", i, f.Bytes, want)
		}
	}
}

func TestAdminCache(t *testing.T) {
	dir := t.TempDir()
	store := startRegistryTest(t, "127.0.5.7:4000", "", dir, "nyud.test")

	const n = 7
	var keys []string
	for i := range n {
		k := metricsTestKey(n - i) // stored in the reverse of key order
		keys = append(keys, k)
		metricsTestPut(t, store, k, "http://www.example.com/"+k, strings.Repeat("b", i+1))
	}
	inProgress := metricsTestKey(100)
	keys = append(keys, inProgress)
	metricsTestStart(t, store, inProgress, "http://www.example.com/slow", "abc")
	slices.Sort(keys)

	// Walk the pages.
	var seen []string
	after := ""
	for page := 0; ; page++ {
		if page > 10 {
			t.Fatal("pagination does not end")
		}
		var p adminCachePage
		target := "/coral/cache?limit=3&dir=" + dir
		if after != "" {
			target += "&after=" + after
		}
		generic := adminTestGet(t, "/coral/cache", target, &p)
		hasKeys(t, "page", generic, "dir", "total", "objects")
		if p.Dir != dir || p.Total != n+1 {
			t.Errorf("page %d: dir %q total %d", page, p.Dir, p.Total)
		}
		if len(p.Objects) > 3 {
			t.Errorf("page %d has %d objects; limit 3", page, len(p.Objects))
		}
		for _, o := range p.Objects {
			seen = append(seen, o.Key)
			if o.URL == "" || o.Status != http.StatusOK || o.Stored == nil {
				t.Errorf("object %+v lacks its metadata", o)
			}
			if o.Key == inProgress {
				if !o.Writing || o.Written != 3 || o.WriteSize != -1 || o.Size != -1 || o.Source != "peer-l1" || o.URL != "http://www.example.com/slow" {
					t.Errorf("in-progress object %+v", o)
				}
				continue
			}
			if o.Writing || o.Size < 1 || o.Source != "origin" || o.URL != "http://www.example.com/"+o.Key ||
				o.Expires == nil || o.LastUsed == nil {
				t.Errorf("complete object %+v", o)
			}
		}
		if p.Next == "" {
			break
		}
		if p.Next != p.Objects[len(p.Objects)-1].Key {
			t.Errorf("next %q is not the page's last key", p.Next)
		}
		after = p.Next
	}
	if !slices.Equal(seen, keys) {
		t.Errorf("pages gave\n%v\nwant\n%v", seen, keys)
	}

	// The default limit, the newest cache by default, a cursor that is not
	// a key, a cursor past the end, a large limit.
	var p adminCachePage
	adminTestGet(t, "/coral/cache", "/coral/cache", &p)
	if p.Dir != dir || len(p.Objects) != n+1 || p.Next != "" {
		t.Errorf("default page: dir %q, %d objects, next %q", p.Dir, len(p.Objects), p.Next)
	}
	p = adminCachePage{}
	adminTestGet(t, "/coral/cache", "/coral/cache?after="+keys[1]+"0&limit=2", &p)
	if len(p.Objects) != 2 || p.Objects[0].Key != keys[2] || p.Next != keys[3] {
		t.Errorf("after a key prefix: %+v", p)
	}
	p = adminCachePage{}
	adminTestGet(t, "/coral/cache", "/coral/cache?after=~&limit=2", &p)
	if len(p.Objects) != 0 || p.Next != "" || p.Objects == nil {
		t.Errorf("past the end: %+v", p)
	}
	p = adminCachePage{}
	adminTestGet(t, "/coral/cache", "/coral/cache?limit=1000000", &p)
	if len(p.Objects) != n+1 {
		t.Errorf("limit above the maximum: %d objects", len(p.Objects))
	}

	for _, c := range []struct {
		target string
		code   int
	}{
		{"/coral/cache?limit=0", http.StatusBadRequest},
		{"/coral/cache?limit=-4", http.StatusBadRequest},
		{"/coral/cache?limit=lots", http.StatusBadRequest},
		{"/coral/cache?dir=/nowhere", http.StatusNotFound},
	} {
		if _, err := adminTestCall(t, "/coral/cache", http.MethodGet, c.target); adminTestStatusCode(err) != c.code {
			t.Errorf("GET %s: %v, want status %d", c.target, err, c.code)
		}
	}

	// Without any handler there is no cache to list.
	stopCoral(t)
	if _, err := adminTestCall(t, "/coral/cache", http.MethodGet, "/coral/cache"); adminTestStatusCode(err) != http.StatusNotFound {
		t.Errorf("no cache: %v, want 404", err)
	}
}
