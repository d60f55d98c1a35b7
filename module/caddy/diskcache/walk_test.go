package diskcache

import (
	"fmt"
	"sync"
	"testing"
)

// TestWalk: every key once, in batches of at most the size asked for, writes
// in progress included; fn may delete what it is given (as a purge does);
// false stops the walk.
func TestWalk(t *testing.T) {
	s := openStore(t, testOptions(t, 64<<20))
	const n = 300
	for i := range n {
		put(t, s, fmt.Sprintf("%040x", i), fmt.Sprint("body ", i))
	}
	w, err := s.Create(fmt.Sprintf("%040x", n), testMeta("writing"))
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	for _, batch := range []int{1, 7, 1000, 0} {
		seen := map[string]int{}
		writing := 0
		s.Walk(batch, func(infos []Info) bool {
			if b := max(batch, 1); batch > 0 && len(infos) > b || len(infos) == 0 {
				t.Fatalf("batch of %d, asked for %d", len(infos), batch)
			}
			for _, in := range infos {
				seen[in.Key]++
				if in.Writing {
					writing++
				}
			}
			return true
		})
		if len(seen) != n+1 || writing != 1 {
			t.Fatalf("batch %d: saw %d keys (%d writing), want %d (1)", batch, len(seen), writing, n+1)
		}
		for k, c := range seen {
			if c != 1 {
				t.Fatalf("batch %d: %s seen %d times", batch, k, c)
			}
		}
	}

	if in, ok := s.Stat(fmt.Sprintf("%040x", n)); !ok || !in.Writing || in.Size != -1 {
		t.Errorf("Stat of a write in progress: %+v, %v", in, ok)
	}
	if in, ok := s.Stat(fmt.Sprintf("%040x", 1)); !ok || in.Writing || in.Size != int64(len("body 1")) {
		t.Errorf("Stat of a complete object: %+v, %v", in, ok)
	}
	if _, ok := s.Stat("ffff"); ok {
		t.Error("Stat of a missing key")
	}
	calls := 0
	s.Walk(10, func([]Info) bool { calls++; return calls < 3 })
	if calls != 3 {
		t.Errorf("walk went on for %d batches after fn said stop at 3", calls)
	}

	// Deleting every key as it comes: all gone, none seen twice.
	seen := map[string]bool{}
	s.Walk(16, func(infos []Info) bool {
		for _, in := range infos {
			if seen[in.Key] {
				t.Fatalf("%s seen twice", in.Key)
			}
			seen[in.Key] = true
			if err := s.Delete(in.Key); err != nil {
				t.Fatal(err)
			}
		}
		return true
	})
	if st := s.Stats(); len(seen) != n+1 || st.Entries != 0 || st.Writing != 0 {
		t.Errorf("deleted %d keys while walking; %d objects and %d writes left", len(seen), st.Entries, st.Writing)
	}

	s.Close()
	s.Walk(1, func([]Info) bool { t.Fatal("walk of a closed store"); return false })
}

// TestWalkWhileChanging: other goroutines store and delete while a walk
// runs (run with -race); every key present throughout is seen exactly once.
func TestWalkWhileChanging(t *testing.T) {
	s := openStore(t, testOptions(t, 64<<20))
	const stable = 500
	for i := range stable {
		put(t, s, fmt.Sprintf("a%039x", i), "stable")
	}
	stop := make(chan struct{})
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				default:
				}
				k := fmt.Sprintf("b%d%038x", g, i%50)
				_ = tryPut(s, k, "churn")
				if i%3 == 0 {
					_ = s.Delete(k)
				}
			}
		})
	}
	for range 5 {
		seen := map[string]int{}
		s.Walk(8, func(infos []Info) bool {
			for _, in := range infos {
				seen[in.Key]++
			}
			return true
		})
		for i := range stable {
			if k := fmt.Sprintf("a%039x", i); seen[k] != 1 {
				t.Fatalf("stable key %s seen %d times", k, seen[k])
			}
		}
	}
	close(stop)
	wg.Wait()
}
