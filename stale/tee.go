package stale

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/textproto"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"
)

// teeBufferSize is the write buffer in front of the temp file: the only cost
// the client's stream pays for the cache is a copy into it.
const teeBufferSize = 32 << 10

// Store arranges for resp's body, the answer to the request ref names, to
// be stored under ref's key while the caller streams it: resp.Body is
// replaced by a reader that copies every byte it returns into a temp file.
// The copy records ref's credentials, so that Find serves it only where
// ref's mode allows. The entry is committed, in the background, only after
// a clean EOF (or a Close once exactly ContentLength bytes were read) with
// the announced length and within MaxObjectBytes. Anything else — a Close
// before the end, a read error, a short or long body, a disk error — drops
// the temp file and leaves any earlier entry of the key in place. The reader
// returns exactly what the original body returns: a cache problem is logged
// and counted, never passed to the client. After Close, Store does nothing.
// Call it only for responses StorableFor accepted.
func (c *Cache) Store(ref Ref, resp *http.Response) {
	key := ref.Key
	if key == "" || resp == nil || resp.Body == nil || (!ref.Head && resp.ContentLength > c.bodyLimit(resp.StatusCode)) {
		return
	}
	hash := keyHash(key)
	want := wantLength(ref, resp)
	w, ok := c.startWriting(key, dirOf(hash), resp.StatusCode, c.use.writeReserve(max(want, 0)))
	if !ok {
		return
	}
	f, err := c.createTemp(hash)
	if err != nil {
		c.writeError(err, hash, "create temp file")
		c.endWrite(w)
		return
	}
	resp.Body = &teeBody{
		c:   c,
		src: resp.Body,
		p: pending{
			claim:      w,
			hash:       hash,
			status:     resp.StatusCode,
			header:     storedHeader(resp.Header),
			storedAt:   c.now(),
			cred:       ref.Cred,
			headLength: headLength(ref, resp),
			vary:       varyValues(resp.Header, ref.header),
		},
		want:   want,
		limit:  c.bodyLimit(resp.StatusCode),
		digest: newDigestCheck(ref.Digest),
		f:      f,
		w:      bufio.NewWriterSize(f, teeBufferSize),
	}
}

// createTemp creates the temp file of a write of hash in its entry
// directory, creating the directory when it is missing.
func (c *Cache) createTemp(hash string) (*os.File, error) {
	dir := c.subdir(hash)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	// The random middle part of the temp name becomes the body's unique name,
	// so concurrent writes of one key never share a file.
	return os.CreateTemp(dir, hash+".*"+bodySuffix+tmpSuffix)
}

// write is one write in flight: the key it claimed, its entry directory and
// what it reserved on disk (usage.go). Its fields are guarded by c.mu once
// the write has started, except that only the write's own reader changes
// reserved (grow).
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

// pending is what a finished body needs to become an entry.
type pending struct {
	claim      *write
	hash       string
	cred       string
	headLength int64
	vary       map[string]string
	status     int
	header     http.Header
	size       int64
	seq        uint64
	storedAt   time.Time
	f          *os.File
	w          *bufio.Writer
}

// teeBody is the reader Store installs.
type teeBody struct {
	c      *Cache
	src    io.ReadCloser
	p      pending
	want   int64        // ContentLength; -1 when unknown
	limit  int64        // the most bytes kept for this answer
	digest *digestCheck // nil unless the body must hash to a digest

	// mu guards the fields below. It is never held across src.Read, so a
	// Close from another goroutine can always interrupt a stalled read.
	mu sync.Mutex
	f  *os.File // nil once the write was committed or abandoned
	w  *bufio.Writer
	n  int64
}

// Read passes src's bytes and error through unchanged and copies the bytes.
func (t *teeBody) Read(b []byte) (int, error) {
	n, err := t.src.Read(b)
	t.mu.Lock()
	if t.f != nil {
		t.observe(b[:n], err)
	}
	t.mu.Unlock()
	return n, err
}

// observe records one Read's result. t.mu must be held and the write active.
func (t *teeBody) observe(b []byte, err error) {
	if len(b) > 0 {
		t.n += int64(len(b))
		if t.n > t.limit || (t.want >= 0 && t.n > t.want) {
			t.abandon()
			return
		}
		if need := t.c.use.writeReserve(t.n); need > t.p.claim.reserved && !t.c.grow(t.p.claim, need) {
			// No room under the bound: this answer goes unstored.
			t.abandon()
			return
		}
		t.digest.write(b)
		if _, werr := t.w.Write(b); werr != nil {
			t.c.writeError(werr, t.p.hash, "write body")
			t.abandon()
			return
		}
	}
	switch {
	case err == nil:
	case err == io.EOF && (t.want < 0 || t.n == t.want):
		t.finish()
	default:
		// A broken-off body, or one that ended short of Content-Length.
		t.abandon()
	}
}

// Close closes src first, which unblocks a Read stalled in another goroutine.
// A body that already delivered its full known length is complete even if the
// caller never read the EOF; anything else is abandoned.
func (t *teeBody) Close() error {
	err := t.src.Close()
	t.mu.Lock()
	if t.f != nil {
		if t.want >= 0 && t.n == t.want {
			t.finish()
		} else {
			t.abandon()
		}
	}
	t.mu.Unlock()
	return err
}

// abandon drops the temp file. t.mu must be held.
func (t *teeBody) abandon() {
	name := t.f.Name()
	t.f.Close()
	t.f, t.w = nil, nil
	if err := os.Remove(name); err != nil {
		t.c.diskWarning(causeOf(err), err, t.p.hash, "remove temp file", "stale cache: cannot remove temp file")
	}
	t.c.endWrite(t.p.claim)
}

// finish hands the complete body to a background commit, so the client's
// final Read never waits for fsync or renames. t.mu must be held.
func (t *teeBody) finish() {
	if !t.digest.matches() {
		// Not the bytes the digest names (a broken or hostile upstream):
		// such a copy must never be served.
		t.c.writeError(errDigestMismatch, t.p.hash, "verify digest")
		t.abandon()
		return
	}
	p := t.p
	p.size, p.f, p.w = t.n, t.f, t.w
	c := t.c
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		t.abandon()
		return
	}
	c.seq++
	p.seq = c.seq
	c.commits.Add(1)
	c.mu.Unlock()
	t.f, t.w = nil, nil
	go func() {
		defer c.commits.Done()
		if err := c.commit(&p); err != nil {
			c.writeError(err, p.hash, "commit")
		}
	}()
}

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
		Size: p.size, StoredAt: p.storedAt, Body: bodyName, Cred: p.cred, Vary: p.vary, HeadLength: p.headLength}
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

// wantLength is the body length a copy must have: none for a HEAD's.
func wantLength(ref Ref, resp *http.Response) int64 {
	if ref.Head {
		return 0
	}
	return resp.ContentLength
}

// headLength is what a HEAD's copy announces as its Content-Length.
func headLength(ref Ref, resp *http.Response) int64 {
	if ref.Head && resp.ContentLength > 0 {
		return resp.ContentLength
	}
	return 0
}

// storedHeader returns the headers worth keeping from an upstream answer.
func storedHeader(h http.Header) http.Header {
	out := h.Clone()
	if out == nil {
		return http.Header{}
	}
	for _, v := range h.Values("Connection") {
		for tok := range strings.SplitSeq(v, ",") {
			if tok = strings.TrimSpace(tok); tok != "" {
				out.Del(tok)
			}
		}
	}
	for k := range out {
		if notStored(textproto.CanonicalMIMEHeaderKey(k)) {
			delete(out, k)
		}
	}
	return out
}

// notStored reports headers that are never stored: they describe one
// connection, or (Set-Cookie) belong to one client, or (Content-Length, Age,
// X-Nora-Stale) are recomputed when the entry is served.
func notStored(k string) bool {
	switch k {
	case "Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
		"Set-Cookie", "Set-Cookie2", "Content-Length", "Age", "X-Nora-Stale":
		return true
	}
	return strings.HasPrefix(k, "Proxy-")
}
