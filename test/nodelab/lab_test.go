//go:build linux

package nodelab

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
	"github.com/miekg/dns"
)

// The lab: two Coral name servers and a proxy on loopback.
//
//	127.0.71.1   D1, the seed: CoreDNS, its DSHT node without bootstrap
//	127.0.71.2   D2: CoreDNS, bootstrapped through D1
//	127.0.71.3   D3: CoreDNS with CoreDNS's default ready (monitor until-ready)
//	127.0.71.11  P1: Caddy with the coral app and coral_proxy, bootstrapped through D1
var (
	addrD1 = netip.MustParseAddr("127.0.71.1")
	addrD2 = netip.MustParseAddr("127.0.71.2")
	addrD3 = netip.MustParseAddr("127.0.71.3")
	addrP1 = netip.MustParseAddr("127.0.71.11")
)

const (
	dhtPort    = 4000
	readyPort  = 8181
	adminPort  = 2019
	proxyPort  = 8090
	coralZone  = "nyucd.test"
	aliasZone  = "nyud.test"
	coralized  = "www.example.com." + aliasZone + "."
	checkEvery = time.Second
)

// binary finds bin/NAME; in CI its absence is a failure.
func binary(t *testing.T, name string) string {
	t.Helper()
	bin, err := labconf.Binary(name)
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return bin
}

// server is one process of the lab and how to write its configuration.
type server struct {
	name  string
	addr  netip.Addr
	dir   string
	bin   string
	proc  *proc.Process
	write func(s *server) (argv []string, env []string)
}

func (s *server) start(t *testing.T) {
	t.Helper()
	argv, env := s.write(s)
	p, err := proc.Start(argv, proc.Options{Name: s.name, Dir: s.dir, Env: env, Log: filepath.Join(s.dir, s.name+".log")})
	if err != nil {
		t.Fatal(err)
	}
	s.proc = p
}

func (s *server) stop(t *testing.T) {
	t.Helper()
	if err := s.proc.Stop(10 * time.Second); err != nil && !strings.Contains(err.Error(), "signal") {
		t.Logf("%s stopped: %v", s.name, err)
	}
}

// dnsNode describes a CoreDNS node's Corefile.
type dnsNode struct {
	boot     []netip.Addr
	stateDir bool   // state_dir in the node's directory (else off)
	levels   string // levels, if set (a change restarts the node in place)
	ready    string // the ready plugin's block: "continuously" or "" (CoreDNS's default)
}

func (s *server) corefile(n *dnsNode) []string {
	node := labconf.Node{Listen: netip.AddrPortFrom(s.addr, dhtPort), Levels: n.levels}
	for _, b := range n.boot {
		node.Bootstrap = append(node.Bootstrap, netip.AddrPortFrom(b, dhtPort))
	}
	stateDir := "off"
	if n.stateDir {
		stateDir = filepath.Join(s.dir, "state")
	}
	ready := labconf.D("ready", netip.AddrPortFrom(s.addr, readyPort))
	if n.ready != "" {
		ready = ready.With(labconf.D("monitor", n.ready))
	}
	text := labconf.Corefile("nodelab "+s.name, labconf.D(coralZone, aliasZone).With(
		labconf.D("bind", s.addr),
		labconf.CoralPlugin{Zone: coralZone, Alias: aliasZone, Node: node, Classify: []string{"127.0.0.0/8 0"},
			LiveWithin: "5s", CheckEvery: checkEvery.String(),
			Extra: []labconf.Directive{labconf.D("state_dir", stateDir), labconf.D("drain_file", filepath.Join(s.dir, "drain"))}}.Directive(),
		ready,
		labconf.D("errors"),
	))
	path := filepath.Join(s.dir, "Corefile")
	if err := labconf.WriteFile(path, text); err != nil {
		panic(err)
	}
	return []string{s.bin, "-conf", path}
}

// caddyNode describes a Caddy node's Caddyfile.
type caddyNode struct {
	levels string
}

func (s *server) caddyfile(n *caddyNode) ([]string, []string) {
	admin := netip.AddrPortFrom(s.addr, adminPort)
	node := labconf.Node{Listen: netip.AddrPortFrom(s.addr, dhtPort), Bootstrap: []netip.AddrPort{netip.AddrPortFrom(addrD1, dhtPort)}, Levels: n.levels}
	px := labconf.Proxy{Zone: aliasZone, CacheDir: filepath.Join(s.dir, "cache"), AllowOrigins: []string{"127.0.0.0/8"},
		AllowPeers: []string{"127.0.0.0/8"}, RateLimit: "off"}
	text := labconf.Caddy{Comment: "nodelab " + s.name, Admin: admin, AdminOrigins: []string{admin.String()}, HTTPSOff: true, SkipTrust: true,
		Grace: "1s", Options: []labconf.Directive{labconf.D("log").With(labconf.D("level", "WARN"))}, Coral: node,
		Sites: []labconf.Directive{labconf.D(fmt.Sprintf(":%d", proxyPort)).With(labconf.D("bind", s.addr), px.Directive())}}.String()
	path := filepath.Join(s.dir, "Caddyfile")
	if err := labconf.WriteFile(path, text); err != nil {
		panic(err)
	}
	return labconf.CaddyArgv(s.bin, path), labconf.CaddyEnv(s.dir)
}

// proxiesIn asks server for the Coralized name over TCP (a proven source:
// no probe gate in the way) and returns the A records' addresses.
func proxiesIn(server netip.Addr) ([]netip.Addr, error) {
	q := new(dns.Msg)
	q.SetQuestion(coralized, dns.TypeA)
	c := &dns.Client{Net: "tcp", Timeout: time.Second}
	r, _, err := c.Exchange(q, netip.AddrPortFrom(server, 53).String())
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, rr := range r.Answer {
		if a, ok := rr.(*dns.A); ok {
			ip, _ := netip.AddrFromSlice(a.A)
			out = append(out, ip.Unmap())
		}
	}
	return out, nil
}

// untilProxy polls server every 10 ms until its answer holds want (any
// proxy when want is invalid) and returns how long that took from since,
// or the error of the last try when within passes.
func untilProxy(server, want netip.Addr, since time.Time, within time.Duration) (time.Duration, error) {
	deadline := time.Now().Add(within)
	var last error
	for time.Now().Before(deadline) {
		got, err := proxiesIn(server)
		switch {
		case err != nil:
			last = err
		case len(got) > 0 && (!want.IsValid() || contains(got, want)):
			return time.Since(since), nil
		default:
			last = fmt.Errorf("answer without %v: %v", want, got)
		}
		time.Sleep(10 * time.Millisecond)
	}
	return 0, fmt.Errorf("no A record within %v: %v", within, last)
}

func contains(as []netip.Addr, a netip.Addr) bool {
	for _, x := range as {
		if x == a {
			return true
		}
	}
	return false
}

// readyStatus is the ready plugin's answer at addr.
func readyStatus(addr netip.Addr) (int, error) {
	c := &http.Client{Timeout: time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true}}
	resp, err := c.Get(fmt.Sprintf("http://%s/ready", netip.AddrPortFrom(addr, readyPort)))
	if err != nil {
		return 0, err
	}
	resp.Body.Close()
	return resp.StatusCode, nil
}

func waitFor(t *testing.T, what string, within time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v: %v", what, within, err)
}

// reloadCoreDNS sends SIGUSR1 and waits for the log to say the reload is
// complete.
func reloadCoreDNS(t *testing.T, s *server) time.Time {
	t.Helper()
	const done = "Reloading complete"
	before := strings.Count(s.proc.Log(), done)
	at := time.Now()
	if err := s.proc.Signal(syscall.SIGUSR1); err != nil {
		t.Fatal(err)
	}
	waitFor(t, s.name+" reloaded", 30*time.Second, func() error {
		if strings.Count(s.proc.Log(), done) > before {
			return nil
		}
		return errors.New("not yet")
	})
	return at
}

// reloadCaddy runs `caddy reload` on the node's Caddyfile.
func reloadCaddy(ctx context.Context, t *testing.T, s *server) time.Time {
	t.Helper()
	argv, env := s.write(s)
	argv = append(argv, "--address", netip.AddrPortFrom(s.addr, adminPort).String(), "--force")
	argv[1] = "reload"
	at := time.Now()
	cmd := exec.CommandContext(ctx, argv[0], argv[1:]...)
	cmd.Env, cmd.Dir = env, s.dir
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("caddy reload: %v\n%s", err, out)
	}
	return at
}
