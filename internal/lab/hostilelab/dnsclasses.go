//go:build linux

package hostilelab

import (
	"bufio"
	"context"
	"crypto/rand"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"net"
	"net/netip"
	"strings"
	"sync"
	"time"

	"github.com/miekg/dns"
	"golang.org/x/net/icmp"
	"golang.org/x/net/ipv4"
)

// DNSClass is a class of attack on the DNS server (issue 34): the lab
// runs it for a while with the canary asking throughout, then checks its
// bound.
type DNSClass struct {
	Name string
	Doc  string
	// Finding is the finding of issue 34 the class shows.
	Finding int
	run     func(ctx context.Context, l *DNSLab, d time.Duration, r *DNSResult) error
}

// DNSClasses are the DNS classes, in the order they run.
var DNSClasses = []DNSClass{
	{"dns-forged-flood", "500 forged UDP queries a second: for the first half of the class from fresh sources (each address once) in 128 /24s of 198.19.0.0/17, then from 128 sources in 198.19.128.0/17 that come back every quarter second (familiar after three seconds), while a canary resolver with cookies asks for a new client subnet (ECS) every 300 ms",
		2, forgedFlood},
	{"dns-probe-forgery", "an attacker reads the probe sent to its own address and forges echo replies from silent resolvers (no echo, no TCP) while they are probed",
		3, probeForgery},
}

// LookupDNSClass finds a DNS class by name.
func LookupDNSClass(name string) (DNSClass, bool) {
	for _, c := range DNSClasses {
		if c.Name == name {
			return c, true
		}
	}
	return DNSClass{}, false
}

// DNSResult is one DNS class's run.
type DNSResult struct {
	Class    string        `json:"class"`
	Duration time.Duration `json:"duration_ns"`
	// Forged are the forged datagrams the attacker sent (queries, or
	// echo replies), ForgedBytes their IP octets.
	Forged      int   `json:"forged"`
	ForgedBytes int64 `json:"forged_bytes"`
	// Sink is what reached the forged sources; ProbeBound the most probes
	// one forged /24 may get in the class (the destination rate of
	// probe_rate, each start at most maxProbesPerStart).
	Sink       SinkCounts `json:"sink"`
	ProbeBound int64      `json:"probe_bound_per_prefix"`
	// DeniedWhileFresh counts the answers whose classification or
	// mapping was skipped or limited (the budgets full) while only fresh
	// forged sources flooded: those must not take any of them.
	DeniedWhileFresh float64 `json:"denied_while_fresh"`
	// SilentLevels are the levels the silent resolvers were placed at
	// (probe forgery: 0 each); ControlLevel the answering control's.
	SilentLevels []int `json:"silent_levels,omitempty"`
	ControlLevel int   `json:"control_level"`
	Canary       DNSCanaryStats
	Exited       string   `json:"exited,omitempty"`
	Violations   []string `json:"violations"`
}

// DNSCanaryStats are the canary resolver's queries: each for a client
// subnet never asked before, so each needs a mapping of its own.
type DNSCanaryStats struct {
	Queries  int `json:"queries"`
	Answered int `json:"answered"` // over UDP, or over TCP after a truncated response
	// Mapped are the server's log lines for the canary's proven queries
	// whose mapping ran (pending, hints, no_hints, failed); Denied those
	// whose mapping was skipped or limited.
	Mapped      int      `json:"mapped"`
	Denied      int      `json:"denied"`
	FirstErrors []string `json:"first_errors,omitempty"`
}

// maxProbesPerStart is the most probes one start sends to a destination:
// a mapping's echo for the distance and a burst of 32 (an RTT probe is a
// SYN and an echo).
const maxProbesPerStart = 33

// RunDNS runs class for d with the canary and checks its bounds.
func (l *DNSLab) RunDNS(ctx context.Context, class DNSClass, d time.Duration) (DNSResult, error) {
	res := DNSResult{Class: class.Name, Duration: d, ControlLevel: -1}
	if err := l.flushProbed(ctx); err != nil {
		return res, err
	}
	before, err := l.sinkCounts(ctx)
	if err != nil {
		return res, err
	}
	logStart := len(l.coredns.Log())
	cctx, stop := context.WithCancel(ctx)
	can := l.startDNSCanary(cctx)
	err = class.run(ctx, l, d, &res)
	stop()
	can.wg.Wait()
	if err != nil {
		return res, err
	}
	time.Sleep(2 * time.Second) // the probes in flight end (a mapping's timeout is 1 s)
	after, err := l.sinkCounts(ctx)
	if err != nil {
		return res, err
	}
	res.Sink = SinkCounts{Echo: after.Echo - before.Echo, Syn: after.Syn - before.Syn, UDP: after.UDP - before.UDP,
		UDPBytes: after.UDPBytes - before.UDPBytes, FreshProbes: after.FreshProbes, MostPerPrefix: after.MostPerPrefix, Prefixes: after.Prefixes}
	res.ProbeBound = int64((destinationBurstOf + int(d.Seconds()*destinationRateOf/60) + 1) * maxProbesPerStart)
	res.Canary = can.stats(l.coredns.Log()[logStart:])
	if err := l.Exited(); err != nil {
		res.Exited = err.Error()
	}
	res.Violations = res.check()
	return res, nil
}

// The plugin's defaults the bounds come from (plugin/coredns proof.go):
// a destination /24 is probed at most destinationBurst times at once and
// then destinationRate times a minute.
const (
	destinationBurstOf = 4
	destinationRateOf  = 6
)

func (r *DNSResult) check() []string {
	var v []string
	if r.Exited != "" {
		v = append(v, "coredns died: "+firstLine(r.Exited))
	}
	if r.Sink.FreshProbes > 0 {
		v = append(v, fmt.Sprintf("sources that sent one forged query each got %d probes, want none", r.Sink.FreshProbes))
	}
	if r.DeniedWhileFresh > 0 {
		v = append(v, fmt.Sprintf("%.0f answers went without a classification or mapping (budget full) while only fresh forged sources flooded", r.DeniedWhileFresh))
	}
	if r.Sink.MostPerPrefix > r.ProbeBound {
		v = append(v, fmt.Sprintf("a forged /24 got %d probes, bound %d", r.Sink.MostPerPrefix, r.ProbeBound))
	}
	for i, lvl := range r.SilentLevels {
		if lvl != 0 {
			v = append(v, fmt.Sprintf("silent resolver %d placed at level %d by forged echo replies, want 0", i, lvl))
		}
	}
	if r.Class == "dns-probe-forgery" && r.ControlLevel != 2 {
		v = append(v, fmt.Sprintf("the answering control resolver at level %d, want 2", r.ControlLevel))
	}
	c := r.Canary
	switch {
	case c.Queries == 0:
		v = append(v, "the canary asked nothing")
	case c.Answered < c.Queries:
		v = append(v, fmt.Sprintf("canary: %d of %d queries unanswered, first: %s", c.Queries-c.Answered, c.Queries, strings.Join(c.FirstErrors, " | ")))
	case c.Denied > 0:
		v = append(v, fmt.Sprintf("canary: %d of its proven queries got no mapping (skipped or limited)", c.Denied))
	}
	return v
}

// DNSTable prints DNS results, one row per class.
func DNSTable(rs []DNSResult) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%-18s %7s %8s %6s %6s %9s %7s %7s %7s %9s %10s %8s  %s\n",
		"class", "forged", "to-srcs", "echo", "syn", "fresh", "max/24", "bound", "ampl", "silent", "canary", "mapped", "verdict")
	// fresh: probes that reached the sources used once / answers denied
	// a classification or mapping while only they flooded.
	for _, r := range rs {
		ampl := 0.0
		if r.ForgedBytes > 0 {
			ampl = float64(r.Sink.UDPBytes) / float64(r.ForgedBytes)
		}
		silent := "-"
		if len(r.SilentLevels) > 0 {
			silent = strings.Trim(strings.Join(strings.Fields(fmt.Sprint(r.SilentLevels)), ","), "[]")
		}
		verdict := "ok"
		if len(r.Violations) > 0 {
			verdict = fmt.Sprintf("%d broken", len(r.Violations))
		}
		fmt.Fprintf(&b, "%-18s %7d %8d %6d %6d %9s %7d %7d %7.2f %9s %10s %8s  %s\n",
			r.Class, r.Forged, r.Sink.UDP, r.Sink.Echo, r.Sink.Syn, fmt.Sprintf("%d/%.0f", r.Sink.FreshProbes, r.DeniedWhileFresh), r.Sink.MostPerPrefix, r.ProbeBound, ampl, silent,
			fmt.Sprintf("%d/%d", r.Canary.Answered, r.Canary.Queries), fmt.Sprintf("%d/%d", r.Canary.Mapped, r.Canary.Mapped+r.Canary.Denied), verdict)
	}
	return b.String()
}

// forgedFlood sends forged queries for d, 500 a second: the first half
// from fresh sources, the second from sources that come back.
func forgedFlood(ctx context.Context, l *DNSLab, d time.Duration, r *DNSResult) error {
	q := new(dns.Msg)
	q.SetQuestion("l0.nyucd.test.", dns.TypeNS)
	denied := func() float64 {
		var sum float64
		for _, m := range []string{"coredns_coral_classifications_total", "coredns_coral_proximity_total"} {
			for _, src := range []string{`source="skipped"`, `source="limited"`} {
				v, _ := l.metric(ctx, m, src)
				sum += v
			}
		}
		return sum
	}
	before := denied()
	half := time.Now().Add(d / 2)
	end := time.Now().Add(d)
	tick := time.NewTicker(2 * time.Millisecond)
	defer tick.Stop()
	for i := 0; time.Now().Before(end) && ctx.Err() == nil; i++ {
		fresh := time.Now().Before(half)
		if !fresh && r.DeniedWhileFresh == 0 && before >= 0 {
			time.Sleep(time.Second) // the fresh half's probes, if any, end
			r.DeniedWhileFresh, before = denied()-before, -1
		}
		q.Id = dns.Id()
		wire, err := q.Pack()
		if err != nil {
			return err
		}
		src := netip.AddrFrom4([4]byte{198, 19, byte(128 + i%128), 7}) // one of 128 that come back
		if fresh {
			src = netip.AddrFrom4([4]byte{198, 19, byte(i % 128), byte(1 + (i/128)%254)}) // each once
		}
		if err := l.forge(netip.AddrPortFrom(src, 33053), wire); err != nil {
			return err
		}
		r.Forged++
		r.ForgedBytes += int64(ipv4.HeaderLen + 8 + len(wire))
		<-tick.C
	}
	return nil
}

// probeForgery: for each silent resolver, the attacker (at an address of
// its own in a new /24, so that it is probed) asks over TCP, reads the
// echo request sent to it, and while the silent resolver asks over TCP,
// sends forged echo replies "from" it built from what it read: every
// sequence number near the one seen, that payload and that payload with
// each following counter. Then the control asks.
func probeForgery(ctx context.Context, l *DNSLab, d time.Duration, r *DNSResult) error {
	att := l.hosts["attacker"]
	var sniff *icmp.PacketConn
	var forger *ipv4.RawConn
	if err := att.Do(func() (err error) {
		if sniff, err = icmp.ListenPacket("ip4:icmp", "0.0.0.0"); err != nil {
			return err
		}
		if err = sniff.IPv4PacketConn().SetControlMessage(ipv4.FlagDst, true); err != nil {
			return err
		}
		raw, err := net.ListenPacket("ip4:icmp", "0.0.0.0")
		if err != nil {
			return err
		}
		forger, err = ipv4.NewRawConn(raw)
		return err
	}); err != nil {
		return err
	}
	defer sniff.Close()
	defer forger.Close()
	for i := range dnsSilentResolvers {
		own := netip.AddrFrom4([4]byte{198, 18, byte(9 + 10*(i+1)), 66})
		if _, err := att.Run(ctx, "ip", "addr", "add", own.String()+"/16", "dev", "eth0"); err != nil && !strings.Contains(err.Error(), "File exists") {
			return err
		}
		seenc := make(chan *icmp.Echo, 1)
		go func() { seenc <- sniffEcho(sniff, own) }()
		if _, err := l.askFrom(ctx, att, own, "l2.l1.l0.nyucd.test.", dns.TypeNS); err != nil {
			return fmt.Errorf("the attacker's own query: %w", err)
		}
		seen := <-seenc
		if seen == nil {
			return fmt.Errorf("the attacker saw no probe at %v", own)
		}
		silent := silentAddr(i)
		levelc := make(chan int, 1)
		go func() { levelc <- l.levelOf(ctx, silent) }()
		for deadline := time.Now().Add(80 * time.Millisecond); time.Now().Before(deadline); {
			for _, payload := range forgedPayloads(seen.Data) {
				for dseq := -3; dseq <= 8; dseq++ {
					b, err := (&icmp.Message{Type: ipv4.ICMPTypeEchoReply, Body: &icmp.Echo{ID: seen.ID, Seq: int(uint16(seen.Seq + dseq)), Data: payload}}).Marshal(nil)
					if err != nil {
						return err
					}
					h := &ipv4.Header{Version: 4, Len: ipv4.HeaderLen, TotalLen: ipv4.HeaderLen + len(b), TTL: 64, Protocol: 1,
						Src: silent.AsSlice(), Dst: dnsServerAddr.AsSlice()}
					if err := forger.WriteTo(h, b, nil); err != nil {
						return err
					}
					r.Forged++
					r.ForgedBytes += int64(ipv4.HeaderLen + len(b))
				}
			}
			time.Sleep(2 * time.Millisecond)
		}
		r.SilentLevels = append(r.SilentLevels, <-levelc)
	}
	r.ControlLevel = l.levelOf(ctx, dnsControl)
	if rest := d - 3*time.Second; rest > 0 {
		time.Sleep(rest)
	}
	return nil
}

// forgedPayloads are what an attacker tries from a payload it saw: the
// same, and with each following count in its last 8 octets (a per-process
// token and a probe counter, as before issue 34).
func forgedPayloads(seen []byte) [][]byte {
	out := [][]byte{append([]byte(nil), seen...)}
	if len(seen) == 16 {
		for d := uint64(1); d <= 8; d++ {
			b := append([]byte(nil), seen...)
			binary.BigEndian.PutUint64(b[8:], binary.BigEndian.Uint64(seen[8:])+d)
			out = append(out, b)
		}
	}
	return out
}

// sniffEcho returns the first echo request to dst, nil after 3 s.
func sniffEcho(c *icmp.PacketConn, dst netip.Addr) *icmp.Echo {
	_ = c.SetReadDeadline(time.Now().Add(3 * time.Second))
	buf := make([]byte, 1500)
	for {
		n, cm, _, err := c.IPv4PacketConn().ReadFrom(buf)
		if err != nil {
			return nil
		}
		if cm == nil || !cm.Dst.Equal(dst.AsSlice()) {
			continue
		}
		m, err := icmp.ParseMessage(1, buf[:n])
		if err != nil || m.Type != ipv4.ICMPTypeEcho {
			continue
		}
		return m.Body.(*icmp.Echo)
	}
}

// askFrom sends a TCP query from a given address of host.
func (l *DNSLab) askFrom(ctx context.Context, host interface{ Do(func() error) error }, from netip.Addr, name string, qtype uint16) (*dns.Msg, error) {
	q := new(dns.Msg)
	q.SetQuestion(name, qtype)
	var resp *dns.Msg
	err := host.Do(func() error {
		c := &dns.Client{Net: "tcp", Timeout: 2 * time.Second, Dialer: &net.Dialer{LocalAddr: &net.TCPAddr{IP: from.AsSlice()}}}
		var err error
		resp, _, err = c.ExchangeContext(ctx, q, netip.AddrPortFrom(dnsServerAddr, 53).String())
		return err
	})
	return resp, err
}

// levelOf is the level the server places resolver a at, as its answer to
// a's own TCP query for the level-2 apex shows: a referral at level 2, a
// NODATA below; -1 when there is no answer.
func (l *DNSLab) levelOf(ctx context.Context, a netip.Addr) int {
	m, err := l.ask(ctx, a, "tcp", "l2.l1.l0.nyucd.test.", dns.TypeNS, nil)
	if err != nil || m.Rcode != dns.RcodeSuccess {
		return -1
	}
	if len(m.Ns) > 0 {
		if _, ok := m.Ns[0].(*dns.NS); ok {
			return 2
		}
		if soa, ok := m.Ns[0].(*dns.SOA); ok {
			// The SOA of the resolver's own level zone: l0.Z is level
			// 0, l1.l0.Z level 1.
			level := -1
			for _, label := range dns.SplitDomainName(soa.Hdr.Name) {
				if len(label) == 2 && label[0] == 'l' && label[1] >= '0' && label[1] <= '9' {
					level++
				}
			}
			return level
		}
	}
	return -1
}

// dnsCanary is a resolver with cookies asking for fresh client subnets.
type dnsCanary struct {
	mu sync.Mutex
	st DNSCanaryStats
	wg sync.WaitGroup
}

// canarySubnets counts the client subnets asked for, across classes.
var canarySubnets struct {
	sync.Mutex
	n int
}

func nextCanarySubnet() netip.Prefix {
	canarySubnets.Lock()
	defer canarySubnets.Unlock()
	n := canarySubnets.n
	canarySubnets.n++
	return netip.PrefixFrom(netip.AddrFrom4([4]byte{198, 18, byte(100 + n%150), 0}), 24)
}

func (l *DNSLab) startDNSCanary(ctx context.Context) *dnsCanary {
	c := &dnsCanary{}
	var cc [8]byte
	_, _ = rand.Read(cc[:])
	cookie := hex.EncodeToString(cc[:])
	c.wg.Go(func() {
		t := time.NewTicker(300 * time.Millisecond)
		defer t.Stop()
		for ctx.Err() == nil {
			subnet := nextCanarySubnet()
			ecs := &dns.EDNS0_SUBNET{Code: dns.EDNS0SUBNET, Family: 1, SourceNetmask: 24, Address: subnet.Addr().AsSlice()}
			opts := []dns.EDNS0{ecs, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: cookie}}
			m, err := l.ask(context.Background(), dnsCanaryAddr, "udp", "l0.nyucd.test.", dns.TypeNS, opts)
			if err == nil {
				cookie = serverCookie(m, cookie)
				if m.Truncated {
					m, err = l.ask(context.Background(), dnsCanaryAddr, "tcp", "l0.nyucd.test.", dns.TypeNS, opts[:1])
				}
			}
			c.mu.Lock()
			c.st.Queries++
			switch {
			case err != nil:
				c.fail(fmt.Sprintf("%v: %v", subnet, err))
			case m.Rcode != dns.RcodeSuccess || len(m.Ns) == 0:
				c.fail(fmt.Sprintf("%v: %s, %d NS", subnet, dns.RcodeToString[m.Rcode], len(m.Ns)))
			default:
				c.st.Answered++
			}
			c.mu.Unlock()
			select {
			case <-ctx.Done():
			case <-t.C:
			}
		}
	})
	return c
}

func (c *dnsCanary) fail(e string) {
	if len(c.st.FirstErrors) < 3 {
		c.st.FirstErrors = append(c.st.FirstErrors, e)
	}
}

// serverCookie is the client and server cookie of m's COOKIE option, to
// send back; old when m has none.
func serverCookie(m *dns.Msg, old string) string {
	if opt := m.IsEdns0(); opt != nil {
		for _, o := range opt.Option {
			if c, ok := o.(*dns.EDNS0_COOKIE); ok && len(c.Cookie) > 16 {
				return c.Cookie
			}
		}
	}
	return old
}

// stats counts the canary's queries and, from the server's log lines for
// its address ("{remote} {type} {name} {rcode} {proof} {proximity}
// {level}"), the proven ones that got a mapping or were denied one.
func (c *dnsCanary) stats(log string) DNSCanaryStats {
	c.mu.Lock()
	st := c.st
	c.mu.Unlock()
	sc := bufio.NewScanner(strings.NewReader(log))
	for sc.Scan() {
		f := strings.Fields(sc.Text())
		i := indexOf(f, dnsCanaryAddr.String())
		if i < 0 || len(f) < i+6 || f[i+4] != "strong" {
			continue
		}
		switch f[i+5] {
		case "pending", "hints", "no_hints", "failed":
			st.Mapped++
		case "skipped", "limited", "unproven":
			st.Denied++
		}
	}
	return st
}

func indexOf(f []string, s string) int {
	for i, x := range f {
		if x == s {
			return i
		}
	}
	return -1
}
