package sim

import (
	"math/rand/v2"
	"testing"
)

func TestZipf(t *testing.T) {
	z := NewZipf(100, 1)
	if s := z.Share(0) / z.Share(1); s < 1.99 || s > 2.01 {
		t.Errorf("Share(0)/Share(1) = %v with s = 1, want 2", s)
	}
	sum := 0.0
	for k := range z.Len() {
		sum += z.Share(k)
	}
	if sum < 0.999999 || sum > 1.000001 {
		t.Errorf("shares sum to %v", sum)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	counts := make([]int, 100)
	for range 100000 {
		counts[z.Draw(rng)]++
	}
	if got, want := float64(counts[0])/100000, z.Share(0); got < want*0.95 || got > want*1.05 {
		t.Errorf("index 0 drawn %.3f of the time, want %.3f", got, want)
	}
	if counts[99] == 0 || counts[99] > counts[0] {
		t.Errorf("counts: first %d, last %d", counts[0], counts[99])
	}
	flat := NewZipf(4, 0)
	for k := range 4 {
		if s := flat.Share(k); s < 0.2499 || s > 0.2501 {
			t.Errorf("s = 0: Share(%d) = %v, want 1/4", k, s)
		}
	}
}
