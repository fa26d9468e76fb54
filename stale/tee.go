package stale

import (
	"bufio"
	"crypto/sha256"
	"encoding/hex"
	"hash"
	"io"
	"net/http"
	"net/textproto"
	"os"
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
	t := &teeBody{
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
			varySHA256: varyDigests(resp.Header, ref.header),
		},
		want:   want,
		limit:  c.bodyLimit(resp.StatusCode),
		digest: newDigestCheck(ref.Digest),
		named:  ref.named,
		f:      f,
		w:      bufio.NewWriterSize(f, teeBufferSize),
	}
	if ref.manifest {
		t.sum = sha256.New()
	}
	resp.Body = t
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

// pending is what a finished body needs to become an entry.
type pending struct {
	claim      *write
	hash       string
	cred       string
	headLength int64
	varySHA256 map[string]string
	bodySHA256 string
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
	// sum hashes a docker manifest's body (nil for other answers); named
	// is the digest its request named ("" by tag).
	sum   hash.Hash
	named string

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
		if t.sum != nil {
			t.sum.Write(b)
		}
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
	if t.sum != nil {
		t.p.bodySHA256 = "sha256:" + hex.EncodeToString(t.sum.Sum(nil))
		if !holdsNamed(t.named, t.p.status, t.p.bodySHA256) {
			// A manifest by digest whose bytes are others: never kept, so
			// it does not replace the copy that holds the right ones.
			t.c.writeError(errDigestMismatch, t.p.hash, "verify manifest digest")
			t.abandon()
			return
		}
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
