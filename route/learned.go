package route

import (
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/hostport"
	"github.com/nora-breaker/nora-breaker/internal/monotime"
)

// Learned redirect hosts (docs/behaviour.md §3.2): a host named in the
// Location of a redirect that a classified upstream answered is treated as
// an alias host of that upstream for learnedTTL after the last such
// redirect, so deny_unlisted does not break a registry whose blobs live on
// storage it redirects to. At most maxLearned hosts are remembered.
const (
	learnedTTL = 10 * time.Minute
	maxLearned = 256
)

// LearnedHost is one host learned from a redirect.
type LearnedHost struct {
	// Name is the host as written in the breaker key: "host", or
	// "host:port" off its scheme's default port.
	Name string
	// Upstream is the key of the upstream that redirected to it.
	Upstream string
	// Scheme is the scheme the redirect named: only requests of that
	// scheme are the learned host's.
	Scheme string
	// expires is the reading of the set's monotonic clock at which the
	// host is forgotten.
	expires atomic.Int64
}

// Key is the learned host's breaker key, like any alias host's.
func (h *LearnedHost) Key() string { return h.Upstream + "@" + h.Name }

// Learned holds the learned hosts. Lookups read a published map
// without a lock; learning a new host copies it (rare), refreshing a known
// one only moves its expiry.
type Learned struct {
	// mono times the expiries: a wall-clock step must not keep a host
	// learned longer, nor forget it early.
	mono monotime.Clock
	mu   sync.Mutex // serialises learning
	view atomic.Pointer[map[string]*LearnedHost]
}

// NewLearned returns an empty set of learned hosts, timed by now through
// monotime.Of: with time.Now the expiries follow Go's monotonic clock.
func NewLearned(now func() time.Time) *Learned { return newLearned(monotime.Of(now)) }

// newLearned is NewLearned on a monotonic clock given directly, so a test
// can step the wall clock alone.
func newLearned(mono monotime.Clock) *Learned {
	l := &Learned{mono: mono}
	empty := map[string]*LearnedHost{}
	l.view.Store(&empty)
	return l
}

// Learn records that upstream redirected to target. It reports whether the
// set of hosts changed (a host was added or dropped), which needs their
// breakers to be (re)made.
func (l *Learned) Learn(upstream string, target *url.URL) bool {
	if target == nil || (target.Scheme != "http" && target.Scheme != "https") || target.Hostname() == "" {
		return false
	}
	hp, name := learnedHostPort(target)
	now := int64(l.mono())
	expires := now + int64(learnedTTL)
	if h, ok := (*l.view.Load())[hp]; ok && h.Upstream == upstream && h.Scheme == target.Scheme &&
		h.expires.Load() > now {
		h.expires.Store(expires)
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := *l.view.Load()
	next := make(map[string]*LearnedHost, len(cur)+1)
	for k, h := range cur {
		if h.expires.Load() > now {
			next[k] = h
		}
	}
	if len(next) >= maxLearned {
		dropSoonest(next)
	}
	h := &LearnedHost{Name: name, Upstream: upstream, Scheme: strings.ToLower(target.Scheme)}
	h.expires.Store(expires)
	next[hp] = h
	l.view.Store(&next)
	return true
}

// dropSoonest removes the host whose time runs out first.
func dropSoonest(m map[string]*LearnedHost) {
	var victim string
	var soonest int64
	for k, h := range m {
		if e := h.expires.Load(); victim == "" || e < soonest {
			victim, soonest = k, e
		}
	}
	delete(m, victim)
}

// Lookup returns the learned host for host:port while its time lasts.
func (l *Learned) Lookup(host, port string) (*LearnedHost, bool) {
	h, ok := (*l.view.Load())[hostport.Join(host, port)]
	if !ok || h.expires.Load() <= int64(l.mono()) {
		return nil, false
	}
	return h, true
}

// Current lists the learned hosts whose time lasts.
func (l *Learned) Current() []*LearnedHost {
	now := int64(l.mono())
	var out []*LearnedHost
	for _, h := range *l.view.Load() {
		if h.expires.Load() > now {
			out = append(out, h)
		}
	}
	return out
}

// learnedHostPort is target's "host:port" and the name its breaker key
// uses: the host alone on its scheme's default port, else host:port.
func learnedHostPort(target *url.URL) (hp, name string) {
	host, port := hostport.Of(target)
	return hostport.Join(host, port), hostport.Authority(target.Scheme, host, port)
}
