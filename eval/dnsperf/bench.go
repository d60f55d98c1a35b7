package main

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/eval/internal/evalrun"
	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
	"github.com/miekg/dns"
)

// The zones. coral's and file's have names of the same length so that every
// name in their answers is too; whoami's answers are its own (the client's
// address and port), so its name's length matters less.
const (
	coralZone  = "nyucd.test."
	staticZone = "files.test."
	// whoamiZone is answered by CoreDNS's whoami plugin, in a server of its
	// own on Port+1: the floor, the least a plugin can do for an answer.
	whoamiZone = "whoami.test."
	// clusterName is the cluster the coral node and the DSHT nodes are
	// pinned to at levels 1 and 2.
	clusterName = "bench"
	dhtPort     = 4000
	metricsPort = 9153
	pprofPort   = 6053
)

// The DSHT nodes this command runs next to the coral node.
var nodeServices = []coraldht.Services{
	coraldht.ServiceHTTP, coraldht.ServiceHTTP, coraldht.ServiceHTTP,
	coraldht.ServiceDNS, coraldht.ServiceDNS,
}

// What a coral answer carries: the plugin's defaults (answers 2,
// nameservers 3).
const (
	coralAnswers     = 2
	coralNameservers = 3
)

// target is one zone under test.
type target struct {
	name      string // coral, file or whoami
	zone      string
	addr      netip.AddrPort // CoreDNS's server for the zone
	queryFile string
	sample    string // a query name for the shape checks
}

// qname is the i-th query name of a zone: a Coralized name at level 2. The
// numbers are zero-padded to a fixed width so that every answer has the
// same size (the answers are not compressed; see below).
func qname(zone string, i int) string {
	return fmt.Sprintf("w%05d.example.com.http.l2.l1.l0.%s", i, zone)
}

// bench is the running set-up: CoreDNS, the DSHT nodes, the files.
type bench struct {
	p        params
	dir      string
	server   netip.Addr
	client   netip.Addr
	dnsAddr  netip.AddrPort
	corefile string
	targets  []*target // coral, file, whoami
	expected int       // both answers' size, uncompressed

	coredns *proc.Process
	nodes   []*coraldht.Node
	cancel  context.CancelFunc

	commands []string
}

// addrPlus returns a with its last byte increased by i.
func addrPlus(a netip.Addr, i int) netip.Addr {
	b := a.As4()
	b[3] += byte(i)
	return netip.AddrFrom4(b)
}

// nsHost is the name coral gives a name server at a (see the plugin's
// README: ns-192-0-2-1.Z).
func nsHost(a netip.Addr, zone string) string {
	return "ns-" + strings.ReplaceAll(a.String(), ".", "-") + "." + zone
}

// nameServers are the addresses in coral's NS sets: the coral node and the
// DSHT nodes that advertise DNS.
func (b *bench) nameServers() []netip.Addr {
	out := []netip.Addr{b.server}
	for i, s := range nodeServices {
		if s.Has(coraldht.ServiceDNS) {
			out = append(out, addrPlus(b.server, i+1))
		}
	}
	return out
}

func newBench(p params) (*bench, error) {
	server, err := netip.ParseAddr(p.Server)
	if err != nil || !server.Is4() || !server.IsLoopback() {
		return nil, fmt.Errorf("-server %q: want an IPv4 loopback address (127.0.0.0/8)", p.Server)
	}
	client, err := netip.ParseAddr(p.Client)
	if err != nil || !client.Is4() || !client.IsLoopback() {
		return nil, fmt.Errorf("-client %q: want an IPv4 loopback address (127.0.0.0/8)", p.Client)
	}
	if server.As4()[3] == 0 || int(server.As4()[3])+len(nodeServices) > 254 {
		return nil, fmt.Errorf("-server %v: need %d more addresses after it in its /24", server, len(nodeServices))
	}
	sp, _ := server.Prefix(24)
	if sp.Contains(client) {
		return nil, fmt.Errorf("-client %v: put it in a /24 of its own, not the servers' %v", client, sp)
	}
	if p.Port < 1 || p.Port+1 > 65535 || p.Port+1 >= dhtPort && p.Port <= dhtPort || p.Port+1 >= metricsPort && p.Port <= metricsPort || p.Port+1 >= pprofPort && p.Port <= pprofPort {
		return nil, fmt.Errorf("-port %d: want 1..65534, it and the next (whoami's) clear of ports %d, %d and %d", p.Port, dhtPort, metricsPort, pprofPort)
	}
	if p.Names < 1 || p.Names > 100000 {
		return nil, fmt.Errorf("-names %d: want 1 to 100000 (the names have a fixed width)", p.Names)
	}
	dir, err := os.MkdirTemp("", "coral-dnsperf-")
	if err != nil {
		return nil, err
	}
	b := &bench{p: p, dir: dir, server: server, client: client, dnsAddr: netip.AddrPortFrom(server, uint16(p.Port))}
	for _, t := range []*target{
		{name: "coral", zone: coralZone, addr: b.dnsAddr},
		{name: "file", zone: staticZone, addr: b.dnsAddr},
		{name: "whoami", zone: whoamiZone, addr: b.whoamiAddr()},
	} {
		t.queryFile = filepath.Join(dir, t.name+".queries")
		t.sample = qname(t.zone, 0)
		var sb strings.Builder
		for i := range p.Names {
			fmt.Fprintf(&sb, "%s A\n", qname(t.zone, i))
		}
		if err := os.WriteFile(t.queryFile, []byte(sb.String()), 0o644); err != nil {
			b.close()
			return nil, err
		}
		b.targets = append(b.targets, t)
	}
	zoneFile := filepath.Join(dir, "files.test.zone")
	labels, err := b.staticNSLabels()
	if err != nil {
		b.close()
		return nil, err
	}
	b.expected = b.coralModel(qname(coralZone, 0)).Len()
	if err := os.WriteFile(zoneFile, []byte(b.staticZoneText(labels)), 0o644); err != nil {
		b.close()
		return nil, err
	}
	b.corefile = b.corefileText(zoneFile)
	if err := labconf.WriteFile(filepath.Join(dir, "Corefile"), b.corefile); err != nil {
		b.close()
		return nil, err
	}
	return b, nil
}

// whoamiAddr is where whoami answers: CoreDNS's address, the next port.
func (b *bench) whoamiAddr() netip.AddrPort {
	return netip.AddrPortFrom(b.server, uint16(b.p.Port+1))
}

// corefileText is the configuration: coral's and file's zones on one
// server, whoami's on the next port, the same options in every block (bind,
// prometheus, errors), no cache.
func (b *bench) corefileText(zoneFile string) string {
	metrics := labconf.D("prometheus", fmt.Sprintf("%s:%d", b.server, metricsPort))
	coral := labconf.CoralPlugin{
		Zone:       strings.TrimSuffix(coralZone, "."),
		Node:       labconf.Node{Listen: netip.AddrPortFrom(b.server, dhtPort), Clusters: map[int]string{1: clusterName, 2: clusterName}},
		Probe:      "tcp",
		ProbeCache: "1h",
	}
	return labconf.Corefile("",
		labconf.D(fmt.Sprintf("%s:%d", strings.TrimSuffix(coralZone, "."), b.p.Port)).With(
			labconf.D("bind", b.server),
			coral.Directive(),
			metrics,
			labconf.If(b.p.Profile != "", labconf.D("pprof", fmt.Sprintf("%s:%d", b.server, pprofPort))),
			labconf.D("errors"),
		).Commented("coral: the plugin under test. probe tcp is the default; probe_cache is\nlong so that no background refresh falls inside the measurement."),
		labconf.D(fmt.Sprintf("%s:%d", strings.TrimSuffix(staticZone, "."), b.p.Port)).With(
			labconf.D("bind", b.server),
			labconf.D("file", zoneFile),
			metrics,
			labconf.D("errors"),
		).Commented("The baseline: a static zone whose answers have the same size."),
		labconf.D(fmt.Sprintf("%s:%d", strings.TrimSuffix(whoamiZone, "."), b.whoamiAddr().Port())).With(
			labconf.D("bind", b.server),
			labconf.D("whoami"),
			metrics,
			labconf.D("errors"),
		).Commented("The floor: whoami answers from the query alone (the client's address\nand port), on a server of its own."),
	)
}

// The answers are sent uncompressed: CoreDNS (request.Scrub, through
// dns.Msg.Truncate) turns compression off for any response that fits the
// client's buffer without it, and these fit in 512 bytes. So every name
// counts at its full length, and the sizes are matched by hand:
//
//	coral: 2 A (owner: the query name), 3 NS (owner: l2.l1.l0.nyucd.test,
//	       ns-127-0-80-1.nyucd.test …), 3 glue A (owner: the NS names)
//	file:  5 A (owner: the query name), 3 NS (owner: files.test,
//	       ns-80-1.files.test …)
//
// The file plugin adds no glue for an answer's authority section, so the
// glue's three A records move into the answer, where they carry the longer
// query name; the static NS names are shortened by exactly the difference.
// Both then have the same 8 records of the same types and the same bytes.

// coralModel is the answer coral gives the client for name: its proxies and
// the level-2 zone's NS set with glue.
func (b *bench) coralModel(name string) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.Response, m.Authoritative = true, true
	for i := range coralAnswers {
		m.Answer = append(m.Answer, aRR(name, addrPlus(b.server, i+1), 60))
	}
	for _, a := range b.nameServers() {
		h := nsHost(a, coralZone)
		m.Ns = append(m.Ns, &dns.NS{Hdr: dns.RR_Header{Name: "l2.l1.l0." + coralZone, Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: 3600}, Ns: h})
		m.Extra = append(m.Extra, aRR(h, a, 3600))
	}
	return m
}

// staticModel is the answer the file plugin gives for name, with the given
// NS host labels.
func (b *bench) staticModel(name string, labels []string) *dns.Msg {
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	m.Response, m.Authoritative = true, true
	for i := range coralAnswers + coralNameservers {
		m.Answer = append(m.Answer, aRR(name, addrPlus(b.server, i+1), 60))
	}
	for _, l := range labels {
		m.Ns = append(m.Ns, &dns.NS{Hdr: dns.RR_Header{Name: staticZone, Rrtype: dns.TypeNS, Class: dns.ClassINET, Ttl: 3600}, Ns: l + "." + staticZone})
	}
	return m
}

func aRR(owner string, a netip.Addr, ttl uint32) dns.RR {
	return &dns.A{Hdr: dns.RR_Header{Name: owner, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: ttl}, A: a.AsSlice()}
}

// staticNSLabel names name server a in exactly n octets (n ≥ 3): the end
// of ns-127-0-80-1 ("ns-80-1" for 7), or it padded with zeros.
func staticNSLabel(a netip.Addr, n int) string {
	full := "ns-" + strings.ReplaceAll(a.String(), ".", "-")
	if len(full) >= n {
		return "ns" + full[len(full)-(n-2):]
	}
	return "ns" + strings.Repeat("0", n-len(full)) + full[2:]
}

// staticNSLabels picks the static zone's NS host labels so that its answers
// have exactly the length of coral's, uncompressed.
func (b *bench) staticNSLabels() ([]string, error) {
	ns := b.nameServers()
	want := b.coralModel(qname(coralZone, 0)).Len()
	name := qname(staticZone, 0)
	lens := make([]int, len(ns))
	labels := make([]string, len(ns))
	for i, a := range ns {
		lens[i] = 3
		labels[i] = staticNSLabel(a, 3)
	}
	diff := want - b.staticModel(name, labels).Len()
	if diff < 0 {
		return nil, fmt.Errorf("the static answer is %d bytes longer than coral's even with 3-octet NS labels: pick a -server address with more digits (127.0.80.1)", -diff)
	}
	for i, a := range ns {
		lens[i] += diff / len(ns)
		if i < diff%len(ns) {
			lens[i]++
		}
		if lens[i] > 63 {
			return nil, fmt.Errorf("static NS label of %d octets: too long", lens[i])
		}
		labels[i] = staticNSLabel(a, lens[i])
	}
	if got := b.staticModel(name, labels).Len(); got != want {
		return nil, fmt.Errorf("static answer model is %d bytes, coral's %d", got, want)
	}
	return labels, nil
}

// staticZoneText is files.test: the SOA, the NS set with its addresses, and
// the five A records under every query name (or a wildcard).
func (b *bench) staticZoneText(labels []string) string {
	var sb strings.Builder
	ns := b.nameServers()
	fmt.Fprintf(&sb, "$ORIGIN %s\n$TTL 3600\n", staticZone)
	fmt.Fprintf(&sb, "@ IN SOA %s hostmaster 1 3600 600 86400 30\n", labels[0])
	for _, l := range labels {
		fmt.Fprintf(&sb, "@ IN NS %s\n", l)
	}
	for i, l := range labels {
		fmt.Fprintf(&sb, "%s IN A %s\n", l, ns[i])
	}
	var rdata []string
	for i := range coralAnswers + coralNameservers {
		rdata = append(rdata, addrPlus(b.server, i+1).String())
	}
	owners := []string{"*"}
	if b.p.Explicit {
		owners = owners[:0]
		for i := range b.p.Names {
			owners = append(owners, strings.TrimSuffix(qname(staticZone, i), "."+staticZone))
		}
	}
	for _, o := range owners {
		for _, a := range rdata {
			fmt.Fprintf(&sb, "%s 60 IN A %s\n", o, a)
		}
	}
	return sb.String()
}

// start runs CoreDNS and the DSHT nodes.
func (b *bench) start(ctx context.Context) error {
	out, err := exec.CommandContext(ctx, b.p.CoreDNS, "-plugins").CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s -plugins: %v: %s", b.p.CoreDNS, err, out)
	}
	have := map[string]bool{}
	for _, l := range strings.Fields(string(out)) {
		have[strings.TrimPrefix(l, "dns.")] = true
	}
	for _, pl := range []string{"coral", "file", "whoami", "prometheus", "pprof"} {
		if !have[pl] {
			return fmt.Errorf("%s lacks the %s plugin", b.p.CoreDNS, pl)
		}
	}
	for _, l := range []string{b.dnsAddr.String(), b.whoamiAddr().String(), fmt.Sprintf("%v:%d", b.server, dhtPort)} {
		c, err := net.ListenPacket("udp", l)
		if err != nil {
			return fmt.Errorf("UDP %s is taken (another run?): %v", l, err)
		}
		c.Close()
	}

	// Its own process group, so that it can be stopped with its children;
	// killed if this process dies without cleaning up.
	b.coredns, err = proc.Start([]string{b.p.CoreDNS, "-conf", filepath.Join(b.dir, "Corefile")},
		proc.Options{Name: "CoreDNS", Dir: b.dir, Log: filepath.Join(b.dir, "coredns.log"), TailLines: 400})
	if err != nil {
		return err
	}
	b.commands = append(b.commands, strings.Join(b.coredns.Argv, " "))

	// CoreDNS answers the static zone and whoami as soon as it is up.
	if err := evalrun.WaitFor(ctx, "CoreDNS to answer", 15*time.Second, b.alive, func() error {
		for _, t := range b.targets[1:] {
			if _, _, err := b.query(t.addr, t.sample); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		return err
	}

	// The DSHT nodes join through the coral node.
	nctx, cancel := context.WithCancel(context.Background())
	b.cancel = cancel
	boot := netip.AddrPortFrom(b.server, dhtPort)
	for i, svc := range nodeServices {
		cfg := coraldht.DefaultConfig()
		cfg.Services = svc
		cfg.Pins = map[int]string{1: clusterName, 2: clusterName}
		cfg.HintHops = 0
		addr := netip.AddrPortFrom(addrPlus(b.server, i+1), dhtPort)
		tr, err := coraldht.ListenUDP(addr.String())
		if err != nil {
			return fmt.Errorf("DSHT node %v: %w", addr, err)
		}
		n, err := coraldht.NewNode(cfg, tr)
		if err != nil {
			tr.Close()
			return err
		}
		b.nodes = append(b.nodes, n)
		go func() {
			for nctx.Err() == nil {
				bctx, bcancel := context.WithTimeout(nctx, 5*time.Second)
				err := n.Bootstrap(bctx, boot)
				bcancel()
				if err == nil || errors.Is(err, coraldht.ErrClosed) {
					return
				}
				select {
				case <-nctx.Done():
				case <-time.After(500 * time.Millisecond):
				}
			}
		}()
	}
	return nil
}

// close stops everything start started and removes the files.
func (b *bench) close() {
	if b.cancel != nil {
		b.cancel()
	}
	for _, n := range b.nodes {
		n.Close()
	}
	if b.coredns != nil {
		_ = b.coredns.Stop(5 * time.Second)
	}
	if b.dir != "" {
		os.RemoveAll(b.dir)
	}
}

// alive reports an error if CoreDNS has exited.
func (b *bench) alive() error {
	if b.coredns == nil {
		return nil
	}
	return b.coredns.Exited()
}

// query asks CoreDNS at addr for name A from the client address, as dnsperf
// does (no EDNS, RD set), and returns the response and its size on the
// wire. A truncated response is what coral sends a source that has not
// proven its address when the answer needs a probe (the plugin README's
// probe gate): a resolver asks again over TCP, which proves it, and so
// does query; it then asks over UDP again, as that resolver's next query
// would come, and returns that response.
func (b *bench) query(addr netip.AddrPort, name string) (*dns.Msg, int, error) {
	r, n, err := b.queryUDP(addr, name)
	if err != nil || !r.Truncated {
		return r, n, err
	}
	c := dns.Client{Net: "tcp", Timeout: 5 * time.Second, Dialer: &net.Dialer{LocalAddr: net.TCPAddrFromAddrPort(netip.AddrPortFrom(b.client, 0))}}
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	if _, _, err := c.Exchange(m, addr.String()); err != nil {
		return nil, 0, fmt.Errorf("over TCP after a truncated response: %w", err)
	}
	return b.queryUDP(addr, name)
}

// queryUDP is query's exchange over UDP.
func (b *bench) queryUDP(addr netip.AddrPort, name string) (*dns.Msg, int, error) {
	conn, err := net.DialUDP("udp", net.UDPAddrFromAddrPort(netip.AddrPortFrom(b.client, 0)), net.UDPAddrFromAddrPort(addr))
	if err != nil {
		return nil, 0, err
	}
	defer conn.Close()
	m := new(dns.Msg)
	m.SetQuestion(name, dns.TypeA)
	wire, err := m.Pack()
	if err != nil {
		return nil, 0, err
	}
	if _, err := conn.Write(wire); err != nil {
		return nil, 0, err
	}
	_ = conn.SetReadDeadline(time.Now().Add(time.Second))
	buf := make([]byte, 65535)
	n, err := conn.Read(buf)
	if err != nil {
		return nil, 0, err
	}
	r := new(dns.Msg)
	if err := r.Unpack(buf[:n]); err != nil {
		return nil, 0, err
	}
	if r.Id != m.Id {
		return nil, 0, fmt.Errorf("response ID %d, want %d", r.Id, m.Id)
	}
	return r, n, nil
}

// shapeOf counts a response's records by section and type.
func shapeOf(r *dns.Msg) string {
	section := func(rrs []dns.RR) string {
		counts := map[string]int{}
		var order []string
		for _, rr := range rrs {
			t := dns.TypeToString[rr.Header().Rrtype]
			if counts[t] == 0 {
				order = append(order, t)
			}
			counts[t]++
		}
		var parts []string
		for _, t := range order {
			parts = append(parts, fmt.Sprintf("%d %s", counts[t], t))
		}
		if len(parts) == 0 {
			return "-"
		}
		return strings.Join(parts, "+")
	}
	return fmt.Sprintf("%s, answer %s, authority %s, additional %s",
		dns.RcodeToString[r.Rcode], section(r.Answer), section(r.Ns), section(r.Extra))
}

// coralComplete checks that a coral answer carries every record it should:
// the proxies, and an NS set of the level zone with glue.
func coralComplete(r *dns.Msg) error {
	a := 0
	for _, rr := range r.Answer {
		if rr.Header().Rrtype == dns.TypeA {
			a++
		}
	}
	ns := 0
	for _, rr := range r.Ns {
		if rr.Header().Rrtype == dns.TypeNS {
			ns++
		}
	}
	glue := 0
	for _, rr := range r.Extra {
		if rr.Header().Rrtype == dns.TypeA {
			glue++
		}
	}
	if r.Rcode != dns.RcodeSuccess || a != coralAnswers || ns != coralNameservers || glue != coralNameservers {
		return fmt.Errorf("answer is %s; want %d A, %d NS, %d glue", shapeOf(r), coralAnswers, coralNameservers, coralNameservers)
	}
	return nil
}

// whoamiComplete checks that a whoami answer is what the plugin gives a
// client at addr over UDP: NOERROR, no answer, and in the additional
// section the client's address (A) and its port (SRV, under _udp.NAME).
func whoamiComplete(r *dns.Msg, name string, client netip.Addr) error {
	if r.Rcode != dns.RcodeSuccess || len(r.Answer) != 0 || len(r.Ns) != 0 || len(r.Extra) != 2 {
		return fmt.Errorf("whoami's answer is %s; want no answer and additional A+SRV", shapeOf(r))
	}
	a, ok := r.Extra[0].(*dns.A)
	if !ok || a.Hdr.Name != name || !a.A.Equal(client.AsSlice()) {
		return fmt.Errorf("whoami's first additional record is %v; want %s A %v", r.Extra[0], name, client)
	}
	srv, ok := r.Extra[1].(*dns.SRV)
	if !ok || srv.Hdr.Name != "_udp."+name || srv.Port == 0 {
		return fmt.Errorf("whoami's second additional record is %v; want _udp.%s SRV with the client's port", r.Extra[1], name)
	}
	return nil
}

// settle waits until coral's answers are complete, which also has the
// client's /24 classified (the first query waits for the probe).
func (b *bench) settle(ctx context.Context) error {
	return evalrun.WaitFor(ctx, "coral's answers to carry every proxy and name server (DSHT nodes joining, first sweep)", b.p.Settle, b.alive, func() error {
		r, _, err := b.query(b.targets[0].addr, b.targets[0].sample)
		if err != nil {
			return err
		}
		return coralComplete(r)
	})
}

// shape queries a zone's sample name.
func (b *bench) shape(t *target) (responseShape, *dns.Msg, error) {
	r, n, err := b.query(t.addr, t.sample)
	if err != nil {
		return responseShape{}, nil, err
	}
	return responseShape{Zone: t.zone, Query: t.sample + " A", Bytes: n, Answer: len(r.Answer), Authority: len(r.Ns),
		Additional: len(r.Extra), Shape: shapeOf(r), Text: r.String()}, r, nil
}

// --- metrics -------------------------------------------------------------

// sample is one Prometheus sample.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

type metrics []sample

// scrape reads CoreDNS's metrics.
func (b *bench) scrape() (metrics, error) {
	c := http.Client{Timeout: 5 * time.Second}
	resp, err := c.Get(fmt.Sprintf("http://%v:%d/metrics", b.server, metricsPort))
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("metrics: %s", resp.Status)
	}
	return parseMetrics(resp.Body)
}

// parseMetrics reads the Prometheus text format (samples only).
func parseMetrics(r io.Reader) (metrics, error) {
	var out metrics
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		s := sample{labels: map[string]string{}}
		rest := line
		if i := strings.IndexAny(line, "{ "); i >= 0 && line[i] == '{' {
			s.name = line[:i]
			rest = line[i+1:]
			for {
				rest = strings.TrimLeft(rest, ", ")
				if strings.HasPrefix(rest, "}") {
					rest = rest[1:]
					break
				}
				eq := strings.Index(rest, "=\"")
				if eq < 0 {
					return nil, fmt.Errorf("metrics: bad labels in %q", line)
				}
				key := rest[:eq]
				rest = rest[eq+2:]
				var val strings.Builder
				i := 0
				for ; i < len(rest) && rest[i] != '"'; i++ {
					if rest[i] == '\\' && i+1 < len(rest) {
						i++
						switch rest[i] {
						case 'n':
							val.WriteByte('\n')
						default:
							val.WriteByte(rest[i])
						}
						continue
					}
					val.WriteByte(rest[i])
				}
				if i >= len(rest) {
					return nil, fmt.Errorf("metrics: unterminated label in %q", line)
				}
				s.labels[key] = val.String()
				rest = rest[i+1:]
			}
		} else {
			name, r, _ := strings.Cut(line, " ")
			s.name, rest = name, r
		}
		f := strings.Fields(rest)
		if len(f) == 0 {
			return nil, fmt.Errorf("metrics: no value in %q", line)
		}
		v, err := strconv.ParseFloat(f[0], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics: value in %q: %v", line, err)
		}
		s.value = v
		out = append(out, s)
	}
	return out, sc.Err()
}

// sum adds the samples of name whose labels include match ("k", "v", …).
func (m metrics) sum(name string, match ...string) float64 {
	total := 0.0
	for _, s := range m {
		if s.name != name {
			continue
		}
		ok := true
		for i := 0; i+1 < len(match); i += 2 {
			if s.labels[match[i]] != match[i+1] {
				ok = false
				break
			}
		}
		if ok {
			total += s.value
		}
	}
	return total
}

// by sums name's samples per value of label.
func (m metrics) by(name, label string, match ...string) map[string]float64 {
	out := map[string]float64{}
	for _, s := range m {
		if s.name != name {
			continue
		}
		ok := true
		for i := 0; i+1 < len(match); i += 2 {
			if s.labels[match[i]] != match[i+1] {
				ok = false
				break
			}
		}
		if ok {
			out[s.labels[label]] += s.value
		}
	}
	return out
}

// deltaBy is after − before per label value, zero values dropped.
func deltaBy(before, after map[string]float64) map[string]float64 {
	out := map[string]float64{}
	for k, v := range after {
		if d := v - before[k]; d != 0 {
			out[k] = d
		}
	}
	for k, v := range before {
		if _, ok := after[k]; !ok && v != 0 {
			out[k] = -v
		}
	}
	return out
}

// --- CPU accounting --------------------------------------------------------

// cpuSnap is the CPU time used so far, in seconds.
type cpuSnap struct {
	coredns float64 // the CoreDNS process, all threads
	self    float64 // this process: the DSHT nodes, scraping
	busy    float64 // the whole machine, not idle
	rcvbuf  float64 // UDP datagrams dropped at full receive buffers, machine-wide
}

func (b *bench) cpu() cpuSnap {
	var s cpuSnap
	s.coredns = evalrun.ProcessCPU(b.coredns.Pid())
	s.self = evalrun.SelfCPU()
	s.busy = evalrun.MachineBusy()
	if raw, err := os.ReadFile("/proc/net/snmp"); err == nil {
		var head []string
		for _, line := range strings.Split(string(raw), "\n") {
			f := strings.Fields(line)
			if len(f) == 0 || f[0] != "Udp:" {
				continue
			}
			if head == nil {
				head = f
				continue
			}
			for i, name := range head {
				if name == "RcvbufErrors" && i < len(f) {
					s.rcvbuf, _ = strconv.ParseFloat(f[i], 64)
				}
			}
		}
	}
	return s
}
