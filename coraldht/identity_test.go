package coraldht

import (
	"context"
	"crypto/ed25519"
	"errors"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/coralcdn/coral/coraldht/fleet"
	"github.com/coralcdn/coral/coraldht/internal/wire"
	"github.com/coralcdn/coral/coraldht/memnet"
)

// testFleet issues identities under one fleet key.
type testFleet struct {
	t      testing.TB
	pub    ed25519.PublicKey
	priv   ed25519.PrivateKey
	serial uint64
}

func newTestFleet(t testing.TB) *testFleet {
	pub, priv := fleet.GenerateKey()
	return &testFleet{t: t, pub: pub, priv: priv}
}

// identity issues the next serial, valid around now.
func (f *testFleet) identity() *Identity {
	f.t.Helper()
	f.serial++
	pub, priv := fleet.GenerateKey()
	now := time.Now()
	c, err := fleet.Issue(f.priv, pub, f.serial, now.Add(-time.Hour), now.Add(24*time.Hour))
	if err != nil {
		f.t.Fatal(err)
	}
	return &Identity{Certificate: c, Key: priv, Fleet: []ed25519.PublicKey{f.pub}}
}

func (f *testFleet) revoke(number uint64, serials ...uint64) *fleet.RevocationList {
	f.t.Helper()
	l, err := fleet.NewRevocationList(f.priv, number, time.Now(), serials)
	if err != nil {
		f.t.Fatal(err)
	}
	return l
}

// TestIdentityNetwork: nodes with identities of one fleet form a network
// and put and get; a node of another fleet, or without an identity, is
// never heard (unless Optional), and neither is a datagram whose
// signature was changed.
func TestIdentityNetwork(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTestFleet(t)
		tn := newTestNet(t, 6, memnet.Config{Latency: pairLatency(time.Millisecond, 10*time.Millisecond)}, func(i int, c *Config) {
			c.Identity = f.identity()
		})
		ctx := context.Background()
		key := KeyFor("identity")
		if _, err := tn.nodes[1].Put(ctx, key, []byte("v"), time.Hour); err != nil {
			t.Fatal(err)
		}
		if r, err := tn.nodes[4].Get(ctx, key); err != nil || string(r.Values[0].Data) != "v" {
			t.Fatalf("get: %+v %v", r, err)
		}
		if info, ok := tn.nodes[0].Identity(); !ok || info.Serial != 1 || info.RevocationList != 0 {
			t.Fatalf("Identity() = %+v, %v", info, ok)
		}

		stranger := tn.add(6, func(i int, c *Config) { c.Identity = newTestFleet(t).identity() })
		anonymous := tn.add(7, nil)
		for _, n := range []*Node{stranger, anonymous} {
			if _, err := n.Ping(ctx, tn.nodes[0].Addr()); !errors.Is(err, ErrTimeout) {
				t.Fatalf("%v pinging a fleet node: %v, want a timeout", n.Addr(), err)
			}
		}
		if d := tn.nodes[0].Stats().Drops; d.BadIdentity != 2 {
			t.Fatalf("drops %+v; want 2 bad identities", d)
		}
		if s := tn.nodes[0].Suspects(); len(s) == 0 || s[0].Events.Count(AbuseIdentity) == 0 {
			t.Fatalf("suspects %+v", s)
		}

		// A changed signature: the datagram is tagged again under the
		// network key, so only the identity can tell.
		target := tn.nodes[0]
		b, err := tn.nodes[5].encode(&wire.Message{Type: wire.Ping}, target.Contact(), true)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := testKey.open(b)
		body[len(body)-1] ^= 1
		before := target.Stats().Drops.BadIdentity
		if err := stranger.tr.WriteTo(testKey.seal(body), target.Addr()); err != nil {
			t.Fatal(err)
		}
		time.Sleep(time.Second) // past the network's latency
		if target.Stats().Drops.BadIdentity != before+1 {
			t.Fatal("a datagram with a changed signature was not dropped as a bad identity")
		}
	})
}

// TestIdentityOptional: with Optional, datagrams without an identity are
// accepted, those with a bad one still dropped.
func TestIdentityOptional(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTestFleet(t)
		tn := newTestNet(t, 2, memnet.Config{}, func(i int, c *Config) {
			c.Identity = f.identity()
			c.Identity.Optional = true
		})
		ctx := context.Background()
		if _, err := tn.add(2, nil).Ping(ctx, tn.nodes[0].Addr()); err != nil {
			t.Fatalf("a node without an identity: %v", err)
		}
		if _, err := tn.add(3, func(i int, c *Config) { c.Identity = newTestFleet(t).identity() }).Ping(ctx, tn.nodes[0].Addr()); !errors.Is(err, ErrTimeout) {
			t.Fatalf("a node of another fleet: %v", err)
		}
	})
}

// TestRevocation: a revocation list installed on the other nodes drops
// the revoked node's datagrams, takes it out of their routing tables and
// lookups, and drops the values it stored; lists never go back.
func TestRevocation(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		f := newTestFleet(t)
		tn := newTestNet(t, 8, memnet.Config{Latency: pairLatency(time.Millisecond, 10*time.Millisecond)}, func(i int, c *Config) {
			c.Identity = f.identity()
		})
		ctx := context.Background()
		bad := tn.nodes[3]
		badSerial := bad.identity.Certificate.Serial
		// The node to be revoked stores values on others.
		for i := range 10 {
			if _, err := bad.Put(ctx, KeyFor(string(rune('a'+i))), []byte("bad"), time.Hour); err != nil {
				t.Fatal(err)
			}
		}
		holding := func() int {
			n := 0
			for _, nd := range tn.nodes {
				if nd != bad {
					_, v, _ := nd.store.sizes()
					n += v
				}
			}
			return n
		}
		if holding() == 0 {
			t.Fatal("the node's values are nowhere else")
		}
		l := f.revoke(1, badSerial)
		for _, nd := range tn.nodes {
			if nd == bad {
				continue
			}
			if ok, err := nd.SetRevocations(l); !ok || err != nil {
				t.Fatalf("install: %v %v", ok, err)
			}
		}
		if n := holding(); n != 0 {
			t.Fatalf("%d values of the revoked node remain", n)
		}
		for _, nd := range tn.nodes {
			if nd == bad {
				continue
			}
			if slices.ContainsFunc(nd.RoutingTable(0), func(ni NodeInfo) bool { return ni.ID == bad.ID() }) {
				t.Fatalf("%v still lists the revoked node", nd.Addr())
			}
		}
		// Its datagrams are dropped; it can no longer reach anyone.
		before := tn.nodes[0].Stats().Drops.Revoked
		if _, err := bad.Ping(ctx, tn.nodes[0].Addr()); !errors.Is(err, ErrTimeout) {
			t.Fatalf("the revoked node's ping: %v", err)
		}
		if tn.nodes[0].Stats().Drops.Revoked != before+1 {
			t.Fatal("the revoked node's ping was not dropped as revoked")
		}
		// The others go on without it.
		key := KeyFor("after the revocation")
		if _, err := tn.nodes[1].Put(ctx, key, []byte("v"), time.Hour); err != nil {
			t.Fatal(err)
		}
		if _, err := tn.nodes[6].Get(ctx, key); err != nil {
			t.Fatal(err)
		}
		// The revoked node, once it reads the list too, fails at once.
		if _, err := bad.SetRevocations(l); err != nil {
			t.Fatal(err)
		}
		if _, err := bad.Get(ctx, key); !errors.Is(err, ErrRevoked) {
			t.Fatalf("the revoked node's get: %v, want ErrRevoked", err)
		}
		if _, err := bad.PutGet(ctx, key, []byte("x"), time.Hour); !errors.Is(err, ErrRevoked) {
			t.Fatalf("the revoked node's put+get: %v, want ErrRevoked", err)
		}
		// Lists never go back; a list as its file's text is checked
		// against the node's fleet keys.
		text := fleet.Marshal(fleet.LabelRevocationList, nil, l.Raw)
		if ok, err := tn.nodes[0].SetRevocationsText(text); ok || err != nil {
			t.Fatalf("the same list as text: %v %v", ok, err)
		}
		other := newTestFleet(t).revoke(5, 1)
		if _, err := tn.nodes[0].SetRevocationsText(fleet.Marshal(fleet.LabelRevocationList, nil, other.Raw)); !errors.Is(err, fleet.ErrSignature) {
			t.Fatalf("another fleet's list: %v", err)
		}
		if ok, err := tn.nodes[0].SetRevocations(l); ok || err != nil {
			t.Fatalf("the same list again: %v %v", ok, err)
		}
		if _, err := tn.nodes[0].SetRevocations(f.revoke(0)); err == nil || !strings.Contains(err.Error(), "older") {
			t.Fatalf("an older list: %v", err)
		}
		if _, err := tn.add(8, nil).SetRevocations(l); !errors.Is(err, ErrNotIdentityMode) {
			t.Fatalf("without an identity: %v", err)
		}
	})
}

// TestIdentityConfig: a node refuses to start with an identity its fleet
// did not sign, a key that is not its certificate's, an expired or a
// revoked certificate.
func TestIdentityConfig(t *testing.T) {
	f := newTestFleet(t)
	cases := map[string]func(id *Identity){
		"other fleet":   func(id *Identity) { id.Fleet = []ed25519.PublicKey{newTestFleet(t).pub} },
		"other key":     func(id *Identity) { _, id.Key = fleet.GenerateKey() },
		"revoked":       func(id *Identity) { id.Revoked = f.revoke(1, id.Certificate.Serial) },
		"no fleet keys": func(id *Identity) { id.Fleet = nil },
		"expired": func(id *Identity) {
			c, _ := fleet.Issue(f.priv, id.Certificate.PublicKey, 99, time.Now().Add(-2*time.Hour), time.Now().Add(-time.Hour))
			id.Certificate = c
		},
	}
	for name, spoil := range cases {
		t.Run(name, func(t *testing.T) {
			cfg := DefaultConfig()
			cfg.Identity = f.identity()
			spoil(cfg.Identity)
			var ce *ConfigError
			if err := cfg.Validate(); !errors.As(err, &ce) || ce.Field != "Identity" {
				t.Fatalf("Validate = %v", err)
			}
		})
	}
}
