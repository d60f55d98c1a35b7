//go:build linux

package resolverlab

// The amplification lab: how many octets the real bin/coredns sends back
// per octet of query, measured with dig, and what response rate limiting
// (the coral plugin's rrl) leaves of a flood from one spoofable /24.
//
//	127.0.64.1        S1, no rrl, with caa lines
//	127.0.64.2        S2, rrl 10 (slip 2)
//	127.0.64.3        S3, rrl 10 slip 0
//	127.0.64.80, .81  two proxies (DSHT nodes with the HTTP service)
//
// All three servers are one cluster, so an answer names three name servers
// and two proxies, the worst case the issue measured. AMPLIFICATION_PLAIN=1
// leaves out the caa and rrl lines (for a binary that predates them) and
// skips what needs them.

import (
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/labconf"
	"github.com/coralcdn/coral/internal/lab/proc"
	"github.com/miekg/dns"
)

var ampServers = []netip.Addr{netip.MustParseAddr("127.0.64.1"), netip.MustParseAddr("127.0.64.2"), netip.MustParseAddr("127.0.64.3")}

func startAmplificationLab(t *testing.T, plain bool) {
	t.Helper()
	bin := corednsBinary(t)
	extra := [][]labconf.Directive{
		{labconf.D("caa", "letsencrypt.org", "validationmethods=dns-01", "accounturi=https://acme-v02.api.letsencrypt.org/acme/acct/123456789")},
		{labconf.D("rrl", "10")},
		{labconf.D("rrl", "10", "slip", "0")},
	}
	for i, a := range ampServers {
		var bs []netip.AddrPort
		if i > 0 {
			bs = []netip.AddrPort{netip.AddrPortFrom(ampServers[0], labDHTPort)}
		}
		cp := labconf.CoralPlugin{
			Zone:       "nyucd.test",
			Alias:      "nyud.test",
			Node:       labconf.Node{Listen: netip.AddrPortFrom(a, labDHTPort), Bootstrap: bs, Clusters: map[int]string{1: "amp", 2: "amp"}},
			Classify:   []string{"127.0.0.0/8 2"},
			LiveWithin: "5s",
			CheckEvery: "1s",
		}
		if !plain {
			cp.Extra = extra[i]
		}
		corefile := labconf.Corefile("", labconf.D("nyucd.test", "nyud.test").With(
			labconf.D("bind", a), cp.Directive(), labconf.D("ready", a.String()+":8181")))
		dir := t.TempDir()
		path := filepath.Join(dir, "Corefile")
		if err := labconf.WriteFile(path, corefile); err != nil {
			t.Fatal(err)
		}
		pr, err := proc.Start([]string{bin, "-conf", path}, proc.Options{Name: fmt.Sprint("amp", i+1), Dir: dir, Log: filepath.Join(dir, "coredns.log")})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() {
			pr.Kill()
			if t.Failed() {
				t.Logf("--- %s log:\n%s", a, pr.LogTail(30))
			}
		})
	}
	// No key: loopback nodes share the public development key.
	for _, a := range []string{"127.0.64.80", "127.0.64.81"} {
		startProxyNode(t, netip.MustParseAddr(a), nil, "amp", ampServers[:1])
	}
	for _, a := range ampServers {
		waitFor(t, a.String()+" ready", 30*time.Second, func() error {
			resp, err := http.Get("http://" + a.String() + ":8181/ready")
			if err != nil {
				return err
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return fmt.Errorf("ready: %s", resp.Status)
			}
			return nil
		})
		// Both proxies and all three name servers in the answer.
		waitFor(t, "full answers at "+a.String(), 30*time.Second, func() error {
			r, err := ask(a, "probe.example.com.http.l2.l1.l0.nyucd.test", dns.TypeA)
			if err != nil {
				return err
			}
			if len(r.Answer) != 2 || len(r.Ns) != 3 {
				return fmt.Errorf("%d answers, %d name servers: %v", len(r.Answer), len(r.Ns), r)
			}
			return nil
		})
	}
}

var (
	digQuerySize = regexp.MustCompile(`;; QUERY SIZE: (\d+)`)
	digReplySize = regexp.MustCompile(`;; MSG SIZE\s+rcvd: (\d+)`)
)

// digSizes runs dig as an attacker would (EDNS with a large buffer, no
// cookie, no recursion) and returns the sizes of query and response.
func digSizes(t *testing.T, server netip.Addr, name, qtype string) (int, int) {
	t.Helper()
	out, err := exec.Command("dig", "@"+server.String(), "+qr", "+norecurse", "+nocookie", "+bufsize=4096", "+tries=1", "+time=2", name, qtype).CombinedOutput()
	if err != nil {
		t.Fatalf("dig %s %s: %v\n%s", name, qtype, err, out)
	}
	q, r := digQuerySize.FindSubmatch(out), digReplySize.FindSubmatch(out)
	if q == nil || r == nil {
		t.Fatalf("dig %s %s: no sizes in\n%s", name, qtype, out)
	}
	qs, _ := strconv.Atoi(string(q[1]))
	rs, _ := strconv.Atoi(string(r[1]))
	return qs, rs
}

// TestAmplification measures the response/query size factor for the
// queries an attacker would pick, with dig against the real server, and
// checks that ANY is no better an amplifier than an ordinary query.
func TestAmplification(t *testing.T) {
	if _, err := exec.LookPath("dig"); err != nil {
		t.Skip("dig missing (test/resolverlab/install-deps.sh)")
	}
	plain := os.Getenv("AMPLIFICATION_PLAIN") == "1"
	startAmplificationLab(t, plain)
	factors := map[string]float64{}
	for _, q := range []struct{ name, qtype string }{
		{"www.example.com.http.l2.l1.l0.nyucd.test", "A"},
		{"www.example.com.http.l2.l1.l0.nyucd.test", "ANY"},
		{"www.example.com.nyud.test", "A"},
		{"www.example.com.nyud.test", "ANY"},
		{"www-example-com.nyud.test", "A"},
		{"nyud.test", "ANY"},
		{"nyucd.test", "ANY"},
		{"nyucd.test", "NS"},
		{"l2.l1.l0.nyucd.test", "ANY"},
		{"nyud.test", "CAA"},
	} {
		qs, rs := digSizes(t, ampServers[0], q.name, q.qtype)
		f := float64(rs) / float64(qs)
		factors[q.name+" "+q.qtype] = f
		t.Logf("%-42s %-4s query %3d  response %4d  factor %.1f", q.name, q.qtype, qs, rs, f)
	}
	for k, f := range factors {
		if strings.HasSuffix(k, " ANY") && f > 3.5 {
			t.Errorf("%s: factor %.1f, want at most 3.5 (RFC 8482 minimal answer)", k, f)
		}
	}
	if !plain && factors["nyud.test CAA"] <= 1 {
		t.Errorf("nyud.test CAA: factor %.1f, no CAA set answered", factors["nyud.test CAA"])
	}
}

// TestAmplificationRRL floods each server with 1000 A queries a second
// for two seconds from one address and counts the octets that come back.
func TestAmplificationRRL(t *testing.T) {
	if os.Getenv("AMPLIFICATION_PLAIN") == "1" {
		t.Skip("AMPLIFICATION_PLAIN: no rrl")
	}
	startAmplificationLab(t, false)
	m := new(dns.Msg)
	m.SetQuestion("www.example.com.http.l2.l1.l0.nyucd.test.", dns.TypeA)
	m.SetEdns0(4096, false)
	m.RecursionDesired = false
	query, err := m.Pack()
	if err != nil {
		t.Fatal(err)
	}
	for i, name := range []string{"no rrl", "rrl 10 (slip 2)", "rrl 10 slip 0"} {
		sent, rcvd, replies := flood(t, ampServers[i], query, 2000, time.Millisecond)
		f := float64(rcvd) / float64(sent)
		t.Logf("%-16s %4d queries, %6d octets out; %4d replies, %6d octets back: factor %.2f", name, 2000, sent, replies, rcvd, f)
		switch i {
		case 0:
			if f < 3 {
				t.Errorf("%s: factor %.2f; the lab is not giving full answers", name, f)
			}
		default:
			// The burst of 10 full answers, then slips (a query's size)
			// or nothing.
			if f > 1.1 {
				t.Errorf("%s: factor %.2f, want at most 1.1", name, f)
			}
		}
	}
}

// flood sends query n times, one every gap, from one UDP socket on
// 127.0.0.1, and returns the octets sent and received and the replies.
func flood(t *testing.T, server netip.Addr, query []byte, n int, gap time.Duration) (sent, rcvd, replies int) {
	t.Helper()
	conn, err := net.DialUDP("udp", &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1)}, net.UDPAddrFromAddrPort(netip.AddrPortFrom(server, 53)))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	done := make(chan struct{})
	go func() {
		defer close(done)
		buf := make([]byte, 65535)
		for {
			_ = conn.SetReadDeadline(time.Now().Add(2 * time.Second))
			k, err := conn.Read(buf)
			if err != nil {
				return
			}
			rcvd += k
			replies++
		}
	}()
	tick := time.NewTicker(gap)
	defer tick.Stop()
	for range n {
		<-tick.C
		k, err := conn.Write(query)
		if err != nil {
			t.Fatal(err)
		}
		sent += k
	}
	<-done
	return sent, rcvd, replies
}
