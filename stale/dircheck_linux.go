package stale

import (
	"fmt"
	"syscall"
)

// checkDir asks the kernel, without writing anything, whether this process
// may create files in dir (access(2) with W_OK, which also fails on a
// read-only mount or an immutable directory), and whether the file system
// holding it is full: no block or no inode left for an unprivileged file.
func checkDir(dir string) (full bool, err error) {
	if err := syscall.Access(dir, 0x2|0x1); err != nil { // W_OK|X_OK
		return false, fmt.Errorf("%w: %s: %w", ErrNotWritable, dir, err)
	}
	var st syscall.Statfs_t
	if err := syscall.Statfs(dir, &st); err != nil {
		return false, nil // unknown: the writes will tell
	}
	return st.Bavail == 0 || st.Ffree == 0, nil
}
