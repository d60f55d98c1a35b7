package coral

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coredns/coredns/plugin/pkg/dnstest"
	"github.com/coredns/coredns/plugin/test"
	"github.com/coredns/coredns/plugin/whoami"
	"github.com/coredns/coredns/request"
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

// BenchmarkServeDNSFloor is a Coralized answer next to CoreDNS's whoami,
// the floor eval/dnsperf measures the plugin against, in process and for
// the same queries (dnsperf's names, without EDNS, as dnsperf asks): each
// answer goes through CoreDNS's scrubbing writer and is packed, as
// CoreDNS's server does before it sends. What the server does per query
// besides (reading, unpacking, the send) is the same for both and is not
// here, so the ratio of the two is a bound on coral/whoami in
// eval/dnsperf, without the noise of a shared machine.
func BenchmarkServeDNSFloor(b *testing.B) {
	// dnsperf's answer: 2 proxies, and 3 name servers with their glue.
	world := testWorld()
	for _, a := range []string{"127.0.2.2", "127.0.2.3"} {
		world.members[2] = append(world.members[2], member(a, coraldht.ServiceDNS, time.Now()))
	}
	c := testCoral(b, world)
	c.set.nameservers = 3 // the plugin's default
	msgs := make([]*dns.Msg, 1024)
	for i := range msgs {
		m := new(dns.Msg)
		m.SetQuestion("w"+strconv.Itoa(10000+i)+".example.com.http.l2.l1.l0.nyucd.test.", dns.TypeA)
		msgs[i] = m
	}
	for _, bc := range []struct {
		name    string
		handler interface {
			ServeDNS(context.Context, dns.ResponseWriter, *dns.Msg) (int, error)
		}
		records int // in the answer
	}{
		{"coral", c, 8},
		{"whoami", whoami.Whoami{}, 2},
	} {
		b.Run(bc.name, func(b *testing.B) {
			w := &packingWriter{fixedWriter: fixedWriter{remote: &net.UDPAddr{IP: net.IPv4(10, 2, 0, 1), Port: 53000}, local: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}}}
			bc.handler.ServeDNS(context.Background(), request.NewScrubWriter(msgs[0], w), msgs[0]) // classifies 10.2.0.0/24
			if n := len(w.m.Answer) + len(w.m.Ns) + len(w.m.Extra); n != bc.records {
				b.Fatalf("%d records in the answer, want %d: %v", n, bc.records, w.m)
			}
			w.octets = 0
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				r := msgs[i%len(msgs)]
				bc.handler.ServeDNS(context.Background(), request.NewScrubWriter(r, w), r)
			}
			b.ReportMetric(float64(w.octets)/float64(b.N), "octets/answer")
		})
	}
}

// packingWriter packs what it is given, as miekg/dns's writer does.
type packingWriter struct {
	fixedWriter
	octets int
}

func (w *packingWriter) WriteMsg(m *dns.Msg) error {
	w.m = m
	wire, err := m.Pack()
	w.octets += len(wire)
	return err
}
