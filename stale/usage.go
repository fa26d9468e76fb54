package stale

// stale_max_bytes bounds what the cache takes on disk, counted the way du
// and the kubelet's emptyDir limit count it (docs/behaviour.md §6): the
// allocated blocks of every body and metadata file, of the directories that
// hold them and of the cache directory itself, plus what the writes in
// flight will take. A one-byte answer costs a body block and a metadata
// block, so counting body bytes alone let a bound of 64 KiB grow to 33 MB of
// small files.
//
// Committed files are measured (st_blocks) once they are in place. A write
// in flight cannot be measured without a stat per read, so it reserves its
// body's length rounded up to whole blocks, plus a block for its metadata,
// and trades the reservation for the measured size at its commit.

// defaultAllocUnit is the block size assumed where the file system reports
// none.
const defaultAllocUnit = 4096

// usage is the cache's disk accounting. It has no lock of its own: every
// field is guarded by Cache.mu.
type usage struct {
	// unit is the file system's block size, for estimates.
	unit int64
	// top is what the cache directory itself takes.
	top int64
	// dirs are the entry directories ("<2 hex>") the cache uses now, by
	// name; one with no entry and no write left is removed (pruneLocked).
	dirs map[string]*subdir
	// dirBytes, entries and writes are the sums of what the counted
	// directories take, what the committed entries' files take, and what
	// the writes in flight reserved.
	dirBytes, entries, writes int64
}

// subdir is one entry directory in use.
type subdir struct {
	bytes int64 // as measured last; one block until it is measured
	refs  int   // committed entries and writes in flight inside it
}

func newUsage(unit, top int64) usage {
	if unit <= 0 {
		unit = defaultAllocUnit
	}
	return usage{unit: unit, top: top, dirs: map[string]*subdir{}}
}

// total is everything counted against stale_max_bytes.
func (u *usage) total() int64 { return u.top + u.dirBytes + u.entries + u.writes }

// blocks is n bytes rounded up to whole blocks.
func (u *usage) blocks(n int64) int64 {
	if n <= 0 {
		return 0
	}
	return (n + u.unit - 1) / u.unit * u.unit
}

// writeReserve is what a write whose body has n bytes so far (or is
// announced to have) reserves: the body in whole blocks and one block for
// its metadata.
func (u *usage) writeReserve(n int64) int64 { return u.blocks(n) + u.unit }

// enter counts one more entry or write in directory name; a directory not
// in use yet is counted as one block until it is measured.
func (u *usage) enter(name string) {
	d := u.dirs[name]
	if d == nil {
		d = &subdir{bytes: u.unit}
		u.dirs[name] = d
		u.dirBytes += d.bytes
	}
	d.refs++
}

// leave counts one entry or write fewer in directory name. It reports
// whether the directory is now unused: it is no longer counted, and the
// caller removes it once its last files are gone.
func (u *usage) leave(name string) (unused bool) {
	d := u.dirs[name]
	if d == nil {
		return false
	}
	if d.refs--; d.refs > 0 {
		return false
	}
	delete(u.dirs, name)
	u.dirBytes -= d.bytes
	return true
}

// measured records what directory name takes now, if it is still in use.
func (u *usage) measured(name string, bytes int64) {
	if d := u.dirs[name]; d != nil {
		u.dirBytes += bytes - d.bytes
		d.bytes = bytes
	}
}

// inUse reports whether directory name holds an entry or a write.
func (u *usage) inUse(name string) bool { return u.dirs[name] != nil }
