//go:build unix

package diskcache

import (
	"os"
	"syscall"
)

// openRead opens a file of the store for reading. os.Open would also try to
// register the descriptor with the runtime's poller, which a regular file
// refuses: four fcntl and epoll_ctl calls wasted on every Get. A file from
// os.NewFile is not pollable to begin with (one fcntl to find out);
// positional reads and sendfile work on it as on any other.
func openRead(path string) (*os.File, error) {
	for {
		fd, err := syscall.Open(path, syscall.O_RDONLY|syscall.O_CLOEXEC, 0)
		if err == nil {
			return os.NewFile(uintptr(fd), path), nil
		}
		if err != syscall.EINTR {
			return nil, &os.PathError{Op: "open", Path: path, Err: err}
		}
	}
}
