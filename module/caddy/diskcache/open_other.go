//go:build !unix

package diskcache

import "os"

// openRead opens a file of the store for reading.
func openRead(path string) (*os.File, error) { return os.Open(path) }
