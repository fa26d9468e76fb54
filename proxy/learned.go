package proxy

import (
	"net"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"time"
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

// learnedHost is one host learned from a redirect.
type learnedHost struct {
	name     string // host as written in the breaker key: "host", or "host:port" off the default port
	upstream string // the key of the upstream that redirected to it
	expires  atomic.Int64
}

// key is the learned host's breaker key, like any alias host's.
func (h *learnedHost) key() string { return h.upstream + "@" + h.name }

// learnedHosts holds the learned hosts. Lookups read a published map
// without a lock; learning a new host copies it (rare), refreshing a known
// one only moves its expiry.
type learnedHosts struct {
	now  func() time.Time
	mu   sync.Mutex // serialises learning
	view atomic.Pointer[map[string]*learnedHost]
}

func newLearnedHosts(now func() time.Time) *learnedHosts {
	l := &learnedHosts{now: now}
	empty := map[string]*learnedHost{}
	l.view.Store(&empty)
	return l
}

// learn records that upstream redirected to target. It reports whether the
// set of hosts changed (a host was added or dropped), which needs their
// breakers to be (re)made.
func (l *learnedHosts) learn(upstream string, target *url.URL) bool {
	if target == nil || (target.Scheme != "http" && target.Scheme != "https") || target.Hostname() == "" {
		return false
	}
	hp, name := learnedHostPort(target)
	now := l.now()
	expires := now.Add(learnedTTL).UnixNano()
	if h, ok := (*l.view.Load())[hp]; ok && h.upstream == upstream && h.expires.Load() > now.UnixNano() {
		h.expires.Store(expires)
		return false
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	cur := *l.view.Load()
	next := make(map[string]*learnedHost, len(cur)+1)
	for k, h := range cur {
		if h.expires.Load() > now.UnixNano() {
			next[k] = h
		}
	}
	if len(next) >= maxLearned {
		dropSoonest(next)
	}
	h := &learnedHost{name: name, upstream: upstream}
	h.expires.Store(expires)
	next[hp] = h
	l.view.Store(&next)
	return true
}

// dropSoonest removes the host whose time runs out first.
func dropSoonest(m map[string]*learnedHost) {
	var victim string
	var soonest int64
	for k, h := range m {
		if e := h.expires.Load(); victim == "" || e < soonest {
			victim, soonest = k, e
		}
	}
	delete(m, victim)
}

// lookup returns the learned host for host:port while its time lasts.
func (l *learnedHosts) lookup(host, port string) (*learnedHost, bool) {
	h, ok := (*l.view.Load())[net.JoinHostPort(strings.ToLower(host), port)]
	if !ok || h.expires.Load() <= l.now().UnixNano() {
		return nil, false
	}
	return h, true
}

// current lists the learned hosts whose time lasts.
func (l *learnedHosts) current() []*learnedHost {
	now := l.now().UnixNano()
	var out []*learnedHost
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
	host, port := hostPort(target)
	name = host
	if !(target.Scheme == "http" && port == "80") && !(target.Scheme == "https" && port == "443") {
		name = net.JoinHostPort(host, port)
	}
	return net.JoinHostPort(host, port), name
}
