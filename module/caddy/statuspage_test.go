package coralcaddy

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/caddyserver/caddy/v2/caddytest"
	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/module/caddy/proxy"
)

func TestStatusPageCaddyfile(t *testing.T) {
	for _, tc := range []struct {
		name, input string
		recent      int
		err         string
	}{
		{"bare", "coral_status", 0, ""},
		{"empty block", "coral_status {\n}", 0, ""},
		{"recent", "coral_status {\n recent 5\n}", 5, ""},
		{"recent most", "coral_status {\n recent 64\n}", 64, ""},
		{"an argument", "coral_status /status", 0, "wrong argument count"},
		{"recent 0", "coral_status {\n recent 0\n}", 0, "want a number 1..64"},
		{"recent too many", "coral_status {\n recent 65\n}", 0, "want a number 1..64"},
		{"recent words", "coral_status {\n recent lots\n}", 0, "want a number 1..64"},
		{"recent two", "coral_status {\n recent 1 2\n}", 0, "takes one number"},
		{"unknown", "coral_status {\n colour blue\n}", 0, `unknown coral_status option "colour"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var s StatusPage
			err := s.UnmarshalCaddyfile(caddyfile.NewTestDispenser(tc.input))
			if tc.err == "" {
				if err != nil || s.Recent != tc.recent {
					t.Errorf("recent %d, error %v; want %d", s.Recent, err, tc.recent)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("error %v, want one containing %q", err, tc.err)
			}
		})
	}
}

func TestStatusPageModule(t *testing.T) {
	info, err := caddy.GetModule("http.handlers.coral_status")
	if err != nil {
		t.Fatal(err)
	}
	if _, ok := info.New().(caddyhttp.MiddlewareHandler); !ok {
		t.Fatal("coral_status is not a handler")
	}
	for _, tc := range []struct {
		recent int
		ok     bool
	}{{1, true}, {20, true}, {64, true}, {65, false}, {-1, false}} {
		if err := (&StatusPage{Recent: tc.recent}).Validate(); (err == nil) != tc.ok {
			t.Errorf("recent %d: Validate() = %v", tc.recent, err)
		}
	}
}

// The page's request counts are requests_total's, read back in order.
func TestStatusRequestCounts(t *testing.T) {
	before := countMap(requestCounts())
	m := &proxyMetrics{} // counts without a registry of its own (the counters are the process's)
	for _, r := range []struct {
		status proxy.CacheStatus
		source string
	}{
		{proxy.CacheHit, "local"}, {proxy.CacheRevalidated, "local"}, {proxy.CacheMiss, "origin"}, {proxy.CacheMiss, "peer-l2"}, {proxy.CacheCollapsed, "peer-l2"},
		{proxy.CacheStaleWhileRevalidate, "local"}, {proxy.CacheRefused, "none"}, {proxy.CacheMiss, ""}, {proxy.CacheStatus(200), "peer-l99"}, {proxy.CacheMiss, "peer-l01"},
	} {
		m.Request(r.status, r.source, 10)
	}
	counts := requestCounts()
	got := countMap(counts)
	for series, want := range map[string]uint64{
		"hit/local": 2, "miss/origin": 1, "miss/peer-l2": 1, "collapsed/peer-l2": 1, "stale/local": 1,
		"refused/none": 1, "miss/none": 1, "other/other": 1, "miss/other": 1,
	} {
		if d := got[series] - before[series]; d != want {
			t.Errorf("%s went up by %d, want %d", series, d, want)
		}
	}
	var order []string
	for _, c := range counts {
		if c.Count == 0 {
			t.Errorf("%+v: a zero count", c)
		}
		order = append(order, c.CacheStatus+"/"+c.Source)
	}
	for _, pair := range [][2]string{
		{"hit/local", "miss/origin"}, {"miss/origin", "miss/none"}, {"miss/none", "miss/other"}, {"miss/other", "miss/peer-l2"},
		{"miss/peer-l2", "collapsed/peer-l2"}, {"collapsed/peer-l2", "stale/local"}, {"stale/local", "refused/none"}, {"refused/none", "other/other"},
	} {
		if slices.Index(order, pair[0]) > slices.Index(order, pair[1]) {
			t.Errorf("%s comes after %s: %v", pair[0], pair[1], order)
		}
	}
}

func countMap(counts []requestCount) map[string]uint64 {
	out := map[string]uint64{}
	for _, c := range counts {
		out[c.CacheStatus+"/"+c.Source] = c.Count
	}
	return out
}

// TestStatusKindOf: each requests_total series has its status page kind,
// every label the proxy gives has one, and anything else is other.
func TestStatusKindOf(t *testing.T) {
	for _, tc := range []struct{ label, source, kind string }{
		{"hit", "local", "local_hit"},
		{"stale", "local", "stale"},
		{"miss", "origin", "origin"},
		{"miss", "peer-l1", "peer"},
		{"miss", "none", "failed"},
		{"miss", "other", "other"},
		{"collapsed", "peer-l0", "collapsed"},
		{"refused", "none", "refused"},
		{"redirect", "none", "refused"},
		{"other", "local", "other"},
	} {
		if got := statusKindOf(tc.label, tc.source); got != tc.kind {
			t.Errorf("statusKindOf(%q, %q) = %q, want %q", tc.label, tc.source, got, tc.kind)
		}
	}
	for _, label := range proxy.StatusLabels() {
		if statusKindOf(label, "local") == "other" && statusKindOf(label, "origin") == "other" {
			t.Errorf("label %q has no page kind", label)
		}
	}
}

func TestStatusRequestsOf(t *testing.T) {
	kinds := func(rs statusRequests) map[string]uint64 {
		out := map[string]uint64{}
		for _, k := range rs.Kinds {
			out[k.Kind] = k.Count
		}
		return out
	}
	for _, tc := range []struct {
		name            string
		cells           []requestCount
		total, answered uint64
		ratio           float64
		want            map[string]uint64
	}{
		{"none", nil, 0, 0, 0, map[string]uint64{}},
		{"hits and misses", []requestCount{{"hit", "local", 6}, {"miss", "origin", 2}, {"miss", "peer-l1", 1}, {"collapsed", "origin", 1}},
			10, 10, 0.8, map[string]uint64{"local_hit": 6, "origin": 2, "peer": 1, "collapsed": 1}},
		{"refusals are not answers", []requestCount{{"hit", "local", 1}, {"refused", "none", 3}, {"miss", "none", 1}},
			5, 2, 0.5, map[string]uint64{"local_hit": 1, "refused": 3, "failed": 1}},
		{"stale and other", []requestCount{{"stale", "local", 1}, {"other", "other", 1}, {"miss", "other", 2}},
			4, 4, 0.25, map[string]uint64{"stale": 1, "other": 3}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rs := statusRequestsOf(tc.cells)
			if rs.Total != tc.total || rs.Answered != tc.answered || rs.HitRatio != tc.ratio {
				t.Errorf("total %d answered %d ratio %v; want %d %d %v", rs.Total, rs.Answered, rs.HitRatio, tc.total, tc.answered, tc.ratio)
			}
			if len(rs.Kinds) != len(statusKinds) || rs.ByStatusSource == nil {
				t.Errorf("kinds %v, by status %v", rs.Kinds, rs.ByStatusSource)
			}
			got := kinds(rs)
			for _, k := range statusKinds {
				if got[k.kind] != tc.want[k.kind] {
					t.Errorf("%s: %d, want %d", k.kind, got[k.kind], tc.want[k.kind])
				}
			}
		})
	}
}

func TestStatusWantsJSON(t *testing.T) {
	for _, tc := range []struct {
		target, accept string
		json           bool
	}{
		{"/", "", false},
		{"/?format=json", "", true},
		{"/?format=json", "text/html", true},
		{"/?format=html", "application/json", false},
		{"/", "application/json", true},
		{"/", "application/json; charset=utf-8", true},
		{"/", "text/html,application/xhtml+xml,application/xml;q=0.9,*/*;q=0.8", false},
		{"/", "application/json, text/html", false},
		{"/", "application/json;q=0", false},
		{"/", "*/*", false},
	} {
		r := httptest.NewRequest(http.MethodGet, tc.target, nil)
		if tc.accept != "" {
			r.Header.Set("Accept", tc.accept)
		}
		if got := statusWantsJSON(r); got != tc.json {
			t.Errorf("%s with Accept %q: JSON %v, want %v", tc.target, tc.accept, got, tc.json)
		}
	}
}

func TestStatusDuration(t *testing.T) {
	for d, want := range map[time.Duration]string{
		0: "0s", 45 * time.Second: "45s", 3*time.Minute + 12*time.Second: "3m12s",
		5*time.Hour + 3*time.Minute: "5h03m", 50 * time.Hour: "2d2h",
	} {
		if got := statusDuration(d); got != want {
			t.Errorf("%v: %q, want %q", d, got, want)
		}
	}
}

// statusCall runs the handler as Caddy would and returns the response and
// the handler's error.
func statusCall(t *testing.T, s *StatusPage, method, target, accept string) (*httptest.ResponseRecorder, error) {
	t.Helper()
	r := httptest.NewRequest(method, target, nil)
	if accept != "" {
		r.Header.Set("Accept", accept)
	}
	w := httptest.NewRecorder()
	err := s.ServeHTTP(w, r, caddyhttp.HandlerFunc(func(http.ResponseWriter, *http.Request) error {
		t.Error("coral_status called the next handler")
		return nil
	}))
	return w, err
}

// The page's content, from the app and the cache of the configuration
// Caddy runs.
func TestStatusPageContent(t *testing.T) {
	const addr = "127.0.5.10:4000"
	dir := t.TempDir()
	store := startRegistryTest(t, addr, "", dir, "nyud.test")
	apps, _ := runningAll()
	app := apps[len(apps)-1]
	node := runningNode()

	// Five objects, used in key order, so the fifth is the most recent; one
	// URL that would be markup if it were not escaped, one too long to show
	// whole; a write in progress.
	const hostile = `http://www.example.com/<script>alert("x")</script>`
	long := "http://www.example.com/obj2/" + strings.Repeat("x", 5000)
	for i := range 5 {
		url := fmt.Sprintf("http://www.example.com/obj%d", i)
		switch i {
		case 2:
			url = long
		case 3:
			url = hostile
		}
		metricsTestPut(t, store, metricsTestKey(i), url, strings.Repeat("b", 100*(i+1)))
		time.Sleep(2 * time.Millisecond) // distinct last-used times
	}
	metricsTestStart(t, store, metricsTestKey(9), "http://www.example.com/slow", "par")
	for i := range 5 {
		recordFetch(proxy.Fetch{URL: fmt.Sprintf("http://fetch.example/%d", i), Source: "origin", Status: 200, Bytes: int64(i), Took: time.Millisecond})
	}

	s := &StatusPage{Recent: 3, app: app}
	objectRow := regexp.MustCompile(`<tr class="object">`)
	fetchRow := regexp.MustCompile(`<tr class="fetch">`)
	for _, tc := range []struct {
		name, method, target, accept string
		json                         bool
		want, unwanted               []string
	}{
		{name: "html", method: http.MethodGet, target: "/",
			want: []string{`data-stat="node-address">` + addr + `<`, `data-stat="node-id">` + node.ID().String() + `<`,
				`data-stat="node-joined">joined<`, `data-stat="uptime">`, `data-stat="cache-objects">5<`,
				`data-stat="cache-in-progress">1<`, `<code>` + dir + `</code>`, "obj4", `&lt;script&gt;alert(&#34;x&#34;)&lt;/script&gt;`,
				"http://fetch.example/4", "http://fetch.example/2", `data-stat="contacts-l2"`, `data-stat="requests-local_hit"`,
				"obj2/xxxxx", "x…</td>"},
			unwanted: []string{"<script>alert", "obj1", "http://fetch.example/1", "/slow", strings.Repeat("x", 2100)}},
		{name: "html on any path", method: http.MethodGet, target: "/some/where?x=1", want: []string{`data-stat="node-address">` + addr}},
		{name: "browser", method: http.MethodGet, target: "/", accept: "text/html,application/xhtml+xml,*/*;q=0.8", want: []string{"<!DOCTYPE html>"}},
		{name: "json by query", method: http.MethodGet, target: "/?format=json", json: true},
		{name: "json by Accept", method: http.MethodGet, target: "/", accept: "application/json", json: true},
		{name: "head", method: http.MethodHead, target: "/"},
		{name: "head json", method: http.MethodHead, target: "/?format=json", json: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w, err := statusCall(t, s, tc.method, tc.target, tc.accept)
			if err != nil || w.Code != http.StatusOK {
				t.Fatalf("status %d, error %v", w.Code, err)
			}
			hdr := w.Header()
			if hdr.Get("Cache-Control") != "no-store" || hdr.Get("X-Content-Type-Options") != "nosniff" || hdr.Get("Vary") != "Accept" {
				t.Errorf("headers %v", hdr)
			}
			body := w.Body.String()
			if tc.method == http.MethodHead {
				if body != "" || hdr.Get("Content-Length") == "" || hdr.Get("Content-Length") == "0" {
					t.Errorf("HEAD: %d bytes of body, Content-Length %q", len(body), hdr.Get("Content-Length"))
				}
			} else if cl := hdr.Get("Content-Length"); cl != fmt.Sprint(len(body)) {
				t.Errorf("Content-Length %s for %d bytes", cl, len(body))
			}
			if tc.json {
				if ct := hdr.Get("Content-Type"); ct != "application/json" {
					t.Errorf("Content-Type %q", ct)
				}
				if tc.method == http.MethodGet {
					checkStatusJSON(t, w.Body.Bytes(), node.ID().String(), addr, dir)
				}
				return
			}
			if ct := hdr.Get("Content-Type"); ct != "text/html; charset=utf-8" {
				t.Errorf("Content-Type %q", ct)
			}
			csp := hdr.Get("Content-Security-Policy")
			nonce := regexp.MustCompile(`script-src 'nonce-([A-Za-z0-9_-]+)'`).FindStringSubmatch(csp)
			if nonce == nil || !strings.Contains(csp, "default-src 'none'") {
				t.Fatalf("CSP %q", csp)
			}
			if tc.method == http.MethodHead {
				return
			}
			if !strings.Contains(body, `<script nonce="`+nonce[1]+`">`) || !strings.Contains(body, `<style nonce="`+nonce[1]+`">`) {
				t.Errorf("the inline script and style do not carry the CSP nonce %s", nonce[1])
			}
			if m := regexp.MustCompile(`(?i)(src|href|action)\s*=\s*"?(https?:)?//`).FindString(body); m != "" {
				t.Errorf("the page refers elsewhere: %s", m)
			}
			for _, s := range tc.want {
				if !strings.Contains(body, s) {
					t.Errorf("page lacks %s", s)
				}
			}
			for _, s := range tc.unwanted {
				if strings.Contains(body, s) {
					t.Errorf("page has %s", s)
				}
			}
			if tc.target == "/" {
				if n := len(objectRow.FindAllString(body, -1)); n != 3 {
					t.Errorf("%d objects listed, want 3 (recent 3)", n)
				}
				if n := len(fetchRow.FindAllString(body, -1)); n != 3 {
					t.Errorf("%d fetches listed, want 3 (recent 3)", n)
				}
			}
		})
	}

	// Anything but GET and HEAD: 405, with Allow, and nothing written.
	for _, method := range []string{http.MethodPost, http.MethodPut, http.MethodDelete, http.MethodPatch, http.MethodOptions} {
		w, err := statusCall(t, s, method, "/", "")
		var he caddyhttp.HandlerError
		if !errors.As(err, &he) || he.StatusCode != http.StatusMethodNotAllowed {
			t.Errorf("%s: %v, want a 405 error", method, err)
		}
		if w.Header().Get("Allow") != "GET, HEAD" || w.Body.Len() != 0 {
			t.Errorf("%s: Allow %q, %d bytes written", method, w.Header().Get("Allow"), w.Body.Len())
		}
	}
}

// checkStatusJSON checks the JSON document's fields and values from
// TestStatusPageContent's setup.
func checkStatusJSON(t *testing.T, b []byte, id, addr, dir string) {
	t.Helper()
	var generic map[string]any
	if err := json.Unmarshal(b, &generic); err != nil {
		t.Fatalf("%v\n%s", err, b)
	}
	hasKeys(t, "status page JSON", generic, "generated", "uptime_seconds", "node", "levels", "dht", "caches",
		"recent_fetches", "requests", "recent_objects")
	if r, ok := generic["requests"].(map[string]any); ok {
		hasKeys(t, "requests", r, "total", "answered", "hit_ratio", "kinds", "by_cache_status_and_source")
	}
	if n, ok := generic["node"].(map[string]any); ok {
		hasKeys(t, "node", n, "id", "address", "listen", "joined", "started")
	}
	if d, ok := generic["dht"].(map[string]any); ok {
		hasKeys(t, "dht", d, "requests_in", "drops", "refused", "stores_accepted", "stores_refused", "stores_evicted")
	}
	if strings.Contains(strings.ToLower(string(b)), "key_file") {
		t.Error("the document names the key file")
	}
	var doc statusDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	if doc.Node == nil || doc.Node.ID != id || doc.Node.Address != addr || !doc.Node.Joined || doc.Node.Started == nil ||
		doc.UptimeSeconds != math.Round(doc.Generated.Sub(*doc.Node.Started).Seconds()) {
		t.Errorf("node %+v, uptime %v", doc.Node, doc.UptimeSeconds)
	}
	if len(doc.Levels) != 3 || doc.DHT == nil {
		t.Errorf("levels %+v, dht %+v", doc.Levels, doc.DHT)
	}
	i := slices.IndexFunc(doc.Caches, func(c adminCache) bool { return c.Dir == dir })
	if i < 0 || doc.Caches[i].Objects != 5 || doc.Caches[i].InProgress != 1 {
		t.Errorf("caches %+v", doc.Caches)
	}
	if len(doc.RecentObjects) != 3 || doc.RecentObjects[0].URL != "http://www.example.com/obj4" ||
		doc.RecentObjects[1].URL != `http://www.example.com/<script>alert("x")</script>` || doc.RecentObjects[0].Size != 500 ||
		doc.RecentObjects[0].Source != "origin" || doc.RecentObjects[0].Expires == nil ||
		len(doc.RecentObjects[2].URL) != recentFetchURLMax || !strings.HasPrefix(doc.RecentObjects[2].URL, "http://www.example.com/obj2/xxx") {
		t.Errorf("recent objects %+v", doc.RecentObjects)
	}
	if len(doc.RecentFetches) != 3 || doc.RecentFetches[0].URL != "http://fetch.example/4" {
		t.Errorf("recent fetches %+v", doc.RecentFetches)
	}
	if len(doc.Requests.Kinds) != len(statusKinds) {
		t.Errorf("requests %+v", doc.Requests)
	}
}

// statusPageConfig: a coral app, the status page on the host 127.0.0.2,
// and coral_proxy for every other host, on one port.
func statusPageConfig(port int, dir string) string {
	return fmt.Sprintf(`{
		skip_install_trust
		admin {$CORAL_TEST_ADMIN}
		http_port %[1]d
		grace_period 1ns
		coral {
			listen 127.0.3.60:%[1]d
		}
	}
	http://127.0.0.2:%[1]d {
		coral_status {
			recent 5
		}
	}
	:%[1]d {
		coral_proxy nyud.test {
			cache_dir %[2]s
			allow_origins 127.0.0.0/8 127.0.0.1 # the origins run in this process: its own address, listed alone
		}
	}`, port, dir)
}

// statusJSON gets the status page's JSON through Caddy.
func statusJSON(t *testing.T, base string) statusDoc {
	t.Helper()
	resp, b := get(t, base, "", "/?format=json")
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("status page: %d %s", resp.StatusCode, b)
	}
	var doc statusDoc
	if err := json.Unmarshal(b, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

func statusKindCounts(doc statusDoc) map[string]uint64 {
	out := map[string]uint64{}
	for _, k := range doc.Requests.Kinds {
		out[k.Kind] = k.Count
	}
	return out
}

// End to end in Caddy: the host-specific site is the status page, every
// other host goes to coral_proxy, and the page's counters follow the
// requests the proxy serves.
func TestStatusPageCaddy(t *testing.T) {
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Write([]byte("content of " + r.URL.Path))
	})
	const port = 9281
	tester := caddytest.NewTester(t)
	tester.InitServer(statusPageConfig(port, t.TempDir()), "caddyfile")
	status := fmt.Sprintf("http://127.0.0.2:%d", port)
	proxy := fmt.Sprintf("http://127.0.0.1:%d", port)
	host := o.coralHost()
	originURL := "http://127.0.0.1:" + o.port()

	before := statusJSON(t, status)
	if before.Node == nil || before.Node.Address != fmt.Sprintf("127.0.3.60:%d", port) || before.Node.Started == nil {
		t.Fatalf("node %+v", before.Node)
	}

	// Two misses to the origin, one local hit, one refusal.
	for _, path := range []string{"/one", "/two"} {
		if resp, b := get(t, proxy, host, path); resp.StatusCode != http.StatusOK || string(b) != "content of "+path {
			t.Fatalf("%s: %d %q", path, resp.StatusCode, b)
		}
	}
	waitDownloads(t)
	if resp, _ := get(t, proxy, host, "/one"); !strings.Contains(resp.Header.Get("Cache-Status"), "hit") {
		t.Fatalf("/one again: Cache-Status %q", resp.Header.Get("Cache-Status"))
	}
	if resp, _ := get(t, proxy, "www.example.com", "/"); resp.StatusCode != http.StatusMisdirectedRequest {
		t.Fatalf("a host that is not Coralized: %d", resp.StatusCode)
	}

	after := statusJSON(t, status)
	b, a := statusKindCounts(before), statusKindCounts(after)
	for kind, want := range map[string]uint64{"local_hit": 1, "origin": 2, "refused": 1, "peer": 0, "stale": 0} {
		if d := a[kind] - b[kind]; d != want {
			t.Errorf("%s: up by %d, want %d", kind, d, want)
		}
	}
	if d := after.Requests.Total - before.Requests.Total; d != 4 {
		t.Errorf("total up by %d, want 4", d)
	}
	if len(after.Caches) == 0 || after.Caches[0].Objects != 2 || after.Caches[0].InProgress != 0 {
		t.Errorf("caches %+v", after.Caches)
	}
	if len(after.RecentObjects) != 2 || after.RecentObjects[0].URL != originURL+"/one" || after.RecentObjects[1].URL != originURL+"/two" {
		t.Errorf("recent objects %+v", after.RecentObjects)
	}
	if len(after.RecentFetches) < 2 || after.RecentFetches[0].URL != originURL+"/two" || after.RecentFetches[0].Source != "origin" {
		t.Errorf("recent fetches %+v", after.RecentFetches)
	}

	// The HTML page shows the same, on any path of the status host.
	resp, page := get(t, status, "", "/anything")
	if resp.StatusCode != http.StatusOK || resp.Header.Get("Content-Type") != "text/html; charset=utf-8" {
		t.Fatalf("page: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	for _, want := range []string{
		`data-stat="node-address">` + after.Node.Address + `<`, `data-stat="cache-objects">2<`, originURL + "/one",
		fmt.Sprintf(`data-stat="requests-local_hit">%d<`, a["local_hit"]),
	} {
		if !strings.Contains(string(page), want) {
			t.Errorf("page lacks %s", want)
		}
	}

	// Read-only: 405 with Allow through Caddy too.
	for _, method := range []string{http.MethodPost, http.MethodDelete} {
		req, err := http.NewRequest(method, status+"/", strings.NewReader("x"))
		if err != nil {
			t.Fatal(err)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusMethodNotAllowed || resp.Header.Get("Allow") != "GET, HEAD" {
			t.Errorf("%s: %d, Allow %q", method, resp.StatusCode, resp.Header.Get("Allow"))
		}
	}
	// The status page's own requests are not proxy requests.
	if again := statusJSON(t, status); again.Requests.Total != after.Requests.Total {
		t.Errorf("the status page counted itself: total %d, then %d", after.Requests.Total, again.Requests.Total)
	}
}

// TestStatusPageHidesQueries: the page shows the URLs of objects and
// fetches without their query strings (signed links carry tokens) unless
// show_queries is set.
func TestStatusPageHidesQueries(t *testing.T) {
	store := startRegistryTest(t, "127.0.5.11:4000", "", t.TempDir(), "nyud.test")
	apps, _ := runningAll()
	app := apps[len(apps)-1]
	const secret = "token=s3cr3t&expires=1"
	metricsTestPut(t, store, metricsTestKey(0), "http://www.example.com/signed?"+secret, "body")
	recordFetch(proxy.Fetch{URL: "http://www.example.com/fetched?" + secret, Source: "origin", Status: 200, Bytes: 4, Took: time.Millisecond})

	for _, show := range []bool{false, true} {
		s := &StatusPage{Recent: 5, app: app, ShowQueries: show}
		for _, accept := range []string{"text/html", "application/json"} {
			rec, err := statusCall(t, s, http.MethodGet, "/", accept)
			if err != nil {
				t.Fatal(err)
			}
			page := rec.Body.String()
			if leaked := strings.Contains(page, "s3cr3t"); leaked != show {
				t.Errorf("show_queries %v, %s: query shown %v", show, accept, leaked)
			}
			for _, path := range []string{"/signed", "/fetched"} {
				if !strings.Contains(page, "www.example.com"+path) {
					t.Errorf("show_queries %v, %s: %s not listed", show, accept, path)
				}
			}
		}
	}
}

func TestStatusPageShowQueriesCaddyfile(t *testing.T) {
	d := caddyfile.NewTestDispenser("coral_status {\n show_queries\n recent 5\n}")
	var s StatusPage
	if err := s.UnmarshalCaddyfile(d); err != nil || !s.ShowQueries || s.Recent != 5 {
		t.Fatalf("%v %+v", err, s)
	}
	d = caddyfile.NewTestDispenser("coral_status {\n show_queries yes\n}")
	if err := new(StatusPage).UnmarshalCaddyfile(d); err == nil {
		t.Fatal("show_queries with an argument accepted")
	}
}

// TestStatusPageSuspects (issue 35's detection): a node whose requests
// claim an address other than their source shows as a suspect prefix on
// the status page and in its JSON, with the kind of event, the source and
// the address it claimed.
func TestStatusPageSuspects(t *testing.T) {
	const addr = "127.0.5.14:4000"
	startRegistryTest(t, addr, "", t.TempDir(), "nyud.test")
	apps, _ := runningAll()
	s := &StatusPage{app: apps[len(apps)-1]}

	cfg := coraldht.DefaultConfig()
	cfg.HintHops = 0
	cfg.Advertise = netip.MustParseAddrPort("127.0.6.99:4000") // not where it sends from
	tr, err := coraldht.ListenUDP("127.0.6.15:4000")
	if err != nil {
		t.Fatal(err)
	}
	liar, err := coraldht.NewNode(cfg, tr)
	if err != nil {
		t.Fatal(err)
	}
	defer liar.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	// The reply comes back to the socket that sent; whether the ping
	// counts as answered does not matter, only what the node heard.
	_, _ = liar.Ping(ctx, netip.MustParseAddrPort(addr))

	w, err := statusCall(t, s, http.MethodGet, "/?format=json", "")
	if err != nil || w.Code != http.StatusOK {
		t.Fatalf("status %d, error %v", w.Code, err)
	}
	var doc struct {
		DHT struct {
			Suspects []adminSuspect `json:"suspects"`
		} `json:"dht"`
	}
	if err := json.Unmarshal(w.Body.Bytes(), &doc); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(doc.DHT.Suspects, func(s adminSuspect) bool { return s.Prefix == "127.0.6.0/24" })
	if i < 0 {
		t.Fatalf("no suspect 127.0.6.0/24 in %+v", doc.DHT.Suspects)
	}
	got := doc.DHT.Suspects[i]
	if got.EventsBy[coraldht.AbuseClaimMismatch.String()] == 0 || !slices.Contains(got.Sources, "127.0.6.15:4000") ||
		!slices.Contains(got.Claimed, "127.0.6.99:4000") {
		t.Errorf("suspect %+v: want a claim mismatch from 127.0.6.15:4000 claiming 127.0.6.99:4000", got)
	}
	w, err = statusCall(t, s, http.MethodGet, "/", "")
	if err != nil || w.Code != http.StatusOK {
		t.Fatalf("status %d, error %v", w.Code, err)
	}
	if body := w.Body.String(); !strings.Contains(body, "Suspect peers") || !strings.Contains(body, "<code>127.0.6.0/24</code>") {
		t.Errorf("the page shows no suspect 127.0.6.0/24")
	}
}
