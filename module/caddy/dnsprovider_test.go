package coralcaddy

import (
	"context"
	"errors"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/caddyserver/caddy/v2"
	"github.com/caddyserver/caddy/v2/caddyconfig/caddyfile"
	"github.com/coralcdn/coral/coraldht/acmetxt"
	"github.com/libdns/libdns"
	"go.uber.org/zap"
)

// TestDNSProviderPublishes: certmagic's calls (a zone as FindZoneByFQDN
// gives it, a name relative to it) put the challenge values where another
// node of the network, a name server's, finds them; anything but an ACME
// challenge TXT record is refused.
func TestDNSProviderPublishes(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	server := &App{Listen: "127.0.3.80:4000"}
	caddyNode := &App{Listen: "127.0.3.81:4000", Bootstrap: []string{"127.0.3.80:4000"}}
	for _, a := range []*App{server, caddyNode} {
		if err := a.Provision(ctx); err != nil {
			t.Fatal(err)
		}
		if err := a.Start(); err != nil {
			t.Fatal(err)
		}
		defer a.Cleanup()
	}
	p := &DNSProvider{app: caddyNode, logger: zap.NewNop()}
	recs := []libdns.Record{
		libdns.TXT{Name: "_acme-challenge", Text: "value-for-the-apex", TTL: 5 * time.Minute},
		libdns.RR{Type: "TXT", Name: "_ACME-Challenge", Data: "value-for-the-wildcard"},
	}
	done, err := p.AppendRecords(context.Background(), "nyud.test.", recs)
	if err != nil || len(done) != 2 {
		t.Fatalf("AppendRecords: %v, %v", done, err)
	}
	got, err := acmetxt.Lookup(context.Background(), server.Node(), "nyud.test")
	slices.Sort(got)
	if want := []string{"value-for-the-apex", "value-for-the-wildcard"}; err != nil || !slices.Equal(got, want) {
		t.Errorf("the name server's node finds %q, %v; want %q", got, err, want)
	}
	if _, err := p.DeleteRecords(context.Background(), "nyud.test.", recs); err != nil {
		t.Errorf("DeleteRecords: %v", err)
	}

	for _, bad := range []libdns.Record{
		libdns.Address{Name: "_acme-challenge", IP: netip.MustParseAddr("127.0.0.1")},
		libdns.TXT{Name: "www", Text: "x"},
		libdns.TXT{Name: "_acme-challenge", Text: "has space"},
		libdns.TXT{Name: "@", Text: "x"},
	} {
		if _, err := p.AppendRecords(context.Background(), "nyud.test.", []libdns.Record{bad}); err == nil {
			t.Errorf("AppendRecords(%+v) published it", bad.RR())
		}
	}
}

// TestDNSProviderNeedsApp: without the coral app, provisioning says so; a
// node that never joins makes AppendRecords fail within its bound.
func TestDNSProviderNeedsApp(t *testing.T) {
	ctx, cancel := caddy.NewContext(caddy.Context{Context: context.Background()})
	defer cancel()
	err := new(DNSProvider).Provision(ctx)
	if !errors.Is(err, caddy.ErrNotConfigured) || !strings.Contains(err.Error(), "coral app") {
		t.Errorf("Provision without the app: %v", err)
	}

	lonely := &App{Listen: "127.0.3.82:4000", Bootstrap: []string{"127.0.3.83:4000"}} // nobody there
	if err := lonely.Provision(ctx); err != nil {
		t.Fatal(err)
	}
	if err := lonely.Start(); err != nil {
		t.Fatal(err)
	}
	defer lonely.Cleanup()
	if err := lonely.waitJoined(context.Background(), 50*time.Millisecond); err == nil || !strings.Contains(err.Error(), "not joined") {
		t.Errorf("waitJoined on a node that cannot join: %v", err)
	}
}

func TestDNSProviderCaddyfile(t *testing.T) {
	for input, ok := range map[string]bool{
		"coral":          true,
		"coral extra":    false,
		"coral {\n x\n}": false,
		"coral {\n}":     true,
	} {
		err := new(DNSProvider).UnmarshalCaddyfile(caddyfile.NewTestDispenser(input))
		if (err == nil) != ok {
			t.Errorf("%q: %v", input, err)
		}
	}
}
