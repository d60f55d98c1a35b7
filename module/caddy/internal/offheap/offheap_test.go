package offheap

import (
	"testing"
)

type pointerFree struct {
	key  [20]byte
	n    int64
	flag uint32
}

// TestMakeZeroedAndWritable: every element starts zero and holds what is
// written to it; Free gives the mapping back.
func TestMakeZeroedAndWritable(t *testing.T) {
	before := MappedBytes()
	s := Make[pointerFree](10000)
	if len(s) != 10000 || cap(s) != 10000 {
		t.Fatalf("len %d cap %d, want 10000", len(s), cap(s))
	}
	for i := range s {
		if s[i] != (pointerFree{}) {
			t.Fatalf("element %d not zero: %+v", i, s[i])
		}
		s[i].n = int64(i)
		s[i].key[19] = byte(i)
		s[i].flag = uint32(i) * 3
	}
	for i := range s {
		if s[i].n != int64(i) || s[i].key[19] != byte(i) || s[i].flag != uint32(i)*3 {
			t.Fatalf("element %d reads back %+v", i, s[i])
		}
	}
	Free(s)
	if after := MappedBytes(); after != before {
		t.Errorf("%d bytes still mapped after Free, want %d", after, before)
	}
}

// TestMakeRefusesPointers: a type with a pointer anywhere in it panics.
func TestMakeRefusesPointers(t *testing.T) {
	for name, mk := range map[string]func(){
		"pointer": func() { Make[*int](1) },
		"string":  func() { Make[string](1) },
		"struct": func() {
			Make[struct {
				a int
				b []byte
			}](1)
		},
		"array": func() { Make[[2]map[int]int](1) },
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: Make did not panic", name)
				}
			}()
			mk()
		}()
	}
}

// TestFreeHeapSlice: Free of a slice Make did not map (or an empty one)
// does nothing.
func TestFreeHeapSlice(t *testing.T) {
	before := MappedBytes()
	Free(make([]int64, 100))
	Free([]int64(nil))
	Free(Make[int64](0))
	if after := MappedBytes(); after != before {
		t.Errorf("mapped bytes %d, want %d", after, before)
	}
}
