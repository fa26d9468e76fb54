//go:build !unix

package stale

import "io/fs"

// allocated is fi's size rounded up to whole blocks, where the platform
// reports no allocated blocks.
func allocated(fi fs.FileInfo) int64 {
	return (fi.Size() + defaultAllocUnit - 1) / defaultAllocUnit * defaultAllocUnit
}

// allocUnit is the usual file system block size.
func allocUnit(fs.FileInfo) int64 { return defaultAllocUnit }
