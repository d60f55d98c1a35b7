package coraldht

import "testing"

// TestDropReasons: every reason has a distinct name and its own field in
// DropCounts, so exporters that iterate DropReasons see every counter once.
func TestDropReasons(t *testing.T) {
	names := map[string]bool{}
	var d DropCounts
	for i, r := range DropReasons() {
		if r.String() == "" || names[r.String()] {
			t.Fatalf("reason %d: name %q empty or repeated", r, r.String())
		}
		names[r.String()] = true
		*dropReasons[r].count(&d) = uint64(i + 1)
	}
	for i, r := range DropReasons() {
		if got := d.Count(r); got != uint64(i+1) {
			t.Errorf("%s: Count = %d, want %d (two reasons share a field?)", r, got, i+1)
		}
	}
	if n := len(DropReasons()); d.Total() != uint64(n*(n+1)/2) {
		t.Errorf("Total = %d", d.Total())
	}
	if dropNone.String() != "" || (DropCounts{}).Count(dropReasonEnd) != 0 {
		t.Error("out-of-range reasons must have no name and no count")
	}
}
