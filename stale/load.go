package stale

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
)

// load rebuilds the index from Dir. Only a metadata file that parses, belongs
// to its name and names an existing body of the recorded size makes an entry;
// temp files, orphaned bodies and bad metadata are removed, so whatever a
// crash left behind is either a complete entry or gone.
func (c *Cache) load() error {
	top, err := os.ReadDir(c.dir)
	if err != nil {
		return err
	}
	var items []*item
	dirBytes := map[string]int64{}
	for _, d := range top {
		if !d.IsDir() || len(d.Name()) != 2 || !validHash(d.Name()+strings.Repeat("0", 62)) {
			continue // not ours; leave it alone
		}
		dir := filepath.Join(c.dir, d.Name())
		found := c.loadSubdir(dir, d.Name())
		if len(found) == 0 {
			// Nothing of ours is left in it: a directory costs a block.
			c.pruneLocked(d.Name())
			continue
		}
		items = append(items, found...)
		dirBytes[d.Name()] = c.measure(dir)
	}
	// Without access times on disk, the store time is the best guess at
	// recency: the oldest entries are evicted first after a restart.
	slices.SortFunc(items, func(a, b *item) int { return a.meta.StoredAt.Compare(b.meta.StoredAt) })
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, it := range items {
		c.installLocked(it)
	}
	for name, n := range dirBytes {
		c.use.measured(name, n)
	}
	c.use.top = c.measure(c.dir)
	c.updateGaugesLocked()
	c.log.Info().Int("objects", len(c.index)).Int64("bytes", c.use.total()).Msg("stale cache loaded")
	return nil
}

// loadSubdir loads the entries of one "<2 hex>" directory and cleans it.
func (c *Cache) loadSubdir(dir, prefix string) []*item {
	files, err := os.ReadDir(dir)
	if err != nil {
		c.log.Warn().Err(err).Str("dir", dir).Msg("stale cache: cannot read directory")
		return nil
	}
	bodies := make(map[string]bool) // body name → referenced by a valid meta
	var metas []string
	for _, f := range files {
		name := f.Name()
		switch {
		case f.IsDir():
		case strings.HasSuffix(name, tmpSuffix):
			c.dropFile(filepath.Join(dir, name), "temporary file")
		case strings.HasSuffix(name, bodySuffix):
			bodies[name] = false
		case strings.HasSuffix(name, metaSuffix):
			metas = append(metas, name)
		}
	}
	var items []*item
	for _, name := range metas {
		hash := strings.TrimSuffix(name, metaSuffix)
		it, err := c.loadEntry(dir, prefix, hash)
		if err != nil {
			c.log.Warn().Err(err).Str("entry", hash).Msg("stale cache: dropping entry")
			c.dropFile(filepath.Join(dir, name), "bad metadata")
			continue
		}
		bodies[it.meta.Body] = true
		items = append(items, it)
	}
	for name, used := range bodies {
		if !used {
			c.dropFile(filepath.Join(dir, name), "orphaned body")
		}
	}
	return items
}

// loadEntry reads and checks the metadata of hash and the size of its body.
func (c *Cache) loadEntry(dir, prefix, hash string) (*item, error) {
	if !validHash(hash) || hash[:2] != prefix {
		return nil, fmt.Errorf("%w: file name", errBadMeta)
	}
	data, err := readLimited(filepath.Join(dir, hash+metaSuffix), maxMetaBytes)
	if err != nil {
		return nil, err
	}
	m, err := decodeMeta(data, hash)
	if err != nil {
		return nil, err
	}
	st, err := os.Stat(filepath.Join(dir, m.Body))
	if err != nil {
		return nil, fmt.Errorf("%w: body: %w", errBadMeta, err)
	}
	if !st.Mode().IsRegular() || st.Size() != m.Size {
		return nil, fmt.Errorf("%w: body size %d, want %d", errBadMeta, st.Size(), m.Size)
	}
	if m.BodySHA256 == "" && manifestCopy(m) {
		// Written before the digest of a manifest's bytes was recorded:
		// hash them now (manifests are small), so the copy is found by
		// digest only if they are what its digest names (§6.1).
		if m.BodySHA256, err = fileDigest(filepath.Join(dir, m.Body)); err != nil {
			return nil, fmt.Errorf("%w: body: %w", errBadMeta, err)
		}
	}
	return &item{key: m.Key, hash: hash, meta: m, disk: allocated(st) + c.measure(filepath.Join(dir, hash+metaSuffix))}, nil
}

// fileDigest is "sha256:<hex>" of the file at path.
func fileDigest(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	sum := sha256.New()
	if _, err := io.Copy(sum, f); err != nil {
		return "", err
	}
	return "sha256:" + hex.EncodeToString(sum.Sum(nil)), nil
}

// readLimited reads at most limit bytes of path and fails on anything larger,
// so a huge file cannot exhaust memory at start.
func readLimited(path string, limit int64) ([]byte, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadMeta, err)
	}
	defer f.Close()
	data, err := io.ReadAll(io.LimitReader(f, limit+1))
	if err != nil {
		return nil, fmt.Errorf("%w: %w", errBadMeta, err)
	}
	if int64(len(data)) > limit {
		return nil, fmt.Errorf("%w: larger than %d bytes", errBadMeta, limit)
	}
	return data, nil
}

// dropFile removes a file the loader refused.
func (c *Cache) dropFile(path, why string) {
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.log.Warn().Err(err).Str("file", path).Msg("stale cache: cannot remove " + why)
		return
	}
	c.log.Debug().Str("file", path).Msg("stale cache: removed " + why)
}
