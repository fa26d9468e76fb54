package stale

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// commit makes p an entry. Order matters for crash safety: the body gets its
// final unique name first, then the metadata's rename publishes it; a crash
// before that leaves an orphan body the loader removes, a crash after it a
// complete entry. The replaced body is deleted only after the new meta is in
// place. Whatever happens, the write's claim is released: by install, or by
// endWrite once its files are gone.
func (c *Cache) commit(p *pending) error {
	bodyPath, bodyName, err := c.finishBody(p)
	if err != nil {
		c.endWrite(p.claim)
		return err
	}
	m := &meta{Version: metaVersion, Key: p.claim.key, Status: p.status, Header: p.header,
		Size: p.size, StoredAt: p.storedAt, Body: bodyName, Cred: p.cred, VarySHA256: p.varySHA256, HeadLength: p.headLength,
		BodySHA256: p.bodySHA256}
	metaTmp, err := writeMetaTemp(filepath.Dir(bodyPath), p.hash, m)
	if err != nil {
		os.Remove(bodyPath)
		c.endWrite(p.claim)
		return err
	}

	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	c.mu.Lock()
	cur := c.index[p.claim.key]
	c.mu.Unlock()
	if cur != nil && cur.seq > p.seq {
		// A write of this key that finished later is already committed.
		os.Remove(metaTmp)
		os.Remove(bodyPath)
		c.endWrite(p.claim)
		return nil
	}
	if err := os.Rename(metaTmp, c.metaPath(p.hash)); err != nil {
		os.Remove(metaTmp)
		os.Remove(bodyPath)
		c.endWrite(p.claim)
		return fmt.Errorf("metadata: %w", err)
	}
	it := &item{key: p.claim.key, hash: p.hash, meta: m, seq: p.seq, disk: c.measure(bodyPath, c.metaPath(p.hash))}
	dirBytes, topBytes := c.measure(c.subdir(p.hash)), c.measure(c.dir)
	c.mu.Lock()
	replaced := c.installLocked(it)
	c.releaseLocked(p.claim)
	c.use.measured(dirOf(p.hash), dirBytes)
	c.use.top = topBytes
	victims := c.evictLocked()
	c.mu.Unlock()
	if replaced != nil {
		c.removeBody(replaced.hash, replaced.meta.Body)
	}
	c.removeFiles(victims)
	return nil
}

// finishBody flushes, syncs and closes p's temp file and gives it its final
// name; on failure the temp file is gone.
func (c *Cache) finishBody(p *pending) (path, name string, err error) {
	tmp := p.f.Name()
	err = p.w.Flush()
	if err == nil {
		err = c.syncFile(p.f)
	}
	if cerr := p.f.Close(); err == nil {
		err = cerr
	}
	name = strings.TrimSuffix(filepath.Base(tmp), tmpSuffix)
	path = filepath.Join(filepath.Dir(tmp), name)
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
		return "", "", fmt.Errorf("body: %w", err)
	}
	return path, name, nil
}

// measure is what the files at paths take on disk; one that cannot be
// read counts as nothing (it is gone, or the next measure corrects it).
func (c *Cache) measure(paths ...string) int64 {
	var n int64
	for _, p := range paths {
		if fi, err := os.Lstat(p); err == nil {
			n += allocated(fi)
		}
	}
	return n
}

// writeMetaTemp writes m to a temp file next to its final place. Unlike the
// body it is not fsynced: a metadata file lost or emptied by a crash fails to
// parse and the loader drops the entry, which costs one cache miss, whereas a
// body that had not reached the disk could be served as garbage.
func writeMetaTemp(dir, hash string, m *meta) (string, error) {
	data, err := json.Marshal(m)
	if err != nil {
		return "", fmt.Errorf("metadata: %w", err)
	}
	f, err := os.CreateTemp(dir, hash+".*"+metaSuffix+tmpSuffix)
	if err != nil {
		return "", fmt.Errorf("metadata: %w", err)
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		os.Remove(f.Name())
		return "", fmt.Errorf("metadata: %w", err)
	}
	return f.Name(), nil
}
