//go:build !unix

package diskcache

import "os"

// lockDir only opens the lock file: without flock, running two Stores on
// one directory is not detected.
func lockDir(path string) (*os.File, error) {
	return os.OpenFile(path, os.O_RDWR|os.O_CREATE, 0o600)
}
