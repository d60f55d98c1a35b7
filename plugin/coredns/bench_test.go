package coral

import (
	"context"
	"strconv"
	"strings"
	"testing"

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
