//go:build unix && !race

package offheap

import "syscall"

// mapAnon maps n bytes of zeroed private memory, or returns nil.
func mapAnon(n int) []byte {
	b, err := syscall.Mmap(-1, 0, n, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_ANON|syscall.MAP_PRIVATE)
	if err != nil {
		return nil
	}
	return b
}

// unmapAnon unmaps b if mapAnon mapped it (syscall.Munmap knows its own
// mappings and refuses any other slice), and reports whether it did.
func unmapAnon(b []byte) bool {
	return syscall.Munmap(b) == nil
}
