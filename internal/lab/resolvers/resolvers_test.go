//go:build linux

package resolvers

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/miekg/dns"
)

// This package's own tests use 127.0.184.0/24; the labs have theirs.
var (
	testRoot   = netip.MustParseAddr("127.0.184.1")
	testServer = map[Kind]netip.Addr{
		Unbound:  netip.MustParseAddr("127.0.184.2"),
		BIND:     netip.MustParseAddr("127.0.184.3"),
		Knot:     netip.MustParseAddr("127.0.184.4"),
		PowerDNS: netip.MustParseAddr("127.0.184.5"),
	}
)

func TestOptionsNormalize(t *testing.T) {
	dir := t.TempDir()
	hint := netip.MustParseAddr("127.0.184.1")
	ok := Options{Addr: netip.MustParseAddr("::ffff:127.0.184.2"), RootHints: []netip.Addr{netip.MustParseAddr("::ffff:127.0.184.1")}, Dir: "rel"}
	t.Chdir(dir)
	if err := ok.normalize(); err != nil {
		t.Fatal(err)
	}
	if !ok.Addr.Is4() || ok.RootHints[0] != hint || ok.Dir != filepath.Join(dir, "rel") || ok.StartTimeout != 20*time.Second {
		t.Fatalf("normalized to %+v", ok)
	}
	if st, err := os.Stat(ok.Dir); err != nil || !st.IsDir() {
		t.Fatalf("Dir not created: %v", err)
	}
	for _, c := range []struct {
		o    Options
		want string
	}{
		{Options{Addr: netip.MustParseAddr("::1"), RootHints: []netip.Addr{hint}, Dir: dir}, "only IPv4"},
		{Options{Addr: hint, Dir: dir}, "need 1 to 26 RootHints, got 0"},
		{Options{Addr: hint, RootHints: make([]netip.Addr, 27), Dir: dir}, "got 27"},
		{Options{Addr: hint, RootHints: []netip.Addr{netip.MustParseAddr("::1")}, Dir: dir}, "RootHints ::1"},
		{Options{Addr: hint, RootHints: []netip.Addr{hint}}, "Dir is required"},
	} {
		if err := c.o.normalize(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("normalize(%+v) = %v, want an error with %q", c.o, err, c.want)
		}
	}
}

// TestEveryResolverResolvesThroughTheFakeRoot starts each installed
// resolver against a fake root that answers for example.test. itself, and
// resolves a name through it.
func TestEveryResolverResolvesThroughTheFakeRoot(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("CI") == "true" {
			t.Fatal("not root (binds port 53); CI=true, so this is a failure, not a skip")
		}
		t.Skip("not root: binds port 53 on 127.0.184.0/24")
	}
	root := MustParseZone(".", RootZone([]netip.Addr{testRoot})+
		"example.test. 3600 IN A 192.0.2.7\n")
	auth, err := StartAuthority(testRoot, root)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { auth.Close() })
	for _, kind := range []Kind{Unbound, BIND, Knot, PowerDNS} {
		t.Run(string(kind), func(t *testing.T) {
			if err := Available(kind); err != nil {
				if os.Getenv("CI") == "true" {
					t.Fatal(err)
				}
				t.Skip(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			r, err := Start(ctx, kind, Options{Addr: testServer[kind], RootHints: []netip.Addr{testRoot}, Dir: t.TempDir()})
			if err != nil {
				t.Fatal(err)
			}
			defer r.Stop()
			m := new(dns.Msg)
			m.SetQuestion("example.test.", dns.TypeA)
			c := &dns.Client{Timeout: 5 * time.Second}
			resp, _, err := c.Exchange(m, netip.AddrPortFrom(r.Addr, 53).String())
			if err != nil {
				t.Fatalf("%v\n%s", err, r.Log())
			}
			if len(resp.Answer) != 1 || !strings.Contains(resp.Answer[0].String(), "192.0.2.7") {
				t.Fatalf("answer %v\n%s", resp, r.Log())
			}
			if err := r.FlushCache(); err != nil {
				t.Fatalf("FlushCache: %v", err)
			}
			if r.Config == "" {
				t.Fatalf("%s: no Config path", kind)
			}
		})
	}
}
