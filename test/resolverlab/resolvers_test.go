//go:build linux

package resolverlab

import (
	"fmt"
	"net/netip"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/coralcdn/coral/internal/lab/resolvers"
	"github.com/miekg/dns"
)

// Loopback addresses used by this test: 127.0.50.0/24 only.
var (
	rootAddr    = netip.MustParseAddr("127.0.50.1")
	exampleAddr = netip.MustParseAddr("127.0.50.2")
	// Resolvers get 127.0.50.10, .11, ...
	firstResolverAddr = netip.MustParseAddr("127.0.50.10")
)

// requireLab skips the test when resolvers cannot run here, or fails it
// when CI=true (where they must).
func requireLab(t *testing.T, kinds ...resolvers.Kind) {
	t.Helper()
	var why []string
	if os.Geteuid() != 0 {
		why = append(why, "not root: the lab binds port 53 on 127.0.50.0/24")
	} else {
		for _, k := range kinds {
			if err := resolvers.Available(k); err != nil {
				why = append(why, fmt.Sprintf("%s: %v", k, err))
			}
		}
	}
	if len(why) == 0 {
		return
	}
	msg := "resolverlab: cannot run resolvers (run test/resolverlab/install-deps.sh as root):\n" + strings.Join(why, "\n")
	if os.Getenv("CI") == "true" {
		t.Fatal(msg + "\nCI=true, so this is a failure, not a skip")
	}
	t.Skip(msg)
}

// startFakeDNS starts the fake root (delegating example.test.) and the
// example.test. authority.
func startFakeDNS(t *testing.T) (root, example *resolvers.Authority) {
	t.Helper()
	rootZone := resolvers.MustParseZone(".", resolvers.RootZone([]netip.Addr{rootAddr})+
		"example.test. 172800 IN NS ns1.example.test.\n"+
		"ns1.example.test. 172800 IN A "+exampleAddr.String()+"\n")
	exampleZone := resolvers.MustParseZone("example.test.", `
$TTL 3600
@    IN SOA ns1 hostmaster 1 3600 600 86400 60
@    IN NS  ns1
ns1  IN A   `+exampleAddr.String()+`
www  IN A   192.0.2.1
`)
	var err error
	root, err = resolvers.StartAuthority(rootAddr, rootZone)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { root.Close() })
	example, err = resolvers.StartAuthority(exampleAddr, exampleZone)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { example.Close() })
	return root, example
}

// TestAuthority checks the fake authoritative server's answers directly:
// referrals, minimised-query NODATA, NXDOMAIN, authoritative answers.
func TestAuthority(t *testing.T) {
	requireLab(t) // binds port 53: needs root
	root, example := startFakeDNS(t)
	c := &dns.Client{Timeout: 2 * time.Second}
	ask := func(server netip.Addr, name string, qtype uint16) *dns.Msg {
		t.Helper()
		m := new(dns.Msg)
		m.SetQuestion(name, qtype)
		m.RecursionDesired = false
		m.SetEdns0(1232, false)
		r, _, err := c.Exchange(m, netip.AddrPortFrom(server, 53).String())
		if err != nil {
			t.Fatalf("%s %s @%s: %v", name, dns.TypeToString[qtype], server, err)
		}
		return r
	}
	for _, tc := range []struct {
		server                 netip.Addr
		name                   string
		qtype                  uint16
		rcode                  int
		aa                     bool
		answer, authority, add int
	}{
		{rootAddr, ".", dns.TypeNS, dns.RcodeSuccess, true, 1, 0, 1},
		{rootAddr, "test.", dns.TypeNS, dns.RcodeSuccess, true, 0, 1, 0},          // empty non-terminal: NODATA
		{rootAddr, "test.", dns.TypeA, dns.RcodeSuccess, true, 0, 1, 0},           // NODATA
		{rootAddr, "_.test.", dns.TypeA, dns.RcodeNameError, true, 0, 1, 0},       // NXDOMAIN
		{rootAddr, "example.test.", dns.TypeNS, dns.RcodeSuccess, false, 0, 1, 1}, // referral
		{rootAddr, "www.example.test.", dns.TypeA, dns.RcodeSuccess, false, 0, 1, 1},
		{rootAddr, "example.test.", dns.TypeDS, dns.RcodeSuccess, true, 0, 1, 0}, // parent side NODATA
		{rootAddr, "nope.", dns.TypeA, dns.RcodeNameError, true, 0, 1, 0},
		{rootAddr, "a.root-servers.test.", dns.TypeA, dns.RcodeSuccess, true, 1, 0, 0},
		{exampleAddr, "example.test.", dns.TypeNS, dns.RcodeSuccess, true, 1, 0, 1},
		{exampleAddr, "www.example.test.", dns.TypeA, dns.RcodeSuccess, true, 1, 0, 0},
		{exampleAddr, "www.example.test.", dns.TypeAAAA, dns.RcodeSuccess, true, 0, 1, 0},
		{exampleAddr, "x.www.example.test.", dns.TypeA, dns.RcodeNameError, true, 0, 1, 0},
		{exampleAddr, "other.test.", dns.TypeA, dns.RcodeRefused, false, 0, 0, 0},
	} {
		r := ask(tc.server, tc.name, tc.qtype)
		add := len(r.Extra)
		if r.IsEdns0() != nil {
			add--
		}
		if r.Rcode != tc.rcode || r.Authoritative != tc.aa || len(r.Answer) != tc.answer || len(r.Ns) != tc.authority || add != tc.add {
			t.Errorf("@%s %s %s: got rcode %s aa=%v %d/%d/%d, want %s aa=%v %d/%d/%d\n%s", tc.server, tc.name,
				dns.TypeToString[tc.qtype], dns.RcodeToString[r.Rcode], r.Authoritative, len(r.Answer), len(r.Ns), add,
				dns.RcodeToString[tc.rcode], tc.aa, tc.answer, tc.authority, tc.add, r)
		}
	}
	if n := len(root.Queries()) + len(example.Queries()); n != 14 {
		t.Errorf("authorities logged %d queries, want 14", n)
	}
}

// TestResolvers starts every resolver, with QNAME minimisation on and off
// (and once more with Debug logging), against the fake root and checks that
// it resolves www.example.test. through the delegation, from its own
// address, and that FlushCache empties its cache.
func TestResolvers(t *testing.T) {
	requireLab(t, resolvers.Kinds...)
	start := time.Now()
	root, example := startFakeDNS(t)

	cases := []struct {
		name        string
		qmin, debug bool
	}{
		{"qmin=on", true, false},
		{"qmin=off", false, false},
		{"debug", true, true},
	}
	addr := firstResolverAddr
	var mu sync.Mutex
	used := map[netip.Addr]bool{}
	for _, kind := range resolvers.Kinds {
		for _, tc := range cases {
			a := addr
			addr = addr.Next()
			t.Run(string(kind)+"/"+tc.name, func(t *testing.T) {
				t.Parallel()
				mu.Lock()
				used[a] = true
				mu.Unlock()
				testResolver(t, kind, resolvers.Options{
					Addr:              a,
					RootHints:         []netip.Addr{rootAddr},
					QNameMinimisation: tc.qmin,
					Dir:               t.TempDir(),
					Debug:             tc.debug,
				}, root, example)
			})
		}
	}
	t.Cleanup(func() {
		// Runs after the parallel subtests: every upstream query must have
		// come from the address of a resolver that ran.
		mu.Lock()
		defer mu.Unlock()
		for _, auth := range []*resolvers.Authority{root, example} {
			for _, q := range auth.Queries() {
				if !used[q.From.Addr()] {
					t.Errorf("authority %s got a query from %s, not a resolver address: %s", auth.Addr, q.From, q)
				}
			}
		}
		t.Logf("%d resolvers started, tested and stopped in %v", len(used), time.Since(start).Round(time.Millisecond))
	})
}

// TestStartFailure checks that Start reports a resolver that cannot bind
// its address promptly, with the resolver's own explanation.
func TestStartFailure(t *testing.T) {
	requireLab(t, resolvers.Kinds...)
	for i, kind := range resolvers.Kinds {
		addr := netip.AddrFrom4([4]byte{127, 0, 50, byte(100 + i)})
		t.Run(string(kind), func(t *testing.T) {
			t.Parallel()
			// Hold UDP and TCP port 53 on the address.
			busy, err := resolvers.StartAuthority(addr)
			if err != nil {
				t.Fatal(err)
			}
			defer busy.Close()
			t0 := time.Now()
			r, err := resolvers.Start(t.Context(), kind, resolvers.Options{
				Addr:         addr,
				RootHints:    []netip.Addr{rootAddr},
				Dir:          t.TempDir(),
				StartTimeout: 10 * time.Second,
			})
			if err == nil {
				r.Stop()
				t.Fatalf("Start succeeded on a busy address")
			}
			if !strings.Contains(err.Error(), "exited before answering") || !strings.Contains(err.Error(), "--- "+string(kind)+" log ---") {
				t.Errorf("want an early-exit error with the log, got: %v", err)
			}
			if d := time.Since(t0); d > 5*time.Second {
				t.Errorf("took %v to notice", d)
			}
			t.Logf("%s failed in %v", kind, time.Since(t0).Round(time.Millisecond))
		})
	}
}

func testResolver(t *testing.T, kind resolvers.Kind, o resolvers.Options, root, example *resolvers.Authority) {
	addr, qmin := o.Addr, o.QNameMinimisation
	t0 := time.Now()
	r, err := resolvers.Start(t.Context(), kind, o)
	if err != nil {
		t.Fatal(err)
	}
	started := time.Since(t0)
	t.Cleanup(func() {
		if err := r.Stop(); err != nil {
			t.Errorf("stop: %v\n%s", err, r.LogTail(8000))
		}
		if err := r.Stop(); err != nil { // idempotent
			t.Errorf("second stop: %v", err)
		}
		if r.Running() {
			t.Errorf("still running after Stop")
		}
	})
	fail := func(format string, args ...any) {
		t.Helper()
		t.Fatalf("%s\n--- upstream queries from %s ---\n%s%s--- %s log ---\n%s", fmt.Sprintf(format, args...),
			addr, queryLog(root, addr), queryLog(example, addr), kind, r.LogTail(20000))
	}

	c := &dns.Client{Timeout: 5 * time.Second}
	resolve := func() *dns.Msg {
		t.Helper()
		m := new(dns.Msg)
		m.SetQuestion("www.example.test.", dns.TypeA)
		resp, _, err := c.Exchange(m, netip.AddrPortFrom(addr, 53).String())
		if err != nil {
			fail("query www.example.test. A: %v", err)
		}
		if resp.Rcode != dns.RcodeSuccess {
			fail("www.example.test. A: rcode %s\n%s", dns.RcodeToString[resp.Rcode], resp)
		}
		var got []string
		for _, rr := range resp.Answer {
			if a, ok := rr.(*dns.A); ok {
				got = append(got, a.A.String())
			}
		}
		if len(got) != 1 || got[0] != "192.0.2.1" {
			fail("www.example.test. A: got %v, want [192.0.2.1]\n%s", got, resp)
		}
		return resp
	}
	resolve()

	rootQs, exampleQs := root.QueriesFrom(addr), example.QueriesFrom(addr)
	if len(rootQs) == 0 || len(exampleQs) == 0 {
		fail("want queries from %s at both the root (%d) and example.test. (%d)", addr, len(rootQs), len(exampleQs))
	}
	// With minimisation the first question the root gets about the lab
	// name is for a shorter name (kresd then falls back to the full name
	// when it gets NODATA for the empty non-terminal test.); without it,
	// the full name.
	var first string
	for _, q := range rootQs {
		if n := dns.CanonicalName(q.Name); n == "test." || dns.IsSubDomain("example.test.", n) {
			first = n
			break
		}
	}
	if (first == "www.example.test.") == qmin {
		fail("QNAME minimisation %v, but the root's first question about the name was %q", qmin, first)
	}

	// After a cache flush the resolver must ask example.test. again.
	countWWW := func() int {
		n := 0
		for _, q := range example.QueriesFrom(addr) {
			if strings.EqualFold(q.Name, "www.example.test.") && q.Type == dns.TypeA {
				n++
			}
		}
		return n
	}
	before := countWWW()
	resolve() // cached
	if n := countWWW(); n != before {
		fail("second query was not answered from cache: %d upstream www queries, want %d", n, before)
	}
	if err := r.FlushCache(); err != nil {
		fail("%v", err)
	}
	resolve()
	if n := countWWW(); n <= before {
		fail("after FlushCache, no new upstream query for www.example.test. (%d)", n)
	}
	if os.Getenv("RESOLVERLAB_LOG") != "" {
		t.Logf("--- %s log ---\n%s", kind, r.Log())
	}
	t.Logf("%s on %s: ready in %v, done in %v; %d root and %d example.test. queries:\n%s%s", kind, addr,
		started.Round(time.Millisecond), time.Since(t0).Round(time.Millisecond), len(rootQs), len(exampleQs),
		queryLog(root, addr), queryLog(example, addr))
}

func queryLog(a *resolvers.Authority, from netip.Addr) string {
	var b strings.Builder
	for _, q := range a.QueriesFrom(from) {
		fmt.Fprintf(&b, "  @%s %s\n", a.Addr, q)
	}
	return b.String()
}
