package operator

import (
	"fmt"
	"net"
	"net/netip"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/miekg/dns"
)

// caddyNode is a Coral proxy's addresses: the admin API, the DSHT node
// and the HTTP site.
type caddyNode struct {
	admin, dsht, http netip.AddrPort
}

func (n caddyNode) caddyfile(dir string, extra ...labconf.Directive) string {
	px := labconf.Proxy{Zone: "nyud.test", CacheDir: filepath.Join(dir, "cache"), Extra: extra}
	return labconf.Caddy{
		Admin:        n.admin,
		AdminOrigins: []string{n.admin.String()},
		HTTPSOff:     true,
		SkipTrust:    true,
		Grace:        "1s",
		Coral:        labconf.Node{Listen: n.dsht},
		Sites: []labconf.Directive{labconf.D(fmt.Sprintf(":%d", n.http.Port())).With(
			labconf.D("bind", n.http.Addr()), px.Directive())},
	}.String()
}

// adminUp answers once the admin API answers for n's DSHT node.
func (n caddyNode) adminUp() error {
	status, body, err := get("http://"+n.admin.String()+"/coral/status", n.admin.String())
	if err != nil {
		return err
	}
	if status != 200 || !strings.Contains(body, `"`+n.dsht.String()+`"`) {
		return fmt.Errorf("/coral/status: %d %.200s", status, body)
	}
	return nil
}

func ap(s string) netip.AddrPort { return netip.MustParseAddrPort(s) }

// TestOneCaddyPerAddress starts a Coral proxy, then second ones that share
// one of its addresses each: its HTTP site, its admin API (both bound with
// SO_REUSEPORT by Caddy, so the kernel would let them share) and its DSHT
// node. Each refuses to start, naming the address, and the first serves
// on; its own reloads still work.
func TestOneCaddyPerAddress(t *testing.T) {
	first := caddyNode{ap("127.0.146.1:2019"), ap("127.0.146.1:4000"), ap("127.0.146.1:8090")}
	dir := t.TempDir()
	a := startCaddy(t, "first", dir, first.caddyfile(dir))
	waitFor(t, a, 30*time.Second, "the first proxy's admin API", first.adminUp)

	other := caddyNode{ap("127.0.146.2:2019"), ap("127.0.146.2:4000"), ap("127.0.146.2:8090")}
	for _, tc := range []struct {
		name   string
		second caddyNode
		shared string // the address the error must name
	}{
		{"http", caddyNode{other.admin, other.dsht, first.http}, first.http.String() + "/tcp"},
		{"admin", caddyNode{first.admin, other.dsht, other.http}, first.admin.String() + "/tcp"},
		{"dsht", caddyNode{other.admin, first.dsht, other.http}, first.dsht.String() + "/udp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			b := startCaddy(t, "second-"+tc.name, dir, tc.second.caddyfile(dir))
			log := waitExit(t, b, 30*time.Second)
			if !strings.Contains(log, tc.shared+" is already served by another process") {
				t.Errorf("the second proxy's log does not name %s as served by another process:\n%s", tc.shared, b.LogTail(20))
			}
			if err := a.Exited(); err != nil {
				t.Fatal(err)
			}
			if err := first.adminUp(); err != nil {
				t.Errorf("the first proxy after the second gave up: %v", err)
			}
		})
	}

	// Every connection to the site reaches the first proxy (a second one
	// sharing the port would take some): its requests counter counts them
	// all.
	for range 20 {
		if status, _, err := get("http://"+first.http.String()+"/", "www.example.com.nyud.test"); err != nil || status == 0 {
			t.Fatalf("the first proxy's site: %d %v", status, err)
		}
	}

	// The first proxy's own reloads, which bind its listeners anew beside
	// the old ones (SO_REUSEPORT in one process), go on working, with
	// the same addresses and with a new one.
	bin := binary(t, "caddy")
	for i, extra := range [][]labconf.Directive{
		{labconf.D("cache_size", "64MiB")},
		{labconf.D("cache_size", "32MiB"), labconf.D("max_objects", "1000")},
	} {
		path := filepath.Join(dir, "Caddyfile")
		if err := labconf.WriteFile(path, first.caddyfile(dir, extra...)); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "reload", "--config", path, "--adapter", "caddyfile", "--address", first.admin.String()).CombinedOutput()
		if err != nil {
			t.Fatalf("reload %d of the first proxy: %v\n%s", i+1, err, out)
		}
		if v, err := metric("http://"+first.admin.String()+"/metrics", first.admin.String(), "caddy_config_last_reload_successful"); err != nil || v != "1" {
			t.Errorf("after reload %d: caddy_config_last_reload_successful %q %v", i+1, v, err)
		}
	}
	if err := first.adminUp(); err != nil {
		t.Errorf("after the reloads: %v", err)
	}
}

// dnsNode is a Coral name server's addresses: DNS (UDP and TCP) and its
// DSHT node.
type dnsNode struct {
	dns, dsht netip.AddrPort
}

func (n dnsNode) corefile(extra ...labconf.Directive) string {
	plugin := labconf.CoralPlugin{Zone: "nyucd.test", Alias: "nyud.test", Node: labconf.Node{Listen: n.dsht}}
	port := n.dns.Port()
	block := append([]labconf.Directive{labconf.D("bind", n.dns.Addr()), plugin.Directive()}, extra...)
	return labconf.Corefile("", labconf.D(fmt.Sprintf("nyucd.test:%d nyud.test:%d", port, port)).With(block...))
}

// soa asks the server for the coral zone's SOA.
func (n dnsNode) soa(network string) error {
	m := new(dns.Msg)
	m.SetQuestion("nyucd.test.", dns.TypeSOA)
	c := &dns.Client{Net: network, Timeout: 2 * time.Second}
	in, _, err := c.Exchange(m, n.dns.String())
	if err != nil {
		return err
	}
	if in.Rcode != dns.RcodeSuccess || len(in.Answer) != 1 {
		return fmt.Errorf("SOA over %s: %s, %d answers", network, dns.RcodeToString[in.Rcode], len(in.Answer))
	}
	return nil
}

// TestOneCoreDNSPerAddress: a second Coral name server on the first's DNS
// address (CoreDNS binds port 53 with SO_REUSEPORT) or on its DSHT
// address refuses to start; the first answers on, and reloads on SIGUSR1.
func TestOneCoreDNSPerAddress(t *testing.T) {
	first := dnsNode{ap("127.0.146.11:1053"), ap("127.0.146.11:4001")}
	dir := t.TempDir()
	a := startCoreDNS(t, "first", dir, first.corefile())
	waitFor(t, a, 30*time.Second, "the first name server", func() error { return first.soa("udp") })

	for _, tc := range []struct {
		name   string
		second dnsNode
		shared string
	}{
		{"dns", dnsNode{first.dns, ap("127.0.146.12:4001")}, first.dns.String() + "/udp"},
		{"dsht", dnsNode{ap("127.0.146.12:1053"), first.dsht}, first.dsht.String() + "/udp"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			b := startCoreDNS(t, "second-"+tc.name, dir, tc.second.corefile())
			log := waitExit(t, b, 30*time.Second)
			if !strings.Contains(log, tc.shared+" is already served by another process") {
				t.Errorf("the second name server's log does not name %s as served by another process:\n%s", tc.shared, b.LogTail(20))
			}
			if err := a.Exited(); err != nil {
				t.Fatal(err)
			}
		})
	}
	for range 20 {
		for _, network := range []string{"udp", "tcp"} {
			if err := first.soa(network); err != nil {
				t.Fatalf("the first name server: %v", err)
			}
		}
	}

	// A reload (SIGUSR1) that adds a ready endpoint: CoreDNS binds its
	// listeners anew beside the old ones, in the same process.
	ready := ap("127.0.146.11:8181")
	if err := labconf.WriteFile(filepath.Join(dir, "Corefile"), first.corefile(labconf.D("ready", ready))); err != nil {
		t.Fatal(err)
	}
	if err := a.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, a, 30*time.Second, "ready after the reload", func() error {
		c, err := net.DialTimeout("tcp", ready.String(), time.Second)
		if err == nil {
			c.Close()
		}
		return err
	})
	if err := first.soa("udp"); err != nil {
		t.Errorf("after the reload: %v", err)
	}
	if strings.Contains(a.Log(), "already served") {
		t.Errorf("the reload tripped over its own sockets:\n%s", a.LogTail(20))
	}
}
