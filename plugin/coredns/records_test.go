package coral

import (
	"context"
	"net"
	"net/netip"
	"testing"

	"github.com/miekg/dns"
)

// TestResponseRecordsSections: sections filled past the room the arrays
// give them reallocate instead of writing into the next section, and
// records past the arrays are allocated one by one, all with the right
// contents.
func TestResponseRecordsSections(t *testing.T) {
	rs := new(responseRecords)
	m := new(dns.Msg)
	rs.sections(m, 2, 3)
	var want []netip.Addr
	for i := range 12 {
		a := netip.AddrFrom4([4]byte{192, 0, 2, byte(i)})
		want = append(want, a)
		m.Answer = append(m.Answer, rs.addr("a.test.", a, 30))
		m.Ns = append(m.Ns, rs.nameserver("test.", "ns"+string(rune('a'+i))+".test.", 60))
		m.Extra = append(m.Extra, rs.addr("g.test.", a, 60))
	}
	m.Answer = append(m.Answer, rs.addr("a.test.", netip.MustParseAddr("2001:db8::1"), 30))
	for i, a := range want {
		if got := m.Answer[i].(*dns.A); got.Hdr.Name != "a.test." || !got.A.Equal(net.IP(a.AsSlice())) || got.Hdr.Ttl != 30 {
			t.Errorf("answer %d: %v, want A %v", i, got, a)
		}
		if got := m.Ns[i].(*dns.NS); got.Hdr.Name != "test." || got.Ns != "ns"+string(rune('a'+i))+".test." {
			t.Errorf("authority %d: %v", i, got)
		}
		if got := m.Extra[i].(*dns.A); got.Hdr.Name != "g.test." || !got.A.Equal(net.IP(a.AsSlice())) {
			t.Errorf("additional %d: %v, want A %v", i, got, a)
		}
	}
	if aaaa, ok := m.Answer[12].(*dns.AAAA); !ok || aaaa.AAAA.String() != "2001:db8::1" {
		t.Errorf("AAAA: %v", m.Answer[12])
	}
	var nilRecords *responseRecords
	if rr := nilRecords.addr("x.test.", want[0], 5); rr.(*dns.A).A.String() != "192.0.2.0" {
		t.Errorf("nil records: %v", rr)
	}
}

// TestAnswerAllocations bounds what a Coralized answer allocates in the
// plugin, with a writer that allocates nothing itself: 4, the message, its
// question, one allocation for all its records and its OPT record. It was
// 23 while every record and every address was an allocation of its own,
// and 7 while the request's state and the members picked from the live
// set were allocations too.
func TestAnswerAllocations(t *testing.T) {
	c := testCoral(t, testWorld())
	q := new(dns.Msg)
	q.SetQuestion("w1.example.com.http.l2.l1.l0.nyucd.test.", dns.TypeA)
	q.SetEdns0(1232, false)
	w := &fixedWriter{remote: &net.UDPAddr{IP: net.IPv4(10, 2, 0, 1), Port: 53000}, local: &net.UDPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 53}}
	c.ServeDNS(context.Background(), w, q) // classifies 10.2.0.0/24
	if w.m == nil || len(w.m.Answer) == 0 || len(w.m.Ns) == 0 {
		t.Fatalf("no answer: %v", w.m)
	}
	const limit = 4
	allocs := testing.AllocsPerRun(1000, func() { c.ServeDNS(context.Background(), w, q) })
	if allocs > limit {
		t.Errorf("a Coralized answer allocates %.0f times, want at most %d", allocs, limit)
	}
}

// fixedWriter is a dns.ResponseWriter whose addresses are fixed values, so
// that it allocates nothing per call (test.ResponseWriter parses its
// address on every call).
type fixedWriter struct {
	remote, local net.Addr
	m             *dns.Msg
}

func (w *fixedWriter) LocalAddr() net.Addr         { return w.local }
func (w *fixedWriter) RemoteAddr() net.Addr        { return w.remote }
func (w *fixedWriter) WriteMsg(m *dns.Msg) error   { w.m = m; return nil }
func (w *fixedWriter) Write(b []byte) (int, error) { return len(b), nil }
func (w *fixedWriter) Close() error                { return nil }
func (w *fixedWriter) TsigStatus() error           { return nil }
func (w *fixedWriter) TsigTimersOnly(bool)         {}
func (w *fixedWriter) Hijack()                     {}
