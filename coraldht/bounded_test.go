package coraldht

import (
	"fmt"
	"slices"
	"testing"
)

// TestBoundedMap: the global and per-group bounds evict the least
// recently used entry of the map or of the group, touch reorders, and
// the lists stay consistent through removals.
func TestBoundedMap(t *testing.T) {
	m := newBoundedMap[string, string, int](5, 2)
	var evicted []string
	m.onEvict = func(k string, _ int) { evicted = append(evicted, k) }
	keys := func() []string {
		var out []string
		m.each(func(k string, _ int) bool { out = append(out, k); return true })
		return out
	}
	m.put("a1", "a", 1)
	m.put("a2", "a", 2)
	m.put("a3", "a", 3) // group a is full: a1 goes
	if want := []string{"a1"}; !slices.Equal(evicted, want) {
		t.Fatalf("evicted %v, want %v", evicted, want)
	}
	m.put("b1", "b", 1)
	m.put("c1", "c", 1)
	m.touch("a2")
	m.put("d1", "d", 1) // map full (a2 a3 b1 c1 d1 would be 5: no eviction yet)
	m.put("e1", "e", 1) // now full: the least recently used of all, a3, goes
	if want := []string{"a1", "a3"}; !slices.Equal(evicted, want) {
		t.Fatalf("evicted %v, want %v", evicted, want)
	}
	if want := []string{"e1", "d1", "a2", "c1", "b1"}; !slices.Equal(keys(), want) {
		t.Fatalf("order %v, want %v", keys(), want)
	}
	if k, _, _ := m.oldest(); k != "b1" {
		t.Fatalf("oldest %q", k)
	}
	m.remove("b1")
	m.remove("a2")
	if m.groupLen("a") != 0 || m.groupLen("b") != 0 || m.len() != 3 {
		t.Fatalf("after removals: groups a %d b %d, len %d", m.groupLen("a"), m.groupLen("b"), m.len())
	}
	for i := range 100 {
		m.put(fmt.Sprint("z", i), "z", i)
	}
	if m.len() != 5 || m.groupLen("z") != 2 {
		t.Fatalf("len %d, group z %d; want 5 and 2", m.len(), m.groupLen("z"))
	}
	if v, ok := m.get("z99"); !ok || v != 99 {
		t.Fatalf("get z99 = %d, %v", v, ok)
	}
}
