//go:build linux

package fleet

import (
	"context"
	"net"
	"net/netip"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/miekg/dns"

	"github.com/coralcdn/coral/internal/lab/netns"
)

// resolverThatDrops is a resolver in its own namespace that answers name
// with 198.18.0.10, ignoring the first drop queries it gets, as Unbound
// does with a query it took too long to resolve (discard-timeout). It
// records the ID of every query.
type resolverThatDrops struct {
	mu   sync.Mutex
	ids  []uint16
	drop int
}

func (r *resolverThatDrops) serve(pc net.PacketConn) {
	buf := make([]byte, 1500)
	for {
		n, from, err := pc.ReadFrom(buf)
		if err != nil {
			return
		}
		q := new(dns.Msg)
		if q.Unpack(buf[:n]) != nil || len(q.Question) != 1 {
			continue
		}
		r.mu.Lock()
		r.ids = append(r.ids, q.Id)
		answer := len(r.ids) > r.drop
		r.mu.Unlock()
		if !answer {
			continue
		}
		resp := new(dns.Msg)
		resp.SetReply(q)
		resp.Answer = []dns.RR{&dns.A{Hdr: dns.RR_Header{Name: q.Question[0].Name, Rrtype: dns.TypeA, Class: dns.ClassINET, Ttl: 30},
			A: net.IPv4(198, 18, 0, 10)}}
		if out, err := resp.Pack(); err == nil {
			_, _ = pc.WriteTo(out, from)
		}
	}
}

func (r *resolverThatDrops) queries() []uint16 {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.ids)
}

// startResolverThatDrops starts a client host and a resolver host that
// drops the first drop queries.
func startResolverThatDrops(t *testing.T, drop int) (*Client, *resolverThatDrops) {
	t.Helper()
	if err := netns.Available(false); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal(err)
		}
		t.Skipf("skipping: %v", err)
	}
	l, err := netns.New(netns.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := l.Close(); err != nil {
			t.Error(err)
		}
	})
	resolverAddr, clientAddr := netip.MustParseAddr("198.18.0.53"), netip.MustParseAddr("198.18.0.100")
	rh, err := l.AddHost("resolver", resolverAddr)
	if err != nil {
		t.Fatal(err)
	}
	ch, err := l.AddHost("client", clientAddr)
	if err != nil {
		t.Fatal(err)
	}
	pc, err := rh.ListenPacket("udp", netip.AddrPortFrom(resolverAddr, PortDNS).String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pc.Close() })
	r := &resolverThatDrops{drop: drop}
	go r.serve(pc)
	return &Client{Addr: clientAddr, Host: ch, Resolver: resolverAddr}, r
}

// TestLookupAsksAgainLikeAStub: a resolver that drops a query it answers
// late (Unbound's discard-timeout) expects the stub to ask again; the
// client does after its attempt's wait, with the same query, and takes
// the answer to the second.
func TestLookupAsksAgainLikeAStub(t *testing.T) {
	c, r := startResolverThatDrops(t, 1)
	const wait = 300 * time.Millisecond
	addrs, ttl, took, err := c.lookup(context.Background(), "www.example.test.nyud.test", wait)
	if err != nil {
		t.Fatalf("lookup: %v (queries %v)", err, r.queries())
	}
	if want := []netip.Addr{netip.MustParseAddr("198.18.0.10")}; !slices.Equal(addrs, want) || ttl != 30*time.Second {
		t.Errorf("answer %v TTL %v, want %v TTL 30s", addrs, ttl, want)
	}
	ids := r.queries()
	if len(ids) != 2 || ids[0] != ids[1] {
		t.Errorf("queries with IDs %v, want the same query twice", ids)
	}
	if took < wait {
		t.Errorf("took %v: answered before the first attempt's wait (%v) ran out", took, wait)
	}
}

// TestLookupGivesUpAfterItsAttempts: a resolver that never answers gets
// stubAttempts queries, and the lookup fails after as many waits.
func TestLookupGivesUpAfterItsAttempts(t *testing.T) {
	c, r := startResolverThatDrops(t, 1000)
	const wait = 200 * time.Millisecond
	_, _, took, err := c.lookup(context.Background(), "www.example.test.nyud.test", wait)
	if err == nil {
		t.Fatal("lookup answered by a resolver that never answers")
	}
	if ids := r.queries(); len(ids) != stubAttempts {
		t.Errorf("%d queries (%v), want %d", len(ids), ids, stubAttempts)
	}
	if took < stubAttempts*wait {
		t.Errorf("gave up after %v, want at least %v", took, stubAttempts*wait)
	}
}
