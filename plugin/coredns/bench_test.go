package coral

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/miekg/dns"
)

// BenchmarkServeDNS is the answer path for a classified resolver: parse,
// cached classification, proxies and name servers from the last sweep,
// cookie. eval/dnsperf measures the same through a real CoreDNS.
func BenchmarkServeDNS(b *testing.B) {
	for _, bc := range []struct {
		name string
		q    string
	}{
		{"coralized", "w%d.example.com.http.l2.l1.l0.nyucd.test."},
		{"alias", "w%d.example.com.nyud.test."},
		{"referral", "l2.l1.l0.nyucd.test."},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := testCoral(b, testWorld())
			msgs := make([]*dns.Msg, 1024)
			for i := range msgs {
				m := new(dns.Msg)
				m.SetQuestion(strings.ReplaceAll(bc.q, "%d", strconv.Itoa(i)), dns.TypeA)
				m.SetEdns0(1232, false)
				msgs[i] = m
			}
			w := &test.ResponseWriter{RemoteIP: "10.2.0.1"}
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				rec := dnstest.NewRecorder(w)
				c.ServeDNS(context.Background(), rec, msgs[i%len(msgs)])
				if len(rec.Msg.Ns) == 0 {
					b.Fatal("no authority section")
				}
			}
		})
	}
}

// BenchmarkServeDNSProximity is BenchmarkServeDNS's coralized case with
// proximity on and the resolver's /24 mapped: no hints (the usual case, the
// choice without a target) and hints for one member of the cluster.
func BenchmarkServeDNSProximity(b *testing.B) {
	for _, bc := range []struct {
		name  string
		hints fakeHints
	}{
		{"no_hints", fakeHints{}},
		{"hinted", fakeHints{"198.51.100.0/24": {"127.0.2.81"}}},
	} {
		b.Run(bc.name, func(b *testing.B) {
			c := testCoral(b, testWorld())
			p := withProximity(c, hopsTo, bc.hints.find, time.Second)
			msgs := make([]*dns.Msg, 1024)
			for i := range msgs {
				m := new(dns.Msg)
				m.SetQuestion("w"+strconv.Itoa(i)+".example.com.http.l2.l1.l0.nyucd.test.", dns.TypeA)
				m.SetEdns0(1232, false)
				msgs[i] = m
			}
			w := &test.ResponseWriter{RemoteIP: "10.2.0.1"}
			c.ServeDNS(context.Background(), dnstest.NewRecorder(w), msgs[0]) // maps 10.2.0.0/24
			p.wg.Wait()
			b.ReportAllocs()
			b.ResetTimer()
			for i := 0; b.Loop(); i++ {
				rec := dnstest.NewRecorder(w)
				c.ServeDNS(context.Background(), rec, msgs[i%len(msgs)])
				if len(rec.Msg.Ns) == 0 {
					b.Fatal("no authority section")
				}
			}
		})
	}
}
