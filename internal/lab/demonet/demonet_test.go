//go:build linux

package demonet

import (
	"bytes"
	"io"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

func TestSite(t *testing.T) {
	site := Site()
	again := buildSite()
	for _, path := range []string{PathIndex, PathAbout, PathNews, PathPNG1, PathPNG2, PathJPEG} {
		p := site[path]
		if p == nil {
			t.Fatalf("no page %s", path)
		}
		if !bytes.Equal(p.Body, again[path].Body) {
			t.Errorf("%s is not deterministic", path)
		}
		if strings.HasPrefix(path, "/img/") {
			if n := len(p.Body); n < 10<<10 || n > 100<<10 {
				t.Errorf("%s: %d bytes, want some tens of KB", path, n)
			}
			if got := http.DetectContentType(p.Body); got != p.ContentType {
				t.Errorf("%s: sniffed %s, served as %s", path, got, p.ContentType)
			}
			if !bytes.Contains(site[PathIndex].Body, []byte(`<img src="`+path+`"`)) {
				t.Errorf("the index page does not embed %s", path)
			}
		}
	}
	if site[PathIndex].SetCookie == "" {
		t.Error("the index page sets no cookie")
	}
}

func TestOrigin(t *testing.T) {
	// Any port will do here; the demo uses 80.
	o := NewOrigin(netip.MustParseAddrPort("127.0.88.2:18080"), io.Discard)
	if err := o.Start(); err != nil {
		t.Skipf("cannot listen: %v", err)
	}
	defer o.Stop()
	base := "http://" + o.Addr.String()
	c := &http.Client{Transport: &http.Transport{Proxy: nil}}
	get := func(path string, hdr ...string) *http.Response {
		t.Helper()
		req, _ := http.NewRequest(http.MethodGet, base+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			req.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := c.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	r := get("/?x=1", "Cookie", "a=b")
	if r.StatusCode != 200 || r.Header.Get("Set-Cookie") == "" || r.Header.Get("Cache-Control") != "public, max-age=60" || r.Header.Get("ETag") == "" {
		t.Errorf("index: %d %v", r.StatusCode, r.Header)
	}
	if r := get(PathPNG1, "If-None-Match", Site()[PathPNG1].ETag); r.StatusCode != http.StatusNotModified {
		t.Errorf("conditional request: %d, want 304", r.StatusCode)
	}
	if r := get("/nope"); r.StatusCode != http.StatusNotFound {
		t.Errorf("/nope: %d", r.StatusCode)
	}
	resp, err := c.Post(base+"/", "text/plain", strings.NewReader("x"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusMethodNotAllowed {
		t.Errorf("POST: %d", resp.StatusCode)
	}
	reqs := o.RequestsFor("/?x=1")
	if len(reqs) != 1 || reqs[0].Header.Get("Cookie") != "a=b" || reqs[0].Status != 200 {
		t.Errorf("recorded %+v", reqs)
	}
	if len(o.Requests()) != 4 {
		t.Errorf("%d requests recorded, want 4", len(o.Requests()))
	}

	if err := o.Stop(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Get(base + "/"); err == nil {
		t.Error("the stopped origin answered")
	}
	if err := o.Start(); err != nil {
		t.Fatal(err)
	}
	if r := get(PathAbout); r.StatusCode != 200 {
		t.Errorf("after a restart: %d", r.StatusCode)
	}
}

func TestOptions(t *testing.T) {
	for _, tc := range []struct {
		prefix string
		ok     bool
	}{
		{"127.0.80.0/24", true}, {"127.0.89.0/24", true}, {"127.0.85.7/24", true},
		{"127.0.90.0/24", false}, {"127.0.79.0/24", false}, {"127.0.80.0/23", false}, {"10.0.80.0/24", false},
	} {
		o := Options{Prefix: netip.MustParsePrefix(tc.prefix), CoreDNS: "x", Caddy: "y"}
		if err := o.defaults(); (err == nil) != tc.ok {
			t.Errorf("%s: %v", tc.prefix, err)
		}
	}
	o := Options{CoreDNS: "x", Caddy: "y"}
	if err := o.defaults(); err != nil || o.Nodes != 6 || o.Prefix.String() != "127.0.80.0/24" || len(o.Resolvers) != 1 {
		t.Errorf("defaults: %+v %v", o, err)
	}
	if got := strings.Join([]string{Region(0, 6), Region(2, 6), Region(3, 6), Region(5, 6)}, " "); got != "east east west west" {
		t.Errorf("regions: %s", got)
	}
}

func testSpec(t *testing.T, i int) nodeSpec {
	l := Layout{Prefix: netip.MustParsePrefix("127.0.80.0/24")}
	return nodeSpec{index: i, addr: l.Node(i), region: Region(i, 6), dir: t.TempDir(), keyFile: "/run/network.key",
		bootstrap: []netip.AddrPort{netip.AddrPortFrom(l.Node(0), PortDHTCoreDNS)},
		resolvers: []resolverSpec{{l.Resolver(0), RegionEast}, {l.Resolver(1), RegionWest}}, layout: l,
		https: httpsSpec{directory: "https://127.0.80.253/acme/local/directory", root: "/run/ca/root.crt", storage: "/run/certs",
			resolver: l.Resolver(0), renewInterval: 5 * time.Second, renewalRatio: 0.75}}
}

func TestCorefile(t *testing.T) {
	c := corefile(testSpec(t, 4))
	for _, want := range []string{
		"nyucd.test nyud.test {", "bind 127.0.80.14", "listen 127.0.80.14:4000", "bootstrap 127.0.80.10:4000",
		"cluster 1 demo", "cluster 2 west", "probe none", "classify 127.0.80.3/32 1", "classify 127.0.80.4/32 2",
		"answer_ttl 5", "live_within 5s", "check_interval 1s", "ready 127.0.80.14:8181", "prometheus 127.0.80.14:9153",
	} {
		if !strings.Contains(c, want) {
			t.Errorf("Corefile lacks %q:\n%s", want, c)
		}
	}
}

func TestCaddyfile(t *testing.T) {
	s := testSpec(t, 1)
	c := caddyfile(s)
	for _, want := range []string{
		"admin 127.0.80.11:2019", "listen 127.0.80.11:4001", "bootstrap 127.0.80.10:4000", "cluster 2 east",
		"bind 127.0.80.11", "coral_proxy nyud.test", "allow_origins 127.0.80.2/32", "min_ttl 0",
		"http://127.0.80.11 {", "coral_status", "https_redirect", "peer_address 127.0.80.11:80",
		"acme_ca https://127.0.80.253/acme/local/directory", "acme_ca_root /run/ca/root.crt", "storage file_system /run/certs",
		"renew_interval 5s", "renewal_window_ratio 0.75", "https://*.nyud.test:443 {", "https://nyud.test:443 {",
		"dns coral", "resolvers 127.0.80.3:53",
	} {
		if !strings.Contains(c, want) {
			t.Errorf("Caddyfile lacks %q:\n%s", want, c)
		}
	}
	// Caddy itself parses it, when bin/caddy is there (adapt provisions
	// nothing, so this binds no ports).
	_, caddy, _ := Binaries()
	if _, err := os.Stat(caddy); caddy == "" || err != nil {
		t.Skipf("no bin/caddy (%q): %v", caddy, err)
	}
	path := filepath.Join(s.dir, "Caddyfile")
	if err := os.WriteFile(path, []byte(c), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(caddy, "adapt", "--config", path, "--adapter", "caddyfile").CombinedOutput()
	if err != nil {
		t.Fatalf("caddy adapt: %v\n%s", err, out)
	}
	for _, want := range []string{`"handler":"coral_proxy"`, `"handler":"coral_status"`, `"coral":{`,
		`"provider":{"name":"coral"}`, `"https_redirect":true`} {
		if !strings.Contains(string(out), want) {
			t.Errorf("adapted config lacks %s", want)
		}
	}
	// No pki app: its local CA would be created by every node at once in
	// the shared certificate storage.
	if strings.Contains(string(out), `"pki":`) {
		t.Errorf("adapted config has a pki app:\n%s", out)
	}
}

// TestCACaddyfile: the CA validates dns-01 only, through the demo's
// resolver, for the alias zone and its wildcard only; Caddy parses it.
func TestCACaddyfile(t *testing.T) {
	l := Layout{Prefix: netip.MustParsePrefix("127.0.80.0/24")}
	c := caCaddyfile(l.CA(), l.Resolver(0), 5*time.Minute)
	for _, want := range []string{"https://127.0.80.253 {", "bind 127.0.80.253", "tls internal", "acme_server {",
		"lifetime 5m0s", "resolvers 127.0.80.3:53", "challenges dns-01", "allow_wildcard_names", "domains nyud.test *.nyud.test"} {
		if !strings.Contains(c, want) {
			t.Errorf("the CA's Caddyfile lacks %q:\n%s", want, c)
		}
	}
	if strings.Contains(c, "coral {") {
		t.Errorf("the CA runs a coral app:\n%s", c)
	}
	_, caddy, _ := Binaries()
	if _, err := os.Stat(caddy); caddy == "" || err != nil {
		t.Skipf("no bin/caddy (%q): %v", caddy, err)
	}
	path := filepath.Join(t.TempDir(), "Caddyfile")
	if err := os.WriteFile(path, []byte(c), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(caddy, "adapt", "--config", path, "--adapter", "caddyfile").CombinedOutput()
	if err != nil || !strings.Contains(string(out), `"handler":"acme_server"`) || !strings.Contains(string(out), `"dns-01"`) {
		t.Fatalf("caddy adapt: %v\n%s", err, out)
	}
}

func TestZones(t *testing.T) {
	l := Layout{Prefix: netip.MustParsePrefix("127.0.80.0/24")}
	root, origin, err := zones(l, 6)
	if err != nil {
		t.Fatal(err)
	}
	count := map[string]int{}
	for _, rr := range root.Records {
		if ns, ok := rr.(*dns.NS); ok {
			count[ns.Hdr.Name]++
		}
	}
	if count["nyud.test."] != 6 || count["nyucd.test."] != 6 || count["demo.test."] != 1 {
		t.Errorf("delegations: %v", count)
	}
	var www string
	for _, rr := range origin.Records {
		if a, ok := rr.(*dns.A); ok && a.Hdr.Name == OriginName+"." {
			www = a.A.String()
		}
	}
	if www != "127.0.80.2" {
		t.Errorf("%s A %q", OriginName, www)
	}
	if got := nsName(l.Node(3)); got != "ns-127-0-80-13.nyucd.test." {
		t.Errorf("nsName: %s", got)
	}
}
