package acmetxt_test

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/coralcdn/coral/coraldht"
	"github.com/coralcdn/coral/coraldht/acmetxt"
	"github.com/coralcdn/coral/coraldht/memnet"
)

// network starts n nodes on an in-memory network, 10.0.0.1 to 10.0.0.n,
// pinned into two level-1 clusters (the first half and the rest), joined
// through the first.
func network(t testing.TB, n int) []*coraldht.Node {
	t.Helper()
	mem := memnet.New(memnet.Config{})
	key, err := coraldht.NewKey([]byte("a test secret of at least thirty-two bytes"))
	if err != nil {
		t.Fatal(err)
	}
	var nodes []*coraldht.Node
	for i := 1; i <= n; i++ {
		tr, err := mem.Listen(netip.MustParseAddrPort(fmt.Sprintf("10.0.0.%d:4000", i)))
		if err != nil {
			t.Fatal(err)
		}
		cfg := coraldht.DefaultConfig()
		cfg.Key = key
		cfg.Pins = map[int]string{1: []string{"east", "west"}[min(1, 2*(i-1)/n)]}
		node, err := coraldht.NewNode(cfg, tr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { node.Close() })
		nodes = append(nodes, node)
	}
	for _, node := range nodes[1:] {
		if err := node.Bootstrap(context.Background(), nodes[0].Addr()); err != nil {
			t.Fatal(err)
		}
	}
	return nodes
}

// Values published by different nodes, in different clusters, are all
// found by every node: an old issuance's values in one cluster do not
// hide a new issuance's published from the other.
func TestPublishLookupAcrossClusters(t *testing.T) {
	nodes := network(t, 8)
	ctx := context.Background()
	if err := acmetxt.Publish(ctx, nodes[1], "nyud.test", "old-value-from-east", 10*time.Minute); err != nil {
		t.Fatal(err)
	}
	if err := acmetxt.Publish(ctx, nodes[6], "NYUD.test.", "new-value-from-west", 20*time.Minute); err != nil {
		t.Fatal(err)
	}
	for i, n := range nodes {
		got, err := acmetxt.Lookup(ctx, n, "nyud.test.")
		if err != nil {
			t.Fatalf("node %d: %v", i, err)
		}
		if want := []string{"new-value-from-west", "old-value-from-east"}; !slices.Equal(got, want) {
			t.Errorf("node %d found %q, want %q (longest-lived first)", i, got, want)
		}
	}
	got, err := acmetxt.Lookup(ctx, nodes[3], "other.test")
	if err != nil || got != nil {
		t.Errorf("another domain: %q, %v; want nothing and no error", got, err)
	}
}

func TestPublishRefusesBadValues(t *testing.T) {
	nodes := network(t, 2)
	for _, v := range []string{"", "with space", `quo"te`, `back\slash`, "caf\u00e9", "tab\t", strings.Repeat("a", 256)} {
		if err := acmetxt.Publish(context.Background(), nodes[0], "nyud.test", v, 0); !errors.Is(err, acmetxt.ErrInvalid) {
			t.Errorf("Publish(%q) = %v, want ErrInvalid", v, err)
		}
	}
	if err := acmetxt.Publish(context.Background(), nodes[0], ".", "value", 0); !errors.Is(err, acmetxt.ErrInvalid) {
		t.Errorf("Publish for the root = %v, want ErrInvalid", err)
	}
}

// A member of the network that stores junk under the key directly (not
// through Publish) gets none of it served, and no more than MaxValues.
func TestLookupFiltersAndBounds(t *testing.T) {
	nodes := network(t, 4)
	ctx := context.Background()
	key := acmetxt.Key("nyud.test")
	for _, junk := range []string{"has space", "\x00binary", strings.Repeat("x", 256)} {
		if _, err := nodes[2].Put(ctx, key, []byte(junk), time.Minute, 0); err != nil {
			t.Fatal(err)
		}
	}
	for i := range acmetxt.MaxValues + 4 {
		if err := acmetxt.Publish(ctx, nodes[i%4], "nyud.test", fmt.Sprintf("value-%02d", i), time.Duration(i+1)*time.Minute); err != nil {
			t.Fatal(err)
		}
	}
	// The same value twice is served once.
	if err := acmetxt.Publish(ctx, nodes[3], "nyud.test", "value-00", time.Minute); err != nil {
		t.Fatal(err)
	}
	got, err := acmetxt.Lookup(ctx, nodes[0], "nyud.test")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) > acmetxt.MaxValues {
		t.Errorf("%d values served, want at most %d", len(got), acmetxt.MaxValues)
	}
	seen := map[string]bool{}
	for _, v := range got {
		if !acmetxt.Valid(v) || seen[v] {
			t.Errorf("served %q (invalid or repeated) in %q", v, got)
		}
		seen[v] = true
	}
	if len(got) == 0 || got[0] != fmt.Sprintf("value-%02d", acmetxt.MaxValues+3) {
		t.Errorf("first value %q, want the longest-lived one", got)
	}
}

func TestDomain(t *testing.T) {
	for name, want := range map[string]string{
		"_acme-challenge.nyud.test.": "nyud.test",
		"_ACME-Challenge.Nyud.Test":  "nyud.test",
		"_acme-challenge.":           "",
		"acme-challenge.nyud.test.":  "",
		"www.nyud.test.":             "",
	} {
		got, ok := acmetxt.Domain(name)
		if got != want || ok != (want != "") {
			t.Errorf("Domain(%q) = %q, %v; want %q", name, got, ok, want)
		}
	}
}
