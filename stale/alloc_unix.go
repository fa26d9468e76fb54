//go:build unix

package stale

import (
	"io/fs"
	"syscall"
)

// allocated is what fi takes on disk: its allocated 512-byte blocks
// (st_blocks), which is what du and the kubelet's emptyDir limit count. A
// one-byte file takes a whole file system block, a sparse one less than its
// size.
func allocated(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok {
		return int64(st.Blocks) * 512
	}
	return fi.Size()
}

// allocUnit is the file system's block size as fi (the cache directory)
// reports it: what a file not yet written is estimated to take per block.
func allocUnit(fi fs.FileInfo) int64 {
	if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Blksize > 0 {
		return int64(st.Blksize)
	}
	return defaultAllocUnit
}
