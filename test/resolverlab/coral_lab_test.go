//go:build linux

package resolverlab

// The resolver lab for the coral CoreDNS plugin: the real bin/coredns (built
// by builds/coredns) as three Coral name servers on loopback, real HTTP-proxy
// DSHT nodes, a fake root, and each of the four Debian resolvers resolving
// fresh Coralized names through the alias zone.
//
//	127.0.60.1        fake root: delegates nyucd.test and nyud.test to F only
//	127.0.69.1        F, the far server: static clusters of its own, and
//	                  `classify 127.0.0.0/8 0` makes every resolver level 0
//	127.0.62.1, .2    N1, N2: the near level-2 cluster, measuring resolvers
//	                  on their own /24 (loopback RTT: level 2)
//	127.0.69.80       proxy in F's clusters (DSHT node with the HTTP service)
//	127.0.62.80       proxy in the near cluster
//	127.0.62.11–.14   the resolvers (minimisation on), .21–.24 (off)

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
	"github.com/coralcdn/coral/internal/lab/resolvers"
	"github.com/miekg/dns"
)

var (
	labRoot     = netip.MustParseAddr("127.0.60.1")
	labFar      = netip.MustParseAddr("127.0.69.1")
	labNear     = []netip.Addr{netip.MustParseAddr("127.0.62.1"), netip.MustParseAddr("127.0.62.2")}
	labFarHTTP  = netip.MustParseAddr("127.0.69.80")
	labNearHTTP = netip.MustParseAddr("127.0.62.80")
)

const labDHTPort = 4000

// corednsBinary finds bin/coredns; in CI its absence is a failure.
func corednsBinary(t *testing.T) string {
	t.Helper()
	bin, err := labconf.Binary("coredns")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return bin
}

// corednsProc is one bin/coredns process and its log.
type corednsProc struct {
	name     string
	addr     netip.Addr
	corefile string
	proc     *proc.Process
}

func (p *corednsProc) logText() string { return p.proc.Log() }

// queriesFor returns the log lines of queries whose name contains label.
func (p *corednsProc) queriesFor(label string) []string {
	var out []string
	for _, l := range strings.Split(p.logText(), "\n") {
		ll := strings.ToLower(l)
		if strings.Contains(ll, strings.ToLower(label)) && strings.Contains(l, `"`) && !strings.Contains(ll, "marker-") {
			out = append(out, l)
		}
	}
	return out
}

// startCoreDNS runs one Coral name server for both zones on addr, its DSHT
// node joining through the others of boot, with the given clusters and
// resolver classifications.
func startCoreDNS(t *testing.T, bin, name string, addr netip.Addr, keyFile string, boot []netip.Addr, clusters map[int]string, classify ...string) *corednsProc {
	t.Helper()
	var bs []netip.AddrPort
	for _, b := range boot {
		if b != addr {
			bs = append(bs, netip.AddrPortFrom(b, labDHTPort))
		}
	}
	corefile := labconf.Corefile("", labconf.D("nyucd.test", "nyud.test").With(
		labconf.D("bind", addr),
		labconf.CoralPlugin{
			Zone:       "nyucd.test",
			Alias:      "nyud.test",
			Node:       labconf.Node{Listen: netip.AddrPortFrom(addr, labDHTPort), Bootstrap: bs, KeyFile: keyFile, Clusters: clusters},
			Classify:   classify,
			LiveWithin: "5s",
			CheckEvery: "1s",
		}.Directive(),
		// The common log format, then what the query proved of its
		// source and what its answer's choice was ranked on (the
		// plugin's metadata).
		labconf.D("metadata"),
		labconf.D("log", ".", `"{common} {/coral/proof} {/coral/proximity}"`),
		labconf.D("errors"),
		labconf.D("ready", addr.String()+":8181"),
		labconf.D("prometheus", addr.String()+":9153"),
	))
	dir := t.TempDir()
	path := filepath.Join(dir, "Corefile")
	if err := labconf.WriteFile(path, corefile); err != nil {
		t.Fatal(err)
	}
	pr, err := proc.Start([]string{bin, "-conf", path}, proc.Options{Name: name, Dir: dir, Log: filepath.Join(dir, "coredns.log")})
	if err != nil {
		t.Fatal(err)
	}
	p := &corednsProc{name: name, addr: addr, corefile: path, proc: pr}
	t.Cleanup(func() {
		pr.Kill()
		if t.Failed() {
			t.Logf("--- %s (%s) log, last 60 lines:\n%s", name, addr, pr.LogTail(60))
		}
	})
	return p
}

// waitFor polls cond until it holds or the deadline passes.
func waitFor(t *testing.T, what string, within time.Duration, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	var err error
	for time.Now().Before(deadline) {
		if err = cond(); err == nil {
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("%s: not within %v: %v", what, within, err)
}

func ask(server netip.Addr, name string, qtype uint16) (*dns.Msg, error) {
	c := &dns.Client{Timeout: 3 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion(dns.Fqdn(name), qtype)
	m.SetEdns0(1232, false)
	r, _, err := c.Exchange(m, netip.AddrPortFrom(server, 53).String())
	if err == nil && r.Truncated {
		// As a stub resolver (dig) does: truncated over UDP, ask over
		// TCP. A server answers the first query from a source it has not
		// seen truncated when the answer needs a probe (proof.go).
		c.Net = "tcp"
		r, _, err = c.Exchange(m, netip.AddrPortFrom(server, 53).String())
	}
	return r, err
}

func addrsIn(m *dns.Msg) []netip.Addr {
	var out []netip.Addr
	for _, rr := range m.Answer {
		if a, ok := rr.(*dns.A); ok {
			ad, _ := netip.AddrFromSlice(a.A)
			out = append(out, ad.Unmap())
		}
	}
	slices.SortFunc(out, netip.Addr.Compare)
	return out
}

// splitZones separates query log lines for names in the coral zone from
// those in the alias zone.
func splitZones(lines []string) (coral, alias []string) {
	for _, l := range lines {
		if strings.Contains(strings.ToLower(l), ".nyucd.test. ") {
			coral = append(coral, l)
		} else {
			alias = append(alias, l)
		}
	}
	return coral, alias
}

// syncLogs makes sure every server has logged what it answered so far: it
// sends each a marker query after the resolver's answer arrived and waits
// until the marker shows up in its log (CoreDNS logs a query right after
// answering it).
func (lab *coralLab) syncLogs(t *testing.T, label string) {
	t.Helper()
	marker := "marker-" + label + ".nyucd.test"
	for _, p := range append([]*corednsProc{lab.far}, lab.near...) {
		if _, err := ask(p.addr, marker, dns.TypeTXT); err != nil {
			t.Fatalf("marker query to %s: %v", p.name, err)
		}
		waitFor(t, "marker in "+p.name+"'s log", 5*time.Second, func() error {
			if !strings.Contains(p.logText(), marker) {
				return fmt.Errorf("not yet")
			}
			return nil
		})
	}
}

// startProxyNode runs a DSHT node advertising the HTTP service, pinned to
// the given clusters, standing in for a Caddy coral_proxy.
func startProxyNode(t *testing.T, addr netip.Addr, key *coraldht.Key, cluster string, boot []netip.Addr) *coraldht.Node {
	t.Helper()
	cfg := coraldht.DefaultConfig()
	cfg.Key = key
	cfg.Services = coraldht.ServiceHTTP
	cfg.Pins = map[int]string{1: cluster, 2: cluster}
	cfg.HintHops = 0
	tr, err := coraldht.ListenUDP(netip.AddrPortFrom(addr, labDHTPort).String())
	if err != nil {
		t.Fatal(err)
	}
	n, err := coraldht.NewNode(cfg, tr)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { n.Close() })
	go func() {
		var bs []netip.AddrPort
		for _, b := range boot {
			bs = append(bs, netip.AddrPortFrom(b, labDHTPort))
		}
		for range 60 {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			err := n.Bootstrap(ctx, bs...)
			cancel()
			if err == nil || errors.Is(err, coraldht.ErrClosed) {
				return
			}
			time.Sleep(500 * time.Millisecond)
		}
	}()
	return n
}

// coralLab is the running network.
type coralLab struct {
	far  *corednsProc
	near []*corednsProc
	root *resolvers.Authority
}

func startCoralLab(t *testing.T) *coralLab {
	t.Helper()
	bin := corednsBinary(t)
	dir := t.TempDir()
	secret := make([]byte, 32)
	_, _ = rand.Read(secret)
	keyFile := filepath.Join(dir, "network.key")
	if err := os.WriteFile(keyFile, []byte(base64.StdEncoding.EncodeToString(secret)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := coraldht.LoadKeyFile(keyFile)
	if err != nil {
		t.Fatal(err)
	}
	all := append([]netip.Addr{labFar}, labNear...)
	lab := &coralLab{}
	lab.far = startCoreDNS(t, bin, "far", labFar, keyFile, all, map[int]string{1: "far", 2: "far"}, "127.0.0.0/8 0")
	for i, a := range labNear {
		lab.near = append(lab.near, startCoreDNS(t, bin, fmt.Sprintf("near%d", i+1), a, keyFile, all, map[int]string{1: "near", 2: "near"}))
	}
	startProxyNode(t, labFarHTTP, key, "far", all)
	startProxyNode(t, labNearHTTP, key, "near", all)

	rootZone := resolvers.RootZone([]netip.Addr{labRoot}) +
		"nyucd.test. 172800 IN NS ns-127-0-69-1.nyucd.test.\n" +
		"ns-127-0-69-1.nyucd.test. 172800 IN A 127.0.69.1\n" +
		"nyud.test. 172800 IN NS ns-127-0-69-1.nyucd.test.\n"
	lab.root, err = resolvers.StartAuthority(labRoot, resolvers.MustParseZone(".", rootZone))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { lab.root.Close() })

	// Ready: joined and swept; then each server hands out the proxies it
	// should: F (everyone is level 0 to it) both, the near servers the near
	// one (the test client on 127.0.0.1 is level 2 to them).
	for _, p := range append([]*corednsProc{lab.far}, lab.near...) {
		waitFor(t, p.name+" ready", 30*time.Second, func() error {
			resp, err := http.Get("http://" + p.addr.String() + ":8181/ready")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("ready: %s", resp.Status)
			}
			return nil
		})
	}
	want := map[netip.Addr]string{labFar: fmt.Sprint([]netip.Addr{labNearHTTP, labFarHTTP}),
		labNear[0]: fmt.Sprint([]netip.Addr{labNearHTTP}), labNear[1]: fmt.Sprint([]netip.Addr{labNearHTTP})}
	for server, w := range want {
		waitFor(t, "proxies at "+server.String(), 30*time.Second, func() error {
			r, err := ask(server, "probe.example.com.http.l2.l1.l0.nyucd.test", dns.TypeA)
			if err != nil {
				return err
			}
			if got := fmt.Sprint(addrsIn(r)); got != w {
				return fmt.Errorf("answer %s, want %s", got, w)
			}
			return nil
		})
	}
	return lab
}

// TestCoralLab resolves fresh Coralized names through every resolver, with
// QNAME minimisation on and off.
func TestCoralLab(t *testing.T) {
	requireLab(t, resolvers.Kinds...)
	lab := startCoralLab(t)
	for _, qmin := range []bool{true, false} {
		for i, kind := range resolvers.Kinds {
			mode := "qmin"
			base := 11
			if !qmin {
				mode, base = "noqmin", 21
			}
			t.Run(string(kind)+"/"+mode, func(t *testing.T) {
				addr := netip.AddrFrom4([4]byte{127, 0, 62, byte(base + i)})
				ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
				defer cancel()
				r, err := resolvers.Start(ctx, kind, resolvers.Options{Addr: addr, RootHints: []netip.Addr{labRoot}, QNameMinimisation: qmin, Dir: t.TempDir()})
				if err != nil {
					t.Fatal(err)
				}
				defer r.Stop()
				defer func() {
					if t.Failed() {
						t.Logf("--- %s log:\n%s", kind, r.LogTail(80))
					}
				}()
				lab.resolveFresh(t, kind, mode, addr, qmin, r)
			})
		}
	}
}

func (lab *coralLab) resolveFresh(t *testing.T, kind resolvers.Kind, mode string, addr netip.Addr, qmin bool, r *resolvers.Resolver) {
	allowed := []netip.Addr{labNearHTTP, labFarHTTP}
	for n := 1; n <= 4; n++ {
		label := fmt.Sprintf("w%d-%s-%s", n, kind, mode)
		name := label + ".example.com.nyud.test."
		resp, err := ask(addr, name, dns.TypeA)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		got := addrsIn(resp)
		if resp.Rcode != dns.RcodeSuccess || len(got) == 0 {
			t.Fatalf("%s: %s with %v\n%v", name, dns.RcodeToString[resp.Rcode], got, resp)
		}
		for _, a := range got {
			if !slices.Contains(allowed, a) {
				t.Errorf("%s: %v is not a proxy", name, a)
			}
		}
		lab.syncLogs(t, label)
		farCoral, farAlias := splitZones(lab.far.queriesFor(label))
		var nearCoral, nearAlias []string
		for _, p := range lab.near {
			c, a := splitZones(p.queriesFor(label))
			nearCoral, nearAlias = append(nearCoral, c...), append(nearAlias, a...)
		}
		if os.Getenv("LAB_DUMP") != "" {
			for _, p := range append([]*corednsProc{lab.far}, lab.near...) {
				for _, l := range strings.Split(p.logText(), "\n") {
					if strings.Contains(l, addr.String()+":") {
						t.Logf("%s: %s", p.name, l)
					}
				}
			}
		}
		t.Logf("%s → %v; queries in the coral zone: far %d, near %d; in the alias zone: far %d, near %d",
			name, got, len(farCoral), len(nearCoral), len(farAlias), len(nearAlias))
		if !qmin || n == 1 {
			continue
		}
		// Locked: from the second name on, the near cluster answers the
		// Coral zone's part, with the near cluster's proxy.
		if len(farCoral) > 0 {
			t.Errorf("%s: the far server was asked:\n%s", name, strings.Join(farCoral, "\n"))
		}
		if fmt.Sprint(got) != fmt.Sprint([]netip.Addr{labNearHTTP}) {
			t.Errorf("%s: proxies %v, want the near cluster's %v", name, got, labNearHTTP)
		}
		// The alias zone: BIND, Knot and PowerDNS either synthesize the CNAME
		// from the cached DNAME or keep the alias NS set our answers carry.
		// Unbound does neither (it scrubs NS from answers' authority
		// sections) and asks the servers the parent lists, here F, once per
		// name.
		if kind != resolvers.Unbound && len(farAlias) > 0 {
			t.Errorf("%s: the far server was asked in the alias zone:\n%s", name, strings.Join(farAlias, "\n"))
		}
		if kind == resolvers.Unbound && len(farAlias) > 1 {
			t.Errorf("%s: %d alias queries at the far server, want at most one", name, len(farAlias))
		}
	}
	// A burst, as a browser makes it: twenty fresh names at once, each asked
	// for A and AAAA together. Every A answer must carry proxies (there are
	// no IPv6 proxies here, so AAAA is NODATA, never an error).
	var wg sync.WaitGroup
	for n := range 20 {
		label := fmt.Sprintf("b%d-%s-%s", n, kind, mode)
		for _, qt := range []uint16{dns.TypeA, dns.TypeAAAA} {
			wg.Go(func() {
				resp, err := ask(addr, label+".example.com.nyud.test.", qt)
				switch {
				case err != nil:
					t.Errorf("%s %s: %v", label, dns.TypeToString[qt], err)
				case resp.Rcode != dns.RcodeSuccess:
					t.Errorf("%s %s: %s", label, dns.TypeToString[qt], dns.RcodeToString[resp.Rcode])
				case qt == dns.TypeA && len(addrsIn(resp)) == 0:
					t.Errorf("%s A: an empty answer\n%v", label, resp)
				}
			})
		}
	}
	wg.Wait()
	if l := strings.ToLower(r.Log()); strings.Contains(l, "lame") {
		t.Errorf("%s logged a lame delegation:\n%s", kind, grepLines(r.Log(), "lame"))
	}
}

// TestCoralServersDirect talks to a real bin/coredns running coral: TCP,
// other classes, EDNS versions, garbage and oversized names, and the
// metrics it exports.
func TestCoralServersDirect(t *testing.T) {
	requireLab(t)
	startCoralLab(t)
	far := netip.AddrPortFrom(labFar, 53).String()
	const proxyName = "www.example.com.http.l2.l1.l0.nyucd.test."

	// TCP.
	c := &dns.Client{Net: "tcp", Timeout: 3 * time.Second}
	m := new(dns.Msg)
	m.SetQuestion(proxyName, dns.TypeA)
	r, _, err := c.Exchange(m, far)
	if err != nil || r.Rcode != dns.RcodeSuccess || len(addrsIn(r)) == 0 {
		t.Errorf("TCP: %v %v", err, r)
	}

	udp := &dns.Client{Timeout: 3 * time.Second}
	for _, tc := range []struct {
		name  string
		msg   func() *dns.Msg
		rcode int
	}{
		{"class CHAOS", func() *dns.Msg {
			m := new(dns.Msg)
			m.SetQuestion(proxyName, dns.TypeTXT)
			m.Question[0].Qclass = dns.ClassCHAOS
			return m
		}, dns.RcodeRefused},
		{"EDNS version 1", func() *dns.Msg {
			m := new(dns.Msg)
			m.SetQuestion(proxyName, dns.TypeA)
			m.SetEdns0(1232, false)
			m.IsEdns0().SetVersion(1)
			return m
		}, dns.RcodeBadVers},
		{"two OPT records", func() *dns.Msg {
			m := new(dns.Msg)
			m.SetQuestion(proxyName, dns.TypeA)
			m.SetEdns0(1232, false)
			m.Extra = append(m.Extra, m.Extra[0])
			return m
		}, dns.RcodeFormatError},
		{"ANY", func() *dns.Msg {
			m := new(dns.Msg)
			m.SetQuestion("nyud.test.", dns.TypeANY)
			return m
		}, dns.RcodeSuccess},
	} {
		r, _, err := udp.Exchange(tc.msg(), far)
		if err != nil {
			t.Errorf("%s: %v", tc.name, err)
			continue
		}
		if r.Rcode != tc.rcode {
			t.Errorf("%s: rcode %s, want %s", tc.name, dns.RcodeToString[r.Rcode], dns.RcodeToString[tc.rcode])
		}
	}

	// Raw datagrams no parser accepts: garbage, a 320-octet name, two
	// questions. Whatever the server says (or not), it must keep answering.
	long := []byte{0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0}
	for range 5 {
		long = append(long, 63)
		long = append(long, []byte(strings.Repeat("a", 63))...)
	}
	long = append(long, 0, 0, 1, 0, 1)
	two, _ := (&dns.Msg{Question: []dns.Question{{Name: proxyName, Qtype: dns.TypeA, Qclass: dns.ClassINET}, {Name: proxyName, Qtype: dns.TypeAAAA, Qclass: dns.ClassINET}}}).Pack()
	for _, pkt := range [][]byte{[]byte("\x00\x01garbage"), long, two, make([]byte, 4000)} {
		conn, err := net.Dial("udp", far)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = conn.Write(pkt)
		_ = conn.SetReadDeadline(time.Now().Add(300 * time.Millisecond))
		buf := make([]byte, 4096)
		if n, err := conn.Read(buf); err == nil {
			var resp dns.Msg
			if resp.Unpack(buf[:n]) == nil && resp.Rcode == dns.RcodeSuccess && len(resp.Answer) > 0 {
				t.Errorf("a malformed datagram got an answer: %v", &resp)
			}
		}
		conn.Close()
	}
	if r, err := ask(labFar, proxyName, dns.TypeA); err != nil || len(addrsIn(r)) == 0 {
		t.Fatalf("server stopped answering after bad datagrams: %v %v", err, r)
	}

	// Metrics: a referral was counted, the sweep saw the near proxy at level
	// 2, and the node reports having joined.
	if _, err := ask(labNear[0], "l2.l1.l0.nyucd.test", dns.TypeA); err != nil {
		t.Fatal(err)
	}
	// The sweep that made the plugin ready may have run before the proxy
	// nodes joined; the gauge follows within a check_interval or two.
	waitFor(t, "live proxy gauge", 10*time.Second, func() error {
		if !strings.Contains(scrape(t, labNear[0]), `coredns_coral_live_proxies{level="2",node="127.0.62.1:4000"} 1`) {
			return fmt.Errorf("no live level-2 proxy in the metrics yet")
		}
		return nil
	})
	body := scrape(t, labNear[0])
	for _, want := range []string{
		`coredns_coral_queries_total{kind="referral",level="2",server="dns://127.0.62.1:53",view="",zone="nyucd.test."}`,
		`coredns_coral_dht_joined{node="127.0.62.1:4000"} 1`,
		`coredns_coral_probes_total{outcome="ok"}`,
		`coredns_coral_dht_messages_total{direction="in",kind="request",node="127.0.62.1:4000",type="ping"}`,
	} {
		if !strings.Contains(body, want) {
			t.Errorf("metrics lack %s", want)
		}
	}
	if t.Failed() {
		t.Logf("metrics:\n%s", grepLines(body, "coredns_coral_"))
	}
}

func scrape(t *testing.T, a netip.Addr) string {
	t.Helper()
	resp, err := http.Get("http://" + a.String() + ":9153/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) && !strings.HasPrefix(l, "#") {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}

// restarting is in the line CoreDNS logs when it restarts a DSHT node in
// place ("... restarting the DSHT node", or "... restarting the node in
// place on the same socket").
const restarting = "restarting the "

// TestCoralReload reloads a running server (SIGUSR1) twice: with the node's
// settings unchanged, and with them changed. The DSHT node must survive the
// first (same socket, still joined, its peers still known) and be restarted
// in place by the second, and the server must answer throughout.
func TestCoralReload(t *testing.T) {
	requireLab(t)
	lab := startCoralLab(t)
	p := lab.near[0]
	reload := func(edit func(string) string, want string) {
		t.Helper()
		b, err := os.ReadFile(p.corefile)
		if err != nil {
			t.Fatal(err)
		}
		before := strings.Count(p.logText(), want)
		if err := os.WriteFile(p.corefile, []byte(edit(string(b))), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := p.proc.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		waitFor(t, "reload of "+p.name, 10*time.Second, func() error {
			if strings.Count(p.logText(), want) <= before {
				return fmt.Errorf("log has no new %q", want)
			}
			return nil
		})
		r, err := ask(p.addr, "www.example.com.http.l2.l1.l0.nyucd.test", dns.TypeA)
		if err != nil || len(addrsIn(r)) == 0 {
			t.Fatalf("no answer after the reload: %v %v", err, r)
		}
	}
	// Same node settings, another answer count: the node is kept.
	reload(func(s string) string {
		return strings.Replace(s, "live_within 5s", "live_within 5s\n        answers 1", 1)
	}, "Reloading complete")
	if strings.Contains(p.logText(), restarting) || strings.Contains(p.logText(), "address already in use") {
		t.Errorf("an unchanged node was restarted:\n%s", p.proc.LogTail(20))
	}
	waitFor(t, "one proxy per answer", 5*time.Second, func() error {
		r, err := ask(p.addr, "x.example.com.http.l2.l1.l0.nyucd.test", dns.TypeA)
		if err != nil {
			return err
		}
		if n := len(addrsIn(r)); n != 1 {
			return fmt.Errorf("%d proxies", n)
		}
		return nil
	})
	body := scrape(t, p.addr)
	if !strings.Contains(body, `coredns_coral_dht_joined{node="127.0.62.1:4000"} 1`) {
		t.Errorf("node not joined after the reload:\n%s", grepLines(body, "dht_joined"))
	}
	// Changed node settings (the levels): the node restarts on its socket.
	reload(func(s string) string {
		return strings.Replace(s, "check_interval 1s", "check_interval 1s\n        levels 60ms 20ms 5ms", 1)
	}, restarting)
	if strings.Contains(p.logText(), "address already in use") {
		t.Errorf("the restarted node could not bind:\n%s", p.proc.LogTail(20))
	}
}
