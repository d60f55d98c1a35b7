//go:build !unix || race

package offheap

// mapAnon maps nothing here: Make allocates on the Go heap (see the
// package docs for why under -race).
func mapAnon(int) []byte { return nil }

func unmapAnon([]byte) bool { return false }
