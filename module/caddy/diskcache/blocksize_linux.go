//go:build linux

package diskcache

import "syscall"

// Magic numbers (statfs f_type) of the file systems whose f_bsize is their
// allocation unit.
const (
	ext4Magic  = 0xef53 // also ext2 and ext3
	xfsMagic   = 0x58465342
	btrfsMagic = 0x9123683e
	tmpfsMagic = 0x01021994
	f2fsMagic  = 0xf2f52010
)

// blockSize is the unit each file in dir is charged in (see the package
// docs, "Bounds and eviction"): the file system's block size for ext2/3/4,
// XFS, Btrfs, tmpfs and F2FS, between 4 KiB and 64 KiB, else 4 KiB.
// Others report in f_bsize a preferred I/O size rather than what a small
// file takes (ZFS its record size, 128 KiB, though a small file takes a
// block of 4 KiB or less; NFS and FUSE whatever suits their transfers), and
// charging that would shrink a cache of small objects many times over.
func blockSize(dir string) int64 {
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return minBlock
	}
	switch uint32(st.Type) {
	case ext4Magic, xfsMagic, btrfsMagic, tmpfsMagic, f2fsMagic:
		return min(max(int64(st.Bsize), minBlock), maxBlock)
	}
	return minBlock
}
