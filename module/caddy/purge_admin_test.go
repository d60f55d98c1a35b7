package coralcaddy

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/module/caddy/purge"
)

// TestPurgeAdmin: POST /coral/purge removes a URL from the caches Caddy
// runs (the proxy's purge itself is tested in package proxy), and with
// network=1 also asks the other proxies through the node (none here).
func TestPurgeAdmin(t *testing.T) {
	o := newCountingOrigin(t, func(o *countingOrigin, w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Cache-Control", "max-age=600")
		w.Write([]byte("page " + r.URL.Path))
	})
	_, base := startProxy(t)
	store := newestHandler(t).store
	for range 2 {
		if resp, b := get(t, base, o.coralHost(), "/p"); resp.StatusCode != http.StatusOK || string(b) != "page /p" {
			t.Fatalf("/p: %d %q", resp.StatusCode, b)
		}
	}
	if n := o.count("/p"); n != 1 {
		t.Fatalf("origin asked %d times before the purge, want 1", n)
	}
	waitWritten(t, store)
	for _, q := range []string{"url=" + url.QueryEscape("http://"+o.coralHost()+"/p"), "network=1&url=" + url.QueryEscape("http://127.0.0.1:"+o.port()+"/p")} {
		w, err := adminTestCall(t, "/coral/purge", http.MethodPost, "/coral/purge?"+q)
		var res purge.Response
		if err != nil || json.Unmarshal(w.Body.Bytes(), &res) != nil {
			t.Fatalf("%s: %v %s", q, err, w.Body)
		}
		if strings.HasPrefix(q, "network") {
			if res.Local.Purged != 1 || res.Network == nil || res.Network.Asked != 0 {
				t.Errorf("%s: %+v, network %+v", q, res.Local, res.Network)
			}
		} else if res.Local.Purged != 1 || res.Network != nil || len(res.Local.Caches) != 1 {
			t.Errorf("%s: %+v", q, res.Local)
		}
		get(t, base, o.coralHost(), "/p")
		waitWritten(t, store)
	}
	if n := o.count("/p"); n != 3 {
		t.Errorf("origin asked %d times after two purges, want 3", n)
	}
}

func TestPurgeAdminErrors(t *testing.T) {
	call := func(method, target string) (int, string) {
		w, err := adminTestCall(t, "/coral/purge", method, target)
		if err == nil {
			return w.Code, w.Header().Get("Allow")
		}
		return adminTestStatusCode(err), w.Header().Get("Allow")
	}
	for _, m := range []string{http.MethodGet, http.MethodHead, http.MethodPut, http.MethodDelete} {
		if code, allow := call(m, "/coral/purge?url=http://www.example.com/"); code != http.StatusMethodNotAllowed || allow != "POST" {
			t.Errorf("%s: %d, Allow %q", m, code, allow)
		}
	}
	stopCoral(t)
	if code, _ := call(http.MethodPost, "/coral/purge?url=http://www.example.com/"); code != http.StatusNotFound {
		t.Errorf("no cache running: %d, want 404", code)
	}
	startRegistryTest(t, "127.0.6.13:4000", "", t.TempDir(), "nyud.test")
	for _, target := range []string{
		"/coral/purge",
		"/coral/purge?url=",
		"/coral/purge?url=/a.jpg",
		"/coral/purge?url=ftp://www.example.com/",
		"/coral/purge?url=http://localhost/",
		"/coral/purge?url=http://www.example.com/&url=http://www.example.com/b",
		"/coral/purge?url=http://www.example.com/&prefix=maybe",
		"/coral/purge?url=http://www.example.com/&network=2",
		"/coral/purge?url=http://www.example.com/&timeout=forever",
		"/coral/purge?url=http://www.example.com/&timeout=1h",
		"/coral/purge?url=http://www.example.com/&timeout=-1s",
		"/coral/purge?url=http://www.example.com/&recursive=1",
		"/coral/purge?url=http%3A%2F%2Fwww.example.com%2F%ZZ",
	} {
		if code, _ := call(http.MethodPost, target); code != http.StatusBadRequest {
			t.Errorf("%s: %d, want 400", target, code)
		}
	}
	long := url.QueryEscape("http://www.example.com/" + strings.Repeat("x", coraldht.MaxAppPayload))
	if code, _ := call(http.MethodPost, "/coral/purge?prefix=1&network=1&url="+long); code != http.StatusBadRequest {
		t.Errorf("a prefix too long for the network: %d, want 400", code)
	}
	// The same URL exactly, or locally, is fine (the key travels).
	for _, q := range []string{"network=1&url=" + long, "prefix=1&url=" + long} {
		if code, _ := call(http.MethodPost, "/coral/purge?"+q); code != http.StatusOK {
			t.Errorf("%s…: %d", q[:30], code)
		}
	}
	// A form body works too (curl --data-urlencode).
	req := httptest.NewRequest(http.MethodPost, "/coral/purge", strings.NewReader("url="+url.QueryEscape("http://www.example.com/a?b=c&d")))
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	w := httptest.NewRecorder()
	if err := (&AdminAPI{}).handlePurge(w, req); err != nil {
		t.Fatalf("form body: %v", err)
	}
	var res purge.Response
	if err := json.Unmarshal(w.Body.Bytes(), &res); err != nil || res.Normalized != "//www.example.com/a?b=c&d" {
		t.Errorf("form body: %+v, %v", res, err)
	}
	// network= while no node runs (the app has not started yet, or has
	// stopped): the handlers' caches, without the apps.
	running.mu.Lock()
	apps := running.apps
	running.apps = nil
	running.mu.Unlock()
	t.Cleanup(func() {
		running.mu.Lock()
		running.apps = apps
		running.mu.Unlock()
	})
	if code, _ := call(http.MethodPost, "/coral/purge?url=http://www.example.com/&network=1"); code != http.StatusServiceUnavailable {
		t.Errorf("network without a node: %d, want 503", code)
	}
}
