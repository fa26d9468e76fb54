package stale

// The claim a write in flight holds: its key, so one answer of a key is
// written at a time, and its reservation of disk under stale_max_bytes.

// write is one write in flight: the key it claimed, its entry directory and
// what it reserved on disk (usage.go). reserved changes under c.mu, by the
// write's own reader (grow) and when the write ends; that reader may read
// it without the lock.
type write struct {
	key, dir string
	reserved int64
}

// startWriting claims key for one write of an answer with status, which
// reserves reserve bytes of disk in entry directory dir. It refuses when
// the cache is closed, when the key is already being written (a hot URL
// fetched by many clients at once needs one copy, not one per client), when
// the stored copy has the same status and is younger than the refresh
// interval, when too many writes are in flight (the cache must never make
// work pile up behind a busy disk), or when the bound cannot make room for
// the write even by evicting every entry.
func (c *Cache) startWriting(key, dir string, status int, reserve int64) (*write, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	switch {
	case c.closed, c.writing[key], len(c.writing) >= c.maxWriters,
		c.use.top+c.use.writes+c.use.unit+reserve > c.maxBytes:
		return nil, false
	}
	if it := c.index[key]; it != nil && it.meta.Status == status && c.now().Sub(it.meta.StoredAt) < c.refreshAfter {
		return nil, false
	}
	w := &write{key: key, dir: dir, reserved: reserve}
	c.writing[key] = true
	c.use.enter(dir)
	c.use.writes += reserve
	c.dropLocked(c.evictLocked())
	if c.use.total() > c.maxBytes {
		// Other writes in flight hold the room.
		c.endWriteLocked(w)
		return nil, false
	}
	return w, true
}

// grow raises w's reservation to to bytes, evicting to make room; it
// reports false when even that cannot keep the cache under its bound, or
// the cache is closed: the write must then be abandoned.
func (c *Cache) grow(w *write, to int64) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed || c.use.top+c.use.writes+c.use.unit+to-w.reserved > c.maxBytes {
		return false
	}
	c.use.writes += to - w.reserved
	w.reserved = to
	c.dropLocked(c.evictLocked())
	return c.use.total() <= c.maxBytes
}

// endWrite releases what startWriting claimed for a write that made no
// entry; its files must already be gone.
func (c *Cache) endWrite(w *write) {
	c.mu.Lock()
	c.endWriteLocked(w)
	c.mu.Unlock()
}

// endWriteLocked is endWrite with c.mu held.
func (c *Cache) endWriteLocked(w *write) {
	c.releaseLocked(w)
	c.pruneLocked(w.dir)
	c.updateGaugesLocked()
}

// releaseLocked hands back w's claim on its key, its reservation and its
// count in its directory. c.mu must be held.
func (c *Cache) releaseLocked(w *write) {
	delete(c.writing, w.key)
	c.use.writes -= w.reserved
	w.reserved = 0
	c.use.leave(w.dir)
}
