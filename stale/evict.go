package stale

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
)

// evictLocked drops least recently used entries from the index until the
// total fits MaxBytes and returns them so their files can be removed under
// commitMu (removeFiles). Their files and directories stop counting at
// once: the disk holds them a moment longer than the count says. c.mu must
// be held.
func (c *Cache) evictLocked() []*item {
	var victims []*item
	for c.use.total() > c.maxBytes {
		back := c.lru.Back()
		if back == nil {
			break
		}
		it := back.Value.(*item)
		c.lru.Remove(back)
		delete(c.index, it.key)
		c.dock.remove(it)
		c.use.entries -= it.disk
		c.use.leave(dirOf(it.hash))
		victims = append(victims, it)
		c.m.evictions.Inc()
	}
	c.updateGaugesLocked()
	return victims
}

// dropLocked removes the files of victims chosen outside a commit (by a
// write making room for itself) in the background, so the client whose
// answer is being written never waits for the deletions. c.mu must be held
// and the cache open, so that Close waits for the removal.
func (c *Cache) dropLocked(victims []*item) {
	if len(victims) == 0 {
		return
	}
	c.commits.Add(1)
	go func() {
		defer c.commits.Done()
		c.commitMu.Lock()
		defer c.commitMu.Unlock()
		c.removeFiles(victims)
	}()
}

// removeFiles deletes the committed files of items: the meta first, so a
// crash in between leaves an orphan body the loader drops rather than a meta
// naming a missing body; then the entry directories nothing uses any more.
// commitMu must be held, because a concurrent commit of the same key would
// otherwise have its fresh meta deleted.
func (c *Cache) removeFiles(items []*item) {
	if len(items) == 0 {
		return
	}
	for _, it := range items {
		c.mu.Lock()
		// A victim chosen outside a commit (dropLocked) may have been
		// committed anew since: the meta file is then the new entry's.
		_, recommitted := c.index[it.key]
		c.mu.Unlock()
		if recommitted {
			c.removeBody(it.hash, it.meta.Body)
			continue
		}
		if err := os.Remove(c.metaPath(it.hash)); err != nil && !errors.Is(err, fs.ErrNotExist) {
			c.diskWarning(causeOf(err), err, it.hash, "remove metadata", "stale cache: cannot remove metadata")
		}
		c.removeBody(it.hash, it.meta.Body)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, it := range items {
		c.pruneLocked(dirOf(it.hash))
	}
}

// pruneLocked removes entry directory name when nothing uses it: a
// directory takes a block of its own, and 256 of them would outgrow a small
// bound. It runs under c.mu, which a write holds while it claims a
// directory, so no write can be about to create a file in one being
// removed. A directory that still holds files the cache did not write is
// left alone (and no longer counted).
func (c *Cache) pruneLocked(name string) {
	if c.use.inUse(name) {
		return
	}
	err := os.Remove(filepath.Join(c.dir, name))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.log.Debug().Err(err).Str("dir", name).Msg("stale cache: entry directory not removed")
	}
}

// removeBody deletes one body file; bodies have unique names, so this is
// safe without commitMu.
func (c *Cache) removeBody(hash, body string) {
	if err := os.Remove(c.bodyPath(hash, body)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		c.diskWarning(causeOf(err), err, hash, "remove body", "stale cache: cannot remove body")
	}
}
