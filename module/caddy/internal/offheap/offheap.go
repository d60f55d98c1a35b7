package offheap

import (
	"fmt"
	"reflect"
	"sync/atomic"
	"unsafe"
)

// mappedBytes is the memory Make has mapped and Free not yet unmapped.
var mappedBytes atomic.Int64

// MappedBytes is how many bytes of arrays are mapped outside the Go heap
// now (0 where Make allocates on the heap).
func MappedBytes() int64 { return mappedBytes.Load() }

// Make returns a zeroed slice of n values of T (len and cap n), outside
// the Go heap when it can be. T must hold no pointers. Free releases it.
func Make[T any](n int) []T {
	var zero T
	size := unsafe.Sizeof(zero)
	if t := reflect.TypeFor[T](); hasPointers(t) {
		panic(fmt.Sprintf("offheap: %v holds pointers", t))
	}
	if n <= 0 || size == 0 {
		return make([]T, n)
	}
	if b := mapAnon(n * int(size)); b != nil {
		mappedBytes.Add(int64(len(b)))
		return unsafe.Slice((*T)(unsafe.Pointer(unsafe.SliceData(b))), n)
	}
	return make([]T, n)
}

// Free releases s, which Make returned (whole: the same slice, not a
// re-slice of it). s must not be used afterwards. A slice Make allocated
// on the heap is left to the garbage collector.
func Free[T any](s []T) {
	if cap(s) == 0 {
		return
	}
	var zero T
	n := cap(s) * int(unsafe.Sizeof(zero))
	if n == 0 {
		return
	}
	b := unsafe.Slice((*byte)(unsafe.Pointer(unsafe.SliceData(s[:1]))), n)
	if unmapAnon(b) {
		mappedBytes.Add(-int64(n))
	}
}

// hasPointers reports whether a value of t holds a pointer the garbage
// collector would follow.
func hasPointers(t reflect.Type) bool {
	switch t.Kind() {
	case reflect.Array:
		return t.Len() > 0 && hasPointers(t.Elem())
	case reflect.Struct:
		for i := range t.NumField() {
			if hasPointers(t.Field(i).Type) {
				return true
			}
		}
		return false
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64, reflect.Uintptr,
		reflect.Float32, reflect.Float64, reflect.Complex64, reflect.Complex128:
		return false
	default:
		return true
	}
}
