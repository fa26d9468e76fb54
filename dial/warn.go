package dial

import (
	"sync"
	"time"

	"github.com/rs/zerolog"
)

// warnEvery is how often a parent's configuration error is said in the
// log: it repeats on every connection until an operator fixes it, and
// saying it once a minute keeps it visible without flooding the log.
const warnEvery = time.Minute

// warner says each parent's configuration errors in the log at most once
// a minute, with how many it left out since it last spoke.
type warner struct {
	log zerolog.Logger
	now func() time.Time

	mu   sync.Mutex
	last map[string]time.Time
	left map[string]int
}

func newWarner(log zerolog.Logger, now func() time.Time) *warner {
	return &warner{log: log, now: now, last: map[string]time.Time{}, left: map[string]int{}}
}

// configError logs err, a configuration error of the parent key, unless
// one was logged for it less than a minute ago. err names the parent by
// its key and never carries its credentials.
func (w *warner) configError(key string, err error) {
	now := w.now()
	w.mu.Lock()
	if last, ok := w.last[key]; ok && now.Sub(last) < warnEvery {
		w.left[key]++
		w.mu.Unlock()
		return
	}
	suppressed := w.left[key]
	w.last[key], w.left[key] = now, 0
	w.mu.Unlock()
	w.log.Error().Str("parent", key).Err(err).Int("suppressed", suppressed).
		Msg("parent proxy configuration error: requests through it fail until parent_proxy is fixed; counted for no breaker")
}
