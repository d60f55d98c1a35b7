package coraldht

import (
	"math/big"
	"math/rand/v2"
	"net/netip"
	"testing"
)

func idFromBig(b *big.Int) ID {
	var id ID
	b.FillBytes(id[:])
	return id
}

func mustID(t *testing.T, s string) ID {
	t.Helper()
	id, err := ParseID(s)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

func TestNodeIDIsSHA1OfAddress(t *testing.T) {
	// SHA-1("127.0.0.2:4000"), computed independently with sha1sum.
	got := NodeIDFor(netip.MustParseAddrPort("127.0.0.2:4000"))
	want := mustID(t, "12b2104411b0587492198ff10a06232e2d19a980")
	if got != want {
		t.Errorf("NodeIDFor = %v, want %v", got, want)
	}
	if NodeIDFor(netip.MustParseAddrPort("127.0.0.2:4001")) == got {
		t.Error("nodes on one host with different ports share an ID")
	}
	v6 := NodeIDFor(netip.MustParseAddrPort("[2001:db8::1]:4000"))
	if v6 != KeyFor("[2001:db8::1]:4000") {
		t.Error("IPv6 node ID is not SHA-1 of [ip]:port")
	}
}

func TestDistanceIsXOR(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	for range 1000 {
		a, b, k := randID(rng), randID(rng), randID(rng)
		xa, xb := a.Xor(k), b.Xor(k)
		da := new(big.Int).SetBytes(xa[:])
		db := new(big.Int).SetBytes(xb[:])
		if got, want := CompareDistance(k, a, b), da.Cmp(db); got != want {
			t.Fatalf("CompareDistance(%v, %v, %v) = %d, want %d", k, a, b, got, want)
		}
		if got, want := a.Cmp(b), new(big.Int).SetBytes(a[:]).Cmp(new(big.Int).SetBytes(b[:])); got != want {
			t.Fatalf("Cmp = %d, want %d", got, want)
		}
		cpl := CommonPrefixLen(a, b)
		xab := a.Xor(b)
		x := new(big.Int).SetBytes(xab[:])
		if want := IDBits - x.BitLen(); cpl != want {
			t.Fatalf("CommonPrefixLen = %d, want %d", cpl, want)
		}
	}
	var z ID
	if CommonPrefixLen(z, z) != IDBits || !z.IsZero() {
		t.Error("zero ID")
	}
}

func randID(rng *rand.Rand) ID {
	var id ID
	for i := range id {
		id[i] = byte(rng.Uint32())
	}
	return id
}

// TestSplice checks splice(k, t, i) = top b·i bits of k, then the rest of t,
// against big-integer arithmetic.
func TestSplice(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, b := range []int{1, 2, 3, 4, 8} {
		for range 200 {
			k, tt := randID(rng), randID(rng)
			i := rng.IntN(IDBits/b + 2)
			n := min(b*i, IDBits)
			mask := new(big.Int).Lsh(big.NewInt(1), uint(IDBits-n))
			mask.Sub(mask, big.NewInt(1)) // low IDBits-n bits
			kb, tb := new(big.Int).SetBytes(k[:]), new(big.Int).SetBytes(tt[:])
			want := new(big.Int).AndNot(kb, mask)
			want.Or(want, new(big.Int).And(tb, mask))
			if got := Splice(k, tt, i, b); got != idFromBig(want) {
				t.Fatalf("Splice(b=%d, i=%d) = %v, want %v", b, i, got, idFromBig(want))
			}
		}
	}
}

// TestNextTargetCorrectsOneDigit: each step fixes exactly the first b-bit
// digit where t differs from k, and nothing else.
func TestNextTargetCorrectsOneDigit(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, b := range []int{1, 2, 4} {
		k, tt := randID(rng), randID(rng)
		steps := 0
		for {
			next, ok := nextTarget(k, tt, b)
			if !ok {
				break
			}
			steps++
			p := CommonPrefixLen(k, tt)
			digitEnd := min((p/b+1)*b, IDBits)
			if q := CommonPrefixLen(k, next); q < digitEnd {
				t.Fatalf("b=%d: after a step t shares %d bits with k, want ≥ %d", b, q, digitEnd)
			}
			for bit := digitEnd; bit < IDBits; bit++ {
				if next.Bit(bit) != tt.Bit(bit) {
					t.Fatalf("b=%d: step changed bit %d outside the corrected digit", b, bit)
				}
			}
			tt = next
		}
		if tt != k {
			t.Fatalf("b=%d: walk ended at %v, not the key", b, tt)
		}
		if max := (IDBits + b - 1) / b; steps > max {
			t.Fatalf("b=%d: %d steps, more than %d digits", b, steps, max)
		}
	}
}

func TestRandomIDWithPrefix(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	self := randID(rng)
	for _, p := range []int{0, 1, 7, 8, 9, 63, 158, 159} {
		for range 20 {
			id := randomIDWithPrefix(self, p, rng)
			if got := CommonPrefixLen(self, id); got != p {
				t.Fatalf("prefix %d: got an ID sharing %d bits", p, got)
			}
		}
	}
}

func TestParseID(t *testing.T) {
	id := KeyFor("x")
	if got, err := ParseID(id.String()); err != nil || got != id {
		t.Fatalf("ParseID(String()) = %v, %v", got, err)
	}
	for _, bad := range []string{"", "00", id.String() + "0", "zz" + id.String()[2:]} {
		if _, err := ParseID(bad); err == nil {
			t.Errorf("ParseID(%q) succeeded", bad)
		}
	}
}
