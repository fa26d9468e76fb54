package stale

import (
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
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
	b, n := c.Stats()
	if b != used || n == 0 {
		t.Errorf("Stats = %d bytes in %d objects; the directory takes %d and must hold some", b, n, used)
	}
	t.Logf("4000 one-byte answers: the directory takes %d bytes, %d entries kept", used, n)
	if _, ok := lookupBody(t, c, "https://r.test/a/3999"); !ok {
		t.Error("the newest answer was not kept")
	}
}

// chunkedReader hands out body in reads of n bytes.
type chunkedReader struct {
	body []byte
	n    int
}

func (r *chunkedReader) Read(p []byte) (int, error) {
	if len(r.body) == 0 {
		return 0, io.EOF
	}
	k := min(len(p), r.n, len(r.body))
	copy(p, r.body[:k])
	r.body = r.body[k:]
	return k, nil
}

// A write in flight counts what it will take: an answer of unknown length
// reserves blocks as it streams, evicting the least recently used copies
// to make room, so the directory stays under the bound while it is being
// written too; one that cannot fit at all goes unstored and leaves nothing.
func TestWritesInFlightCountAndMakeRoom(t *testing.T) {
	dir := t.TempDir()
	bound := roomFor(t, dir, 2)
	c, _ := newTestCache(t, Options{Dir: dir, MaxBytes: bound, MaxObjectBytes: 1 << 20})
	c.syncFile = func(*os.File) error { return nil }
	store(t, c, "a", "1")
	store(t, c, "b", "2")
	unit := c.use.unit
	body := strings.Repeat("z", int(3*unit))
	resp := okResponse(&chunkedReader{body: []byte(body), n: int(unit / 2)}, -1)
	tee(c, "big", resp)
	buf := make([]byte, unit)
	var got []byte
	for {
		n, err := resp.Body.Read(buf)
		got = append(got, buf[:n]...)
		c.commits.Wait() // the evicted copies' files are gone
		if used, counted := diskUsage(t, dir), func() int64 { b, _ := c.Stats(); return b }(); used > bound || counted > bound {
			t.Fatalf("after %d bytes: %d on disk, %d counted, bound %d", len(got), used, counted, bound)
		}
		if err != nil {
			break
		}
	}
	resp.Body.Close()
	c.commits.Wait()
	if string(got) != body {
		t.Fatalf("client read %d bytes, want %d", len(got), len(body))
	}
	if b, ok := lookupBody(t, c, "big"); !ok || b != body {
		t.Fatal("the answer that made room was not stored")
	}
	for _, k := range []string{"a", "b"} {
		if _, ok := lookup(c, k); ok {
			t.Errorf("%s was kept although the new answer needed its room", k)
		}
	}

	// An answer as large as the whole bound cannot fit beside its own
	// metadata: the client still gets every byte, the cache keeps nothing
	// of it.
	huge := strings.Repeat("h", int(bound))
	resp = okResponse(&chunkedReader{body: []byte(huge), n: int(unit)}, -1)
	tee(c, "huge", resp)
	if got, err := io.ReadAll(resp.Body); err != nil || string(got) != huge {
		t.Fatalf("client read %d bytes, %v", len(got), err)
	}
	resp.Body.Close()
	c.commits.Wait()
	if _, ok := lookup(c, "huge"); ok {
		t.Error("an answer larger than the room there is was stored")
	}
	if files := filesIn(t, dir); countSuffix(files, tmpSuffix) != 0 {
		t.Errorf("temp files left: %v", files)
	}
	if used := diskUsage(t, dir); used > bound {
		t.Errorf("%d bytes on disk, bound %d", used, bound)
	}
}
