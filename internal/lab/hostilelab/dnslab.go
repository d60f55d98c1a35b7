//go:build linux

package hostilelab

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/netns"
	"github.com/coralcdn/coral/internal/lab/proc"
	"github.com/miekg/dns"
	"golang.org/x/net/ipv4"
)

// The DNS side of the lab: the real bin/coredns attacked by forged
// sources and forged probe replies. Its probes matter here, and a trace
// never leaves loopback, so it runs in network namespaces
// (internal/lab/netns), all on one link, 198.18.0.0/16:
//
//	198.18.0.10   dns: bin/coredns with coral (probe auto, proximity on,
//	              ecs trusting the canary), its route to 198.19.0.0/16
//	              through the sink
//	198.18.0.1    sink: where everything sent to the forged sources
//	              (198.19.0.0/16, one /24 each) ends; nftables counts it
//	198.18.9.66   attacker: forges UDP sources and echo replies (raw sockets)
//	198.18.5.53   canary: a resolver with DNS cookies, falling back to TCP on
//	              a truncated response, asking for a fresh client subnet
//	              (ECS) each time, so that every query needs a new mapping
//	198.18.6.53…  silent resolvers: drop echo requests and TCP to port 53
//	198.18.7.53   control: a resolver that answers both

// DNS lab addresses.
var (
	dnsServerAddr = netip.MustParseAddr("198.18.0.10")
	dnsSinkAddr   = netip.MustParseAddr("198.18.0.1")
	dnsAttacker   = netip.MustParseAddr("198.18.9.66")
	dnsCanaryAddr = netip.MustParseAddr("198.18.5.53")
	dnsControl    = netip.MustParseAddr("198.18.7.53")
	// ForgedNet is where forged sources come from: nothing is there, the
	// sink swallows what the server sends them.
	ForgedNet = netip.MustParsePrefix("198.19.0.0/16")
)

// silentAddr is the i-th silent resolver, each in a /24 of its own.
func silentAddr(i int) netip.Addr { return netip.AddrFrom4([4]byte{198, 18, byte(6 + 10*i), 53}) }

const dnsSilentResolvers = 3

// DNSConfig describes a DNS lab.
type DNSConfig struct {
	CoreDNS string // bin/coredns
	Dir     string // configuration and logs (it must exist)
	Logf    func(format string, args ...any)
}

// DNSLab is a running DNS lab.
type DNSLab struct {
	cfg     DNSConfig
	lab     *netns.Lab
	hosts   map[string]*netns.Host
	coredns *proc.Process
	forger  *ipv4.RawConn
	raw     net.PacketConn
}

func (l *DNSLab) logf(format string, args ...any) {
	if l.cfg.Logf != nil {
		l.cfg.Logf(format, args...)
	}
}

// DNSAvailable says why the DNS lab cannot run here.
func DNSAvailable() error { return netns.Available(true) }

// StartDNS builds the namespaces, starts bin/coredns and waits until it
// answers.
func StartDNS(ctx context.Context, cfg DNSConfig) (_ *DNSLab, err error) {
	lab, err := netns.New(netns.Options{Subnet: netip.MustParsePrefix("198.18.0.0/16"), Logf: cfg.Logf})
	if err != nil {
		return nil, err
	}
	l := &DNSLab{cfg: cfg, lab: lab, hosts: map[string]*netns.Host{}}
	defer func() {
		if err != nil {
			l.Stop()
		}
	}()
	add := func(name string, a netip.Addr) error {
		h, err := lab.AddHost(name, a)
		l.hosts[name] = h
		return err
	}
	for name, a := range map[string]netip.Addr{"dns": dnsServerAddr, "sink": dnsSinkAddr, "attacker": dnsAttacker,
		"canary": dnsCanaryAddr, "control": dnsControl} {
		if err := add(name, a); err != nil {
			return nil, err
		}
	}
	for i := range dnsSilentResolvers {
		if err := add(fmt.Sprintf("silent%d", i), silentAddr(i)); err != nil {
			return nil, err
		}
	}
	if _, err := l.hosts["dns"].Run(ctx, "ip", "route", "add", ForgedNet.String(), "via", dnsSinkAddr.String()); err != nil {
		return nil, err
	}
	if err := l.nft(ctx, "sink", sinkRules); err != nil {
		return nil, err
	}
	for i := range dnsSilentResolvers {
		name := fmt.Sprintf("silent%d", i)
		if _, err := l.hosts[name].Run(ctx, "sysctl", "-qw", "net.ipv4.icmp_echo_ignore_all=1"); err != nil {
			return nil, err
		}
		if err := l.nft(ctx, name, silentRules); err != nil {
			return nil, err
		}
	}
	if err := l.hosts["attacker"].Do(func() (err error) {
		l.raw, err = net.ListenPacket("ip4:udp", dnsAttacker.String())
		if err != nil {
			return err
		}
		l.forger, err = ipv4.NewRawConn(l.raw)
		return err
	}); err != nil {
		return nil, err
	}
	if err := l.startCoreDNS(); err != nil {
		return nil, err
	}
	if err := l.waitAnswers(ctx); err != nil {
		return nil, err
	}
	l.logf("DNS lab up: coredns %s (pid %d)", dnsServerAddr, l.coredns.Pid())
	return l, nil
}

// nft loads script into host's namespace.
func (l *DNSLab) nft(ctx context.Context, host, script string) error {
	path := filepath.Join(l.cfg.Dir, host+".nft")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		return err
	}
	_, err := l.hosts[host].Run(ctx, "nft", "-f", path)
	return err
}

// sinkRules count, before routing, what reaches the sink for the forged
// sources, by kind, and the probes (echo requests, TCP segments) per
// forged /24. The sink forwards nothing.
const sinkRules = `table inet sink {
	set probed {
		type ipv4_addr
		size 65536
		flags dynamic
		counter
	}
	counter echoes { }
	counter syns { }
	counter datagrams { }
	chain pre {
		type filter hook prerouting priority -300; policy accept;
		ip daddr 198.19.0.0/16 icmp type echo-request counter name echoes
		ip daddr 198.19.0.0/16 tcp flags & (syn | ack) == syn counter name syns
		ip daddr 198.19.0.0/16 meta l4proto udp counter name datagrams
		ip daddr 198.19.0.0/16 meta l4proto { icmp, tcp } update @probed { ip daddr & 255.255.255.0 }
	}
}
`

// silentRules make a resolver drop TCP to its port 53 without a word.
const silentRules = `table inet silent {
	chain input {
		type filter hook input priority 0; policy accept;
		tcp dport 53 drop
	}
}
`

func (l *DNSLab) startCoreDNS() error {
	corefile := labconf.Corefile("hostilelab DNS", labconf.D("nyucd.test", "nyud.test").With(
		labconf.D("bind", dnsServerAddr),
		labconf.D("metadata"),
		labconf.D("log", ".", `"{remote} {type} {name} {rcode} {/coral/proof} {/coral/proximity} {/coral/level}"`),
		labconf.CoralPlugin{Zone: "nyucd.test", Alias: "nyud.test",
			Node:       labconf.Node{Listen: netip.AddrPortFrom(dnsServerAddr, 4000)},
			LiveWithin: "5s", CheckEvery: "1s",
			Extra: []labconf.Directive{labconf.D("ecs", dnsCanaryAddr), labconf.D("key_file", l.keyFile())}}.Directive(),
		labconf.D("prometheus", netip.AddrPortFrom(dnsServerAddr, 9153)),
		labconf.D("errors"),
	))
	path := filepath.Join(l.cfg.Dir, "Corefile")
	if err := labconf.WriteFile(path, corefile); err != nil {
		return err
	}
	p, err := l.hosts["dns"].Start([]string{l.cfg.CoreDNS, "-conf", path},
		proc.Options{Name: "dns/coredns", Dir: l.cfg.Dir, Log: filepath.Join(l.cfg.Dir, "coredns.log")})
	l.coredns = p
	return err
}

// keyFile writes the network key (a node off loopback needs one).
func (l *DNSLab) keyFile() string {
	path := filepath.Join(l.cfg.Dir, "network.key")
	if _, err := os.Stat(path); err != nil {
		_ = coraldht.WriteKeyFile(path)
	}
	return path
}

// waitAnswers waits until the server answers the control over TCP.
func (l *DNSLab) waitAnswers(ctx context.Context) error {
	deadline := time.Now().Add(60 * time.Second)
	var last error
	for time.Now().Before(deadline) {
		if err := l.coredns.Exited(); err != nil {
			return err
		}
		var r *dns.Msg
		r, last = l.ask(ctx, dnsControl, "tcp", "nyucd.test.", dns.TypeSOA, nil)
		if last == nil && r.Rcode == dns.RcodeSuccess {
			return nil
		}
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("coredns does not answer within 60 s: %v\n%s", last, l.coredns.LogTail(20))
}

// Stop stops everything the lab started.
func (l *DNSLab) Stop() {
	if l.coredns != nil {
		_ = l.coredns.Stop(5 * time.Second)
	}
	if l.raw != nil {
		_ = l.raw.Close()
	}
	_ = l.lab.Close()
}

// LogTail is the end of coredns's log.
func (l *DNSLab) LogTail(n int) string { return l.coredns.LogTail(n) }

// Exited is an error when coredns died.
func (l *DNSLab) Exited() error { return l.coredns.Exited() }

// ask sends q from host's address over network (udp, tcp), with the
// given EDNS options.
func (l *DNSLab) ask(ctx context.Context, from netip.Addr, network, name string, qtype uint16, opts []dns.EDNS0) (*dns.Msg, error) {
	host := l.hostOf(from)
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	q.SetEdns0(1232, false)
	q.IsEdns0().Option = append(q.IsEdns0().Option, opts...)
	var resp *dns.Msg
	err := host.Do(func() error {
		c := &dns.Client{Net: network, Timeout: 2 * time.Second}
		var err error
		resp, _, err = c.ExchangeContext(ctx, q, netip.AddrPortFrom(dnsServerAddr, 53).String())
		return err
	})
	return resp, err
}

func (l *DNSLab) hostOf(a netip.Addr) *netns.Host {
	for _, h := range l.hosts {
		if h.Addr == a {
			return h
		}
	}
	panic(fmt.Sprintf("no host %v in the DNS lab", a))
}

// forge sends a DNS query from the attacker in a UDP datagram whose source
// is src.
func (l *DNSLab) forge(src netip.AddrPort, wire []byte) error {
	udp := make([]byte, 8+len(wire))
	binary.BigEndian.PutUint16(udp[0:], src.Port())
	binary.BigEndian.PutUint16(udp[2:], 53)
	binary.BigEndian.PutUint16(udp[4:], uint16(len(udp)))
	copy(udp[8:], wire)
	binary.BigEndian.PutUint16(udp[6:], l4Checksum(src.Addr(), dnsServerAddr, 17, udp))
	h := &ipv4.Header{Version: 4, Len: ipv4.HeaderLen, TotalLen: ipv4.HeaderLen + len(udp), TTL: 64, Protocol: 17,
		Src: src.Addr().AsSlice(), Dst: dnsServerAddr.AsSlice()}
	return l.forger.WriteTo(h, udp, nil)
}

// l4Checksum is the Internet checksum of a UDP (or ICMP, without the
// pseudo-header: proto 0) segment.
func l4Checksum(src, dst netip.Addr, proto byte, seg []byte) uint16 {
	var sum uint32
	add := func(b []byte) {
		for i := 0; i+1 < len(b); i += 2 {
			sum += uint32(b[i])<<8 | uint32(b[i+1])
		}
		if len(b)%2 == 1 {
			sum += uint32(b[len(b)-1]) << 8
		}
	}
	if proto != 0 {
		s4, d4 := src.As4(), dst.As4()
		add(append(append(s4[:], d4[:]...), 0, proto, byte(len(seg)>>8), byte(len(seg))))
	}
	add(seg)
	for sum > 0xffff {
		sum = sum>>16 + sum&0xffff
	}
	return ^uint16(sum)
}

// SinkCounts are what reached the forged sources.
type SinkCounts struct {
	Echo     int64 `json:"echo_requests"`
	Syn      int64 `json:"tcp_syns"`
	UDP      int64 `json:"udp_datagrams"`
	UDPBytes int64 `json:"udp_bytes"`
	// FreshProbes are the probes (echo requests and TCP segments) that
	// reached the /24s of sources used once (freshForged); MostPerPrefix
	// the most one /24 of sources that came back (familiar) got.
	FreshProbes   int64 `json:"probes_to_fresh_sources"`
	MostPerPrefix int64 `json:"most_probes_per_familiar_prefix"`
	// Prefixes is how many forged /24s got any probe.
	Prefixes int `json:"prefixes_probed"`
}

// freshForged is the part of ForgedNet whose sources send one query each;
// the rest send theirs again and again.
var freshForged = netip.MustParsePrefix("198.19.0.0/17")

// sinkCounts reads the sink's counters.
func (l *DNSLab) sinkCounts(ctx context.Context) (SinkCounts, error) {
	out, err := l.hosts["sink"].Run(ctx, "nft", "-j", "list", "table", "inet", "sink")
	if err != nil {
		return SinkCounts{}, err
	}
	var doc struct {
		Nftables []map[string]json.RawMessage `json:"nftables"`
	}
	if err := json.Unmarshal(out, &doc); err != nil {
		return SinkCounts{}, fmt.Errorf("nft: %w: %.200s", err, out)
	}
	type counter struct {
		Name    string `json:"name"`
		Packets int64  `json:"packets"`
		Bytes   int64  `json:"bytes"`
	}
	var c SinkCounts
	for _, e := range doc.Nftables {
		if raw, ok := e["counter"]; ok {
			var ctr counter
			if err := json.Unmarshal(raw, &ctr); err != nil {
				return c, err
			}
			switch ctr.Name {
			case "echoes":
				c.Echo = ctr.Packets
			case "syns":
				c.Syn = ctr.Packets
			case "datagrams":
				c.UDP, c.UDPBytes = ctr.Packets, ctr.Bytes
			}
		}
		if raw, ok := e["set"]; ok {
			var set struct {
				Elem []struct {
					Elem struct {
						Val     string  `json:"val"`
						Counter counter `json:"counter"`
					} `json:"elem"`
				} `json:"elem"`
			}
			if err := json.Unmarshal(raw, &set); err != nil {
				return c, fmt.Errorf("nft set: %w: %.300s", err, raw)
			}
			for _, el := range set.Elem {
				c.Prefixes++
				a, err := netip.ParseAddr(el.Elem.Val)
				if err != nil {
					return c, fmt.Errorf("nft set element %q: %w", el.Elem.Val, err)
				}
				if freshForged.Contains(a) {
					c.FreshProbes += el.Elem.Counter.Packets
				} else {
					c.MostPerPrefix = max(c.MostPerPrefix, el.Elem.Counter.Packets)
				}
			}
		}
	}
	return c, nil
}

// flushProbed empties the sink's probes per /24, for the next class.
func (l *DNSLab) flushProbed(ctx context.Context) error {
	_, err := l.hosts["sink"].Run(ctx, "nft", "flush", "set", "inet", "sink", "probed")
	return err
}

// metric is the sum of the samples of coredns's /metrics named name
// whose line contains every string of match.
func (l *DNSLab) metric(ctx context.Context, name string, match ...string) (float64, error) {
	// The transport dials in goroutines of its own: through the control
	// host's namespace, not from the thread that asks.
	c := &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil, DisableKeepAlives: true,
		DialContext: l.hosts["control"].DialContext}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://"+netip.AddrPortFrom(dnsServerAddr, 9153).String()+"/metrics", nil)
	if err != nil {
		return 0, err
	}
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	if err != nil {
		return 0, err
	}
	if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), "coredns_build_info") {
		return 0, fmt.Errorf("coredns metrics: %s: %.200s", resp.Status, body)
	}
	sum := 0.0
lines:
	for _, line := range strings.Split(string(body), "\n") {
		if !strings.HasPrefix(line, name+"{") && !strings.HasPrefix(line, name+" ") {
			continue
		}
		for _, m := range match {
			if !strings.Contains(line, m) {
				continue lines
			}
		}
		var v float64
		if _, err := fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v); err == nil {
			sum += v
		}
	}
	return sum, nil
}
