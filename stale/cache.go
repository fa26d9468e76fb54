package stale

import (
	"container/list"
	"errors"
	"io/fs"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"
)

// Defaults applied to zero Options fields (docs/behaviour.md §2.2).
const (
	defaultMaxBytes       int64 = 1 << 30
	defaultMaxObjectBytes int64 = 64 << 20
)

// Options configures a Cache. Zero values mean: MaxBytes 1 GiB,
// MaxObjectBytes 64 MiB, Now time.Now, no metric registration, no logs.
type Options struct {
	// Dir holds the cache; it is created with mode 0700 when missing.
	Dir string
	// MaxBytes bounds what the cache takes on disk: the allocated blocks of
	// its bodies, metadata and directories, and what the writes in flight
	// will take (usage.go). The least recently used entries are evicted to
	// stay under it.
	MaxBytes int64
	// MaxObjectBytes bounds one body; larger answers are never stored.
	MaxObjectBytes int64
	// Now is the clock used for StoredAt.
	Now func() time.Time
	// Registerer receives the nora_sidecar_stale_cache_* series.
	Registerer prometheus.Registerer
	// RefreshAfter is how long a stored copy is kept before an answer to the
	// same request replaces it; zero means 30 s. Negative means always.
	RefreshAfter time.Duration
	// MaxWriters bounds the writes in flight; zero means 64. Beyond it
	// answers are simply not stored.
	MaxWriters int
	// Logger receives write errors and load findings; keys are never logged
	// (they hold URLs with query values), only their hashes. The cache adds
	// no component field: the caller names the component (the proxy gives
	// "component":"stale"), and a second one would make a duplicate key.
	Logger zerolog.Logger

	// checkDir replaces the start-up check of Dir in tests (dircheck_*.go).
	checkDir func(dir string) (full bool, err error)
}

// Cache is the stale cache. It is safe for concurrent use.
type Cache struct {
	dir                 string
	maxBytes, maxObject int64
	now                 func() time.Time
	log                 zerolog.Logger
	m                   *metrics

	// commitMu serialises every change to committed files (meta renames and
	// deletions) together with the matching index change, so the index and
	// the disk agree about which body a key names. Lookups never take it.
	commitMu sync.Mutex

	mu    sync.Mutex // guards the fields below
	index map[string]*item
	// writing holds the keys with a write in flight (Store to commit).
	writing      map[string]bool
	maxWriters   int
	refreshAfter time.Duration
	lru          *list.List // of *item; front is the most recently used
	use          usage
	dock         dockerIndex
	closed       bool
	// seq numbers finished bodies in the order they completed, so that of
	// two writes of one key the one that finished last wins even when the
	// background commits run in the other order.
	seq uint64

	// commits counts the goroutines in flight that commit bodies or remove
	// evicted entries' files; Close waits for them.
	commits sync.WaitGroup
	// syncFile makes a body durable before it is published. A field rather
	// than a direct call so the concurrency test can skip disk flushes that
	// prove nothing about locking and dominate its run time.
	syncFile func(*os.File) error
	// warns rate-limits the warnings of disk problems (diskwarn.go).
	warns *warnLimiter
}

// item is the in-memory index entry of one committed key.
type item struct {
	key, hash string
	meta      *meta
	seq       uint64 // 0 for entries loaded at Open
	elem      *list.Element
	// disk is what the entry's body and metadata files take on disk.
	disk int64
}

// Open prepares the cache in o.Dir: it creates the directory, refuses one
// it cannot create files in (ErrNotWritable) and warns once of a full disk,
// rebuilds the index from the committed entries, removes temporary,
// orphaned and corrupt files, and evicts down to MaxBytes. Its errors do
// not name the package; the caller does.
func Open(o Options) (*Cache, error) {
	if o.Dir == "" {
		return nil, errors.New("no directory")
	}
	if o.MaxBytes <= 0 {
		o.MaxBytes = defaultMaxBytes
	}
	if o.MaxObjectBytes <= 0 {
		o.MaxObjectBytes = defaultMaxObjectBytes
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	if o.RefreshAfter == 0 {
		o.RefreshAfter = 30 * time.Second
	}
	if o.MaxWriters <= 0 {
		o.MaxWriters = 64
	}
	if o.checkDir == nil {
		o.checkDir = checkDir
	}
	if err := os.MkdirAll(o.Dir, 0o700); err != nil {
		return nil, err
	}
	full, err := o.checkDir(o.Dir)
	if err != nil {
		return nil, err
	}
	top, err := os.Stat(o.Dir)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(o.Registerer)
	if err != nil {
		return nil, err
	}
	c := &Cache{
		dir:      o.Dir,
		maxBytes: o.MaxBytes,
		// An object larger than the whole cache could never stay in it.
		maxObject:    min(o.MaxObjectBytes, o.MaxBytes),
		now:          o.Now,
		log:          o.Logger,
		m:            m,
		index:        make(map[string]*item),
		writing:      make(map[string]bool),
		maxWriters:   o.MaxWriters,
		refreshAfter: o.RefreshAfter,
		lru:          list.New(),
		use:          newUsage(allocUnit(top), allocated(top)),
		dock:         newDockerIndex(),
		syncFile:     (*os.File).Sync,
		warns:        newWarnLimiter(o.Now),
	}
	if full {
		// Said once: the writes that fail on it within the minute are
		// only counted.
		c.warns.allow(causeNoSpace)
		c.log.Warn().Str("cause", causeNoSpace).Msg("stale cache: the disk of stale_dir is full; no copy is kept until space is freed")
	}
	if err := c.load(); err != nil {
		return nil, err
	}
	c.commitMu.Lock()
	defer c.commitMu.Unlock()
	c.mu.Lock()
	victims := c.evictLocked()
	c.mu.Unlock()
	c.removeFiles(victims)
	return c, nil
}

// maxNegativeBody bounds a kept 404 or 410: its status and headers are what
// matter, and a large error page is not worth the disk.
const maxNegativeBody = 64 << 10

// StorableFor reports whether resp, the answer to req, may be stored for
// ref: a GET answered 200, or 404/410 (a negative answer, up to 64 KiB), a
// HEAD answered 200 when ref is a HEAD's, a 401 too when ref is marked
// AnyStatus (the docker ping); never with Cache-Control no-store, never
// announced larger than its bound.
func (c *Cache) StorableFor(ref Ref, req *http.Request, resp *http.Response) bool {
	if req == nil || resp == nil {
		return false
	}
	switch req.Method {
	case http.MethodGet, http.MethodHead:
		if (req.Method == http.MethodHead) != ref.Head {
			return false
		}
	default:
		return false
	}
	switch resp.StatusCode {
	case http.StatusOK:
	case http.StatusUnauthorized:
		if !ref.AnyStatus {
			return false
		}
	case http.StatusNotFound, http.StatusGone:
		if ref.Head {
			return false
		}
	default:
		return false
	}
	// A HEAD answer is headers only: its body is empty whatever
	// Content-Length says.
	if !ref.Head && resp.ContentLength > c.bodyLimit(resp.StatusCode) {
		return false
	}
	return !noStore(resp.Header) && !variesByEverything(resp.Header)
}

// noStore reports Cache-Control: no-store.
func noStore(h http.Header) bool {
	for _, v := range h.Values("Cache-Control") {
		for tok := range strings.SplitSeq(v, ",") {
			tok, _, _ = strings.Cut(tok, "=")
			if strings.EqualFold(strings.TrimSpace(tok), "no-store") {
				return true
			}
		}
	}
	return false
}

// bodyLimit is the largest body kept for an answer with status.
func (c *Cache) bodyLimit(status int) int64 {
	if status == http.StatusOK {
		return c.maxObject
	}
	return min(c.maxObject, maxNegativeBody)
}

// Find returns the entry stored under ref's key, if ref may be served it
// (Ref.servable), and marks it recently used; a docker manifest or ping
// whose own key misses may be answered by another client's copy of the same
// thing (dockercopies.go). The caller must Close the entry's Body. A body
// deleted between the index read and the open (eviction or replacement
// racing) is retried once, then a miss.
func (c *Cache) Find(ref Ref) (*Entry, bool) {
	for range 2 {
		c.mu.Lock()
		found, ok := c.matchLocked(ref)
		if !ok {
			c.mu.Unlock()
			return nil, false
		}
		if found.made != nil {
			c.mu.Unlock()
			return found.made, true
		}
		it := found.it
		c.lru.MoveToFront(it.elem)
		m, path := it.meta, c.bodyPath(it.hash, it.meta.Body)
		c.mu.Unlock()

		f, err := os.Open(path)
		if err != nil {
			if !errors.Is(err, fs.ErrNotExist) {
				c.diskWarning(causeOf(err), err, it.hash, "open body", "stale cache: cannot open body")
				return nil, false
			}
			continue
		}
		return &Entry{
			Status:     m.Status,
			Header:     m.Header.Clone(),
			Body:       f,
			Size:       m.Size,
			HeadLength: m.HeadLength,
			StoredAt:   found.storedAt,
		}, true
	}
	return nil, false
}

// Has reports whether Find would find a copy for ref, without opening it
// or marking it used (the fallback loop asks it while deciding whether a
// request has somewhere else to go).
func (c *Cache) Has(ref Ref) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, ok := c.matchLocked(ref)
	return ok
}

// matchLocked finds the copy for ref: its own, else a docker copy by
// meaning. c.mu must be held.
func (c *Cache) matchLocked(ref Ref) (match, bool) {
	if it, ok := c.index[ref.Key]; ok && ref.servable(it.meta.Cred) && variantMatches(it.meta, ref.header) &&
		ref.bytesNamed(it.meta) {
		return match{it: it, storedAt: it.meta.StoredAt}, true
	}
	return c.dockerMatchLocked(ref)
}

// Stats returns what the cache takes on disk (as MaxBytes counts it) and
// the number of entries.
func (c *Cache) Stats() (bytes int64, objects int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.use.total(), len(c.index)
}

// Close stops accepting new writes and waits for commits already under way,
// so that a graceful shutdown keeps every body that finished streaming.
// Lookups keep working. Close is idempotent.
func (c *Cache) Close() error {
	c.mu.Lock()
	c.closed = true
	c.mu.Unlock()
	c.commits.Wait()
	return nil
}

// subdir is the directory holding the entry of hash.
func (c *Cache) subdir(hash string) string { return filepath.Join(c.dir, dirOf(hash)) }

// dirOf names the entry directory of hash: its first two hex digits.
func dirOf(hash string) string { return hash[:2] }

func (c *Cache) metaPath(hash string) string {
	return filepath.Join(c.subdir(hash), hash+metaSuffix)
}

func (c *Cache) bodyPath(hash, body string) string {
	return filepath.Join(c.subdir(hash), body)
}

// installLocked puts it in the index as the most recently used entry and
// returns the entry it replaced, if any. c.mu must be held.
func (c *Cache) installLocked(it *item) (replaced *item) {
	c.use.enter(dirOf(it.hash))
	c.use.entries += it.disk
	c.dock.add(it)
	if old, ok := c.index[it.key]; ok {
		c.lru.Remove(old.elem)
		c.dock.remove(old)
		c.use.entries -= old.disk
		c.use.leave(dirOf(old.hash)) // never the last: it entered above
		replaced = old
	}
	it.elem = c.lru.PushFront(it)
	c.index[it.key] = it
	c.updateGaugesLocked()
	return replaced
}

func (c *Cache) updateGaugesLocked() {
	c.m.bytes.Set(float64(c.use.total()))
	c.m.objects.Set(float64(len(c.index)))
}
