package coral

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/coralname"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

// FuzzServeDNS sends arbitrary DNS messages through the handler: it must
// answer every one that names our zones with a well-formed response that
// packs, echoes the question, fits what the client can take, advertises
// this server's EDNS size, answers only class IN, opcode QUERY, EDNS
// version 0 requests normally, and never panics. who picks the resolver
// (low bits) and TCP (the top bit).
func FuzzServeDNS(f *testing.F) {
	for _, q := range []struct {
		name  string
		qtype uint16
		mod   func(*dns.Msg)
	}{
		{full2, dns.TypeA, nil}, {"www.example.com.nyud.test.", dns.TypeAAAA, nil}, {"l1.l0.nyucd.test.", dns.TypeNS, nil},
		{"nyud.test.", dns.TypeANY, nil}, {"a.nyud.test.nyud.test.", dns.TypeA, nil}, {longAliasName(), dns.TypeA, nil},
		{"ns-127-0-0-2.nyucd.test.", dns.TypeA, nil}, {"l2.l1.l0.nyucd.test.", dns.TypeDS, nil},
		{"ns-127-0-0-1.nyucd.test.", dns.TypeA, nil},
		{"nyucd.test.", dns.TypeSOA, func(m *dns.Msg) { m.Question[0].Qclass = dns.ClassCHAOS }},
		{"nyucd.test.", dns.TypeSOA, func(m *dns.Msg) { m.Opcode = dns.OpcodeNotify }},
		{full2, dns.TypeA, func(m *dns.Msg) { m.IsEdns0().SetVersion(1) }},
		{"nyucd.test.", dns.TypeAXFR, nil},
		{"nyucd.test.", dns.TypeIXFR, func(m *dns.Msg) { m.Ns = []dns.RR{soa("nyucd.test.", "30")} }},
		{full2, dns.TypeAAAA, func(m *dns.Msg) { m.IsEdns0().SetUDPSize(4096) }},
		{full2, dns.TypeAAAA, func(m *dns.Msg) { m.Extra = nil }},
	} {
		m := new(dns.Msg)
		m.SetQuestion(q.name, q.qtype)
		m.SetEdns0(1232, true)
		m.IsEdns0().Option = append(m.IsEdns0().Option, &dns.EDNS0_COOKIE{Code: dns.EDNS0COOKIE, Cookie: "0102030405060708"})
		if q.mod != nil {
			q.mod(m)
		}
		b, err := m.Pack()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b, uint8(2))
	}
	// Answers of 16 proxies and 13 name servers do not fit 512 octets, nor
	// 1232 for a level-0 resolver (10.0.0.1): truncation has work to do.
	c := testCoral(f, bigWorld())
	c.set.answers, c.set.nameservers = 16, 13
	resolvers := []string{"10.0.0.1", "10.1.0.1", "10.2.0.1", "192.0.2.1"}
	f.Fuzz(func(t *testing.T, wire []byte, who uint8) {
		r := new(dns.Msg)
		if err := r.Unpack(wire); err != nil || len(r.Question) != 1 {
			return
		}
		tcp := who&0x80 != 0
		rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: resolvers[int(who&0x7f)%len(resolvers)], TCP: tcp})
		ro := r.IsEdns0()
		var clientSize uint16
		if ro != nil {
			clientSize = ro.UDPSize()
		}
		rcode, _ := c.ServeDNS(context.Background(), rec, r)
		if rec.Msg == nil {
			if rcode != dns.RcodeServerFailure { // next plugin (none): out of zone
				t.Fatalf("nothing written, rcode %d", rcode)
			}
			return
		}
		resp := rec.Msg
		out, err := resp.Pack()
		if err != nil {
			t.Fatalf("response does not pack: %v\n%v", err, resp)
		}
		if len(resp.Question) != 1 || resp.Question[0] != r.Question[0] || resp.Id != r.Id {
			t.Fatalf("question or id not echoed: %v", resp)
		}
		if ro != nil && ro.UDPSize() != clientSize {
			t.Fatalf("request's UDP size changed from %d to %d", clientSize, ro.UDPSize())
		}
		limit := dns.MinMsgSize
		if ro != nil {
			limit = min(max(int(clientSize), dns.MinMsgSize), ednsUDPSize)
		}
		if !tcp && len(out) > limit {
			t.Fatalf("%d octets over UDP to a client that takes %d", len(out), limit)
		}
		if o := resp.IsEdns0(); (o != nil) != (ro != nil) || o != nil && (o.UDPSize() != ednsUDPSize || o.Version() != 0) {
			t.Fatalf("request OPT %v, response OPT %v; want one with size %d exactly when the request had one", ro, o, ednsUDPSize)
		}
		if resp.Rcode == dns.RcodeSuccess || resp.Rcode == dns.RcodeNameError {
			if r.Question[0].Qclass != dns.ClassINET || r.Opcode != dns.OpcodeQuery || ro != nil && ro.Version() != 0 {
				t.Fatalf("class %d, opcode %d, EDNS %v answered %s", r.Question[0].Qclass, r.Opcode, ro, dns.RcodeToString[resp.Rcode])
			}
			if qt := r.Question[0].Qtype; qt == dns.TypeAXFR || qt == dns.TypeIXFR {
				t.Fatalf("zone transfer answered %s", dns.RcodeToString[resp.Rcode])
			}
		}
	})
}

// FuzzDNSMatchesProxy: for any Host value, the DNS plugin answers the name
// a client resolves for it exactly when the proxy serves it, and reads the
// same origin and port from it. The proxy side is coralname.ParseHost (the
// proxy's ParseTarget is that); the DNS
// side is the plugin's own placing of the name and its answer through
// ServeDNS, for the alias name and for its DNAME target under the coral
// zone. The one difference is by design: the DNS plugin also refuses
// origins that carry the coral zone, which the proxy, knowing only its own
// zone, would serve.
func FuzzDNSMatchesProxy(f *testing.F) {
	for _, rel := range append(proxyRefused,
		"www.example.com", "www.example.com.8080", "127.0.0.1", "127.0.0.1.8080", "my_site.example.com",
		"xn--bcher-kva.example", "a.nyud.test", "a.nyucd.test", "x.http.l2.l1.l0.nyucd.test", "WWW.Example.COM",
		"a.example.com.65535", "a\\.b.example.com", "a b.example.com", "b\xc3\xbccher.example") {
		f.Add(rel + ".nyud.test")
	}
	for _, host := range []string{
		"www.example.com.nyud.test:8080", "www.example.com.nyud.test.", "www.example.com.nyud.test:x", "[::1]:80",
		"nyud.test", ".nyud.test", "_acme-challenge.nyud.test", "_ACME-challenge.nyud.test.", "www.example.com", "www.example.com.http.l2.l1.l0.nyucd.test", longAliasName(),
		"a..example.com.nyud.test", "example.com.nyud.test..", "a.nyud.te\u212a",
	} {
		f.Add(host)
	}
	c := testCoral(f, testWorld())
	swept := time.Now()
	c.tracker.now = func() time.Time { return swept } // the proxies stay live however long the fuzzing
	f.Fuzz(func(t *testing.T, host string) {
		po, perr := coralname.ParseHost(host, "nyud.test")
		if strings.HasPrefix(host, "[") {
			if perr == nil {
				t.Fatalf("the proxy serves IP literal %q", host)
			}
			return // an IPv6 literal is never resolved
		}
		// The proxy's own port is no part of the name: it changes nothing.
		name, _, _ := strings.Cut(host, ":")
		o, err := coralname.ParseHost(name, "nyud.test")
		if perr == nil && (err != nil || o != po) {
			t.Fatalf("proxy: %q is %+v, but %q is %+v, %v", host, po, name, o, err)
		}
		proxyServes := err == nil && !coralname.CarriesZone(o.Host, "nyucd.test")
		r, ok := resolverQuery(name)
		if !ok {
			// A name the proxy serves has good labels: only its length
			// can keep it out of the DNS.
			if proxyServes && len(strings.TrimSuffix(name, ".")) <= 253 {
				t.Fatalf("the proxy serves %q, which cannot be asked", name)
			}
			return
		}
		qname := dns.CanonicalName(r.Question[0].Name)
		p, _ := c.scheme.parse(qname)
		// The alias zone's ACME challenge name is no origin: the proxy
		// refuses it, and DNS answers only TXT for it (NODATA for A).
		dnsServes := p.kind == kindAliasBelow && !p.badOrigin && !p.challenge
		if dnsServes != proxyServes || dnsServes && p.origin != o {
			t.Fatalf("%q: DNS serves %v %+v (%s), proxy %v %+v (%v)", name, dnsServes, p.origin, qname, proxyServes, o, err)
		}
		if p.kind != kindAliasBelow {
			return
		}
		target, fits := c.scheme.aliasTarget(p.rel)
		if p.above != (p.badOrigin && c.scheme.zones.Above(p.rel)) {
			t.Fatalf("%q: above %v, bad %v", qname, p.above, p.badOrigin)
		}
		checkAnswer(t, c, r, dnsServes, p.above || p.challenge, fits)
		if fits {
			q, _ := c.scheme.parse(target)
			if q.kind != kindProxy || q.badOrigin != p.badOrigin || q.origin != p.origin {
				t.Fatalf("%q: target %q placed as %+v", qname, target, q)
			}
			m := new(dns.Msg)
			m.SetQuestion(target, dns.TypeA)
			checkAnswer(t, c, m, dnsServes, p.above || p.challenge, true)
		}
	})
}

// resolverQuery is the A query a resolver sends for host: its labels as
// they are, byte for byte (a trailing dot means the root). ok is false when
// no such query exists (an empty or overlong label, a name over 255 octets).
func resolverQuery(host string) (*dns.Msg, bool) {
	host = strings.TrimSuffix(host, ".")
	if host == "" {
		return nil, false
	}
	var b strings.Builder
	for _, l := range strings.Split(host, ".") {
		for i := 0; i < len(l); i++ {
			if c := l[i]; 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' || c == '-' || c == '_' {
				b.WriteByte(c)
			} else {
				b.WriteString(fmt.Sprintf(`\%03d`, c))
			}
		}
		b.WriteByte('.')
	}
	m := new(dns.Msg)
	m.SetQuestion(b.String(), dns.TypeA)
	wire, err := m.Pack()
	if err != nil {
		return nil, false
	}
	r := new(dns.Msg)
	if err := r.Unpack(wire); err != nil {
		return nil, false
	}
	return r, true
}

// checkAnswer sends r (an A query for a Coralized name) from a level-2
// resolver over TCP, so that nothing is truncated: proxies when the origin
// is served, NXDOMAIN when not; YXDOMAIN either way when the alias zone's
// DNAME target would not fit.
// checkAnswer: a name DNS serves gets addresses; any other gets none,
// with NODATA where names may lie below it (above) and NXDOMAIN elsewhere.
func checkAnswer(t *testing.T, c *Coral, r *dns.Msg, serves, above, fits bool) {
	t.Helper()
	rec := dnstest.NewRecorder(&test.ResponseWriter{RemoteIP: "10.2.0.1", TCP: true})
	c.ServeDNS(context.Background(), rec, r)
	resp := rec.Msg
	if resp == nil {
		t.Fatalf("%s: no response", r.Question[0].Name)
	}
	addrs := 0
	for _, rr := range resp.Answer {
		if rr.Header().Rrtype == dns.TypeA || rr.Header().Rrtype == dns.TypeAAAA {
			addrs++
		}
	}
	want := dns.RcodeNameError
	switch {
	case !fits:
		want = dns.RcodeYXDomain
	case serves, above:
		want = dns.RcodeSuccess
	}
	if resp.Rcode != want || (addrs > 0) != (want == dns.RcodeSuccess && serves) {
		t.Fatalf("%s: %s with %d addresses; want %s\n%v", r.Question[0].Name, dns.RcodeToString[resp.Rcode], addrs, dns.RcodeToString[want], resp)
	}
}

// FuzzParseCAA feeds caa lines (split at spaces) to the parser: it must
// refuse or accept without panicking, and what it accepts must be valid
// CAA properties that survive the wire unchanged.
func FuzzParseCAA(f *testing.F) {
	for _, s := range []string{
		"letsencrypt.org",
		"letsencrypt.org validationmethods=dns-01 accounturi=https://acme-v02.api.letsencrypt.org/acme/acct/1",
		"issuewild sectigo.com validationmethods=dns-01,tls-alpn-01",
		"issue pki.goog", "iodef mailto:security@example.net", "iodef https://example.net/caa",
		"LetsEncrypt.ORG.", "a..b", "letsencrypt.org accounturi=https://a.test/x;y", "iodef mailto:",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		props, err := parseCAA(strings.Fields(line))
		if err != nil {
			return
		}
		if len(props) == 0 || len(props) > 2 {
			t.Fatalf("%q: %d properties", line, len(props))
		}
		for _, p := range props {
			switch p.tag {
			case "issue", "issuewild":
				issuer, _, _ := strings.Cut(p.value, ";")
				if checkIssuer(issuer) != nil {
					t.Fatalf("%q: accepted issuer %q", line, issuer)
				}
			case "iodef":
				if checkIodef(p.value) != nil {
					t.Fatalf("%q: accepted iodef %q", line, p.value)
				}
			default:
				t.Fatalf("%q: tag %q", line, p.tag)
			}
			for i := 0; i < len(p.value); i++ {
				if c := p.value[i]; c < 0x20 || c > 0x7e {
					t.Fatalf("%q: value %q holds %#x", line, p.value, c)
				}
			}
			rr := &dns.CAA{Hdr: dns.RR_Header{Name: "nyud.test.", Rrtype: dns.TypeCAA, Class: dns.ClassINET}, Tag: p.tag, Value: p.value}
			m := new(dns.Msg)
			m.SetQuestion("nyud.test.", dns.TypeCAA)
			m.Answer = []dns.RR{rr}
			b, err := m.Pack()
			if err != nil {
				t.Fatalf("%q: does not pack: %v", line, err)
			}
			back := new(dns.Msg)
			if err := back.Unpack(b); err != nil {
				t.Fatalf("%q: does not unpack: %v", line, err)
			}
			got := back.Answer[0].(*dns.CAA)
			if got.Tag != p.tag || got.Value != p.value {
				t.Fatalf("%q: %s %q came back as %s %q", line, p.tag, p.value, got.Tag, got.Value)
			}
		}
	})
}

// FuzzParseRRL feeds rrl lines to the parser: no panic, and an accepted
// configuration is within the documented bounds.
func FuzzParseRRL(f *testing.F) {
	for _, s := range []string{
		"20", "50 nxdomains 10 errors 5 slip 0 window 5s table 1000", "1 slip 1 table 256",
		"0", "10 slip", "10 window 1.5s", "10 table 2000000", "10 slip 1 slip 2",
	} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, line string) {
		cfg, err := parseRRL(strings.Fields(line))
		if err != nil {
			return
		}
		for _, r := range cfg.rates {
			if r < 1 || r > maxRRLRate {
				t.Fatalf("%q: rate %v", line, r)
			}
		}
		if cfg.slip < 0 || cfg.slip > maxRRLSlip || cfg.window < time.Second || cfg.window > maxRRLWindow ||
			cfg.table < minRRLTable || cfg.table > maxRRLTable || cfg.table&(cfg.table-1) != 0 {
			t.Fatalf("%q: out of bounds: %+v", line, cfg)
		}
	})
}
