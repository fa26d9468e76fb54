package stale

import (
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"testing"
)

// diskUsage is what dir takes on disk the way du and the kubelet count it:
// the allocated blocks of every file and directory under it, itself
// included.
func diskUsage(t testing.TB, dir string) int64 {
	t.Helper()
	var total int64
	err := filepath.WalkDir(dir, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		fi, err := os.Lstat(p)
		if err != nil {
			return err
		}
		st, ok := fi.Sys().(*syscall.Stat_t)
		if !ok {
			t.Fatalf("no stat blocks for %s", p)
		}
		total += st.Blocks * 512
		return nil
	})
	if err != nil {
		t.Fatalf("walk %s: %v", dir, err)
	}
	return total
}

// roomFor is a MaxBytes for the cache in dir that holds n entries of a
// block each (their body and metadata files, each in a directory of its
// own) but not n+1.
func roomFor(t testing.TB, dir string, n int64) int64 {
	t.Helper()
	fi, err := os.Stat(dir)
	if err != nil {
		t.Fatal(err)
	}
	unit := allocUnit(fi)
	return allocated(fi) + n*3*unit + unit
}

// TestMaxBytesBoundsTheDisk is issue 21.4's measurement: with a 64 KiB
// bound, 4,000 one-byte answers once took 33 MB on disk (a body and a
// metadata file each, every one a whole block) while the size gauge said
// 4,000 bytes. What the files really take stays under the bound, and the
// gauge says what they take.
func TestMaxBytesBoundsTheDisk(t *testing.T) {
	const bound = 64 << 10
	c, reg := newTestCache(t, Options{MaxBytes: bound})
	// Flushes to the platter prove nothing about the accounting.
	c.syncFile = func(*os.File) error { return nil }
	for i := range 4000 {
		store(t, c, fmt.Sprintf("https://r.test/a/%d", i), "x")
	}
	c.commits.Wait()
	used := diskUsage(t, c.dir)
	if used > bound {
		t.Errorf("the cache directory takes %d bytes on disk, over its bound of %d", used, bound)
	}
	gauge := metricValue(t, reg, "nora_sidecar_stale_cache_bytes")
	if int64(gauge) != used {
		t.Errorf("nora_sidecar_stale_cache_bytes = %v, the directory takes %d", gauge, used)
	}
	if b, n := c.Stats(); b != used || n == 0 {
		t.Errorf("Stats = %d bytes in %d objects; the directory takes %d and must hold some", b, n, used)
	}
	if _, ok := lookupBody(t, c, "https://r.test/a/3999"); !ok {
		t.Error("the newest answer was not kept")
	}
}
