package attempt

import (
	"math"
	"sync"
	"sync/atomic"
	"time"
)

// What a host's header times have been lately (docs/behaviour.md §5.10):
// the loop hedges a request to a host that is slower than usual for it,
// and a host that is slow by habit is given longer before its silence
// counts against it. Each key keeps counts of its GET and HEAD header times
// in half-octave buckets over two windows of a minute, the current one and
// the one before, so what it says is about the last one to two minutes; the
// request path only adds to an atomic counter and reads a cached figure.

const (
	// recentWindow is the length of one window of counts.
	recentWindow = time.Minute
	// recentBuckets half-octave buckets from 1 ms reach past 12 minutes,
	// longer than any header wait.
	recentBuckets = 40
	// recentMinSamples is how many answers a figure needs before it says
	// anything: fewer are too few for a tail.
	recentMinSamples = 5
	// recentRefresh is how long a computed figure is used before it is
	// computed again from the counts.
	recentRefresh = 250 * time.Millisecond
)

// recent holds every key's header times. It is safe for concurrent use.
type recent struct {
	born time.Time // the origin of window numbers; only ever subtracted
	keys sync.Map  // breaker key → *headerTimes
}

// headerTimes is one key's counts and its cached tail.
type headerTimes struct {
	answers atomic.Uint64 // every answer counted, ever
	windows [2]timesWindow
	// tail is the cached figure (-1: too few answers), computed at
	// tailAt, a time since recent.born.
	tail   atomic.Int64
	tailAt atomic.Int64
}

// timesWindow is one window's counts; epoch says which window they are.
type timesWindow struct {
	epoch  atomic.Int64
	counts [recentBuckets]atomic.Uint32
}

// observe counts one header time of key at now.
func (r *recent) observe(key string, now time.Time, d time.Duration) {
	ht := r.of(key)
	ht.answers.Add(1)
	w := ht.window(r.epoch(now))
	w.counts[bucketOf(d)].Add(1)
}

// answered is how many answers of key have been counted.
func (r *recent) answered(key string) uint64 {
	v, ok := r.keys.Load(key)
	if !ok {
		return 0
	}
	return v.(*headerTimes).answers.Load()
}

// tailOf is about the 99th percentile of key's recent header times (an
// upper bound, at most √2 times the true one), and false when the key has
// answered fewer than recentMinSamples times in the last two windows.
func (r *recent) tailOf(key string, now time.Time) (time.Duration, bool) {
	v, ok := r.keys.Load(key)
	if !ok {
		return 0, false
	}
	ht := v.(*headerTimes)
	since := int64(now.Sub(r.born))
	if at := ht.tailAt.Load(); at != 0 && since-at < int64(recentRefresh) && since >= at {
		d := ht.tail.Load()
		return time.Duration(d), d >= 0
	}
	d := ht.compute(r.epoch(now))
	ht.tail.Store(int64(d))
	ht.tailAt.Store(max(since, 1))
	return d, d >= 0
}

func (r *recent) of(key string) *headerTimes {
	if v, ok := r.keys.Load(key); ok {
		return v.(*headerTimes)
	}
	ht := &headerTimes{}
	ht.tail.Store(-1)
	ht.windows[0].epoch.Store(-2)
	ht.windows[1].epoch.Store(-2)
	v, _ := r.keys.LoadOrStore(key, ht)
	return v.(*headerTimes)
}

// epoch is the number of the window now falls in.
func (r *recent) epoch(now time.Time) int64 { return int64(now.Sub(r.born) / recentWindow) }

// window returns the counts of window e, clearing them first when they
// still hold an older window's. Two requests that start a window at the
// same moment may lose a count or two between them: the figure is a guide,
// not an account.
func (ht *headerTimes) window(e int64) *timesWindow {
	w := &ht.windows[e&1]
	if old := w.epoch.Load(); old != e && w.epoch.CompareAndSwap(old, e) {
		for i := range w.counts {
			w.counts[i].Store(0)
		}
	}
	return w
}

// compute is the tail over windows e and e-1, or -1.
func (ht *headerTimes) compute(e int64) time.Duration {
	var counts [recentBuckets]uint64
	var total uint64
	for i := range ht.windows {
		w := &ht.windows[i]
		if ep := w.epoch.Load(); ep != e && ep != e-1 {
			continue
		}
		for b := range w.counts {
			c := uint64(w.counts[b].Load())
			counts[b] += c
			total += c
		}
	}
	if total < recentMinSamples {
		return -1
	}
	rank := (total*99 + 99) / 100 // ⌈0.99 × total⌉
	var seen uint64
	for b, c := range counts {
		if seen += c; seen >= rank {
			return bucketTop(b)
		}
	}
	return bucketTop(recentBuckets - 1)
}

// bucketOf is d's bucket: 0 below 1 ms, then one per half octave.
func bucketOf(d time.Duration) int {
	ms := float64(d) / float64(time.Millisecond)
	if ms < 1 {
		return 0
	}
	return min(int(math.Floor(2*math.Log2(ms)))+1, recentBuckets-1)
}

// bucketTop is the upper bound of bucket b: 1 ms × 2^(b/2).
func bucketTop(b int) time.Duration {
	return time.Duration(float64(time.Millisecond) * math.Exp2(float64(b)/2))
}
