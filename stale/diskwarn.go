package stale

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"
)

// A disk problem is seldom one request's: a full disk or a directory made
// read-only fails every write that follows. So a problem is said once when
// the cache opens (a directory that cannot be written is refused; a full
// disk is warned about), and afterwards each cause is logged at most once a
// minute, the next line saying how many were left out; every failed write
// is counted in nora_sidecar_stale_cache_write_errors_total by cause.

// ErrNotWritable marks a stale_dir this process cannot create files in: a
// misconfiguration, refused at start (Open) and by check-config (CheckDir).
var ErrNotWritable = errors.New("directory cannot be written")

// Causes of write failures, the values of the cause label.
const (
	causeNoSpace     = "no_space"
	causeNotWritable = "not_writable"
	causeDigest      = "digest_mismatch"
	causeOther       = "other"
)

// writeCauses lists every cause, so each series exists from the start.
func writeCauses() []string { return []string{causeNoSpace, causeNotWritable, causeDigest, causeOther} }

// causeOf names why a write failed.
func causeOf(err error) string {
	switch {
	case errors.Is(err, syscall.ENOSPC), errors.Is(err, syscall.EDQUOT):
		return causeNoSpace
	case errors.Is(err, syscall.EROFS), errors.Is(err, fs.ErrPermission):
		return causeNotWritable
	case errors.Is(err, errDigestMismatch):
		return causeDigest
	}
	return causeOther
}

// warnInterval is how often one cause of disk trouble is logged.
const warnInterval = time.Minute

// warnLimiter lets one warning of each cause through per interval and
// counts the others. Safe for concurrent use.
type warnLimiter struct {
	now func() time.Time

	mu         sync.Mutex
	last       map[string]time.Time
	suppressed map[string]int64
}

func newWarnLimiter(now func() time.Time) *warnLimiter {
	return &warnLimiter{now: now, last: map[string]time.Time{}, suppressed: map[string]int64{}}
}

// allow reports whether a warning of cause may be logged now and, if so,
// how many of that cause were left out before it. A clock that stepped
// back opens the interval again rather than silencing the cause.
func (l *warnLimiter) allow(cause string) (ok bool, suppressed int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	now := l.now()
	if last, seen := l.last[cause]; seen && now.Sub(last) < warnInterval && !now.Before(last) {
		l.suppressed[cause]++
		return false, 0
	}
	l.last[cause] = now
	suppressed, l.suppressed[cause] = l.suppressed[cause], 0
	return true, suppressed
}

// writeError counts a write that failed on the local disk and logs it,
// rate-limited; it never reaches a client.
func (c *Cache) writeError(err error, hash, op string) {
	cause := causeOf(err)
	c.m.writeErrors.WithLabelValues(cause).Inc()
	c.diskWarning(cause, err, hash, op, "stale cache write failed")
}

// diskWarning logs a disk problem of cause unless one of the same cause
// was logged less than warnInterval ago.
func (c *Cache) diskWarning(cause string, err error, hash, op, msg string) {
	ok, suppressed := c.warns.allow(cause)
	if !ok {
		return
	}
	ev := c.log.Warn().Err(err).Str("cause", cause).Str("entry", hash).Str("op", op)
	if suppressed > 0 {
		ev = ev.Int64("suppressed", suppressed)
	}
	ev.Msg(msg)
}

// CheckDir reports whether dir can hold a stale cache, as Open would find
// it, without creating anything: an existing directory this process cannot
// create files in (or, when dir does not exist yet, a nearest existing
// parent it cannot create it in) is ErrNotWritable. A full disk is no error
// here: it may be freed before the proxy starts.
func CheckDir(dir string) error {
	if dir == "" {
		return nil
	}
	p := filepath.Clean(dir)
	for {
		fi, err := os.Stat(p)
		switch {
		case err == nil && !fi.IsDir():
			return fmt.Errorf("%w: %s is not a directory", ErrNotWritable, p)
		case err == nil:
			_, err := checkDir(p)
			return err
		case !errors.Is(err, fs.ErrNotExist):
			return fmt.Errorf("%w: %w", ErrNotWritable, err)
		}
		parent := filepath.Dir(p)
		if parent == p {
			return nil
		}
		p = parent
	}
}
