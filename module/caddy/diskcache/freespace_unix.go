//go:build unix

package diskcache

import "golang.org/x/sys/unix"

// statfsFree is the space an unprivileged writer may still use on dir's
// file system.
func statfsFree(dir string) (int64, bool) {
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		return 0, false
	}
	return int64(st.Bavail) * int64(st.Bsize), true
}
