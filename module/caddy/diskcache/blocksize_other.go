//go:build !linux

package diskcache

// blockSize is the unit each file in dir is charged in: see blocksize_linux.go.
func blockSize(dir string) int64 { return minBlock }
