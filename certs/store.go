package certs

import (
	"container/list"
	"crypto/tls"
	"fmt"
	"sync"
	"time"
)

// Defaults applied by NewStore to zero StoreOptions fields.
const (
	DefaultMaxEntries = 1024
	DefaultTTL        = 24 * time.Hour
)

// StoreOptions configures a Store. Every zero value means "use the default".
type StoreOptions struct {
	// MaxEntries bounds the number of cached leaves; the least recently
	// used one is dropped beyond it. Zero or negative means 1024.
	MaxEntries int
	// TTL is how long a leaf is served before it is generated again. A
	// leaf is also regenerated an hour before its own NotAfter, whichever
	// comes first. Zero or negative means 24h.
	TTL time.Duration
	// Now is the clock; nil means time.Now.
	Now func() time.Time
	// OnGenerate, when set, is called once per leaf actually generated
	// (not per cache hit), e.g. to count them in a metric.
	OnGenerate func()
}

// Store is a bounded LRU cache of leaf certificates keyed by host name, with
// a TTL and one generation per host at a time: concurrent misses for the same
// host wait for a single call of gen and share its result. Failed
// generations are not cached, so the next Fetch tries again.
//
// Store implements goproxy.CertStorage. It is safe for concurrent use.
type Store struct {
	maxEntries int
	ttl        time.Duration
	now        func() time.Time
	onGenerate func()

	mu       sync.Mutex
	lru      *list.List               // front = most recently used; values are *entry
	entries  map[string]*list.Element // host -> element in lru
	inflight map[string]*call         // host -> generation in progress
}

// entry is one cached leaf.
type entry struct {
	host    string
	cert    *tls.Certificate
	expires time.Time
}

// call is one generation in progress; done is closed once cert/err are set.
type call struct {
	done chan struct{}
	cert *tls.Certificate
	err  error
}

// NewStore returns an empty Store with o's defaults applied.
func NewStore(o StoreOptions) *Store {
	if o.MaxEntries <= 0 {
		o.MaxEntries = DefaultMaxEntries
	}
	if o.TTL <= 0 {
		o.TTL = DefaultTTL
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return &Store{
		maxEntries: o.MaxEntries,
		ttl:        o.TTL,
		now:        o.Now,
		onGenerate: o.OnGenerate,
		lru:        list.New(),
		entries:    make(map[string]*list.Element),
		inflight:   make(map[string]*call),
	}
}

// Fetch returns the cached leaf for hostname, or calls gen to make one. Only
// one gen per host runs at a time; callers arriving meanwhile wait for it.
// The cache and the in-flight table are checked under one lock, so N
// concurrent misses for one host run gen exactly once.
func (s *Store) Fetch(hostname string, gen func() (*tls.Certificate, error)) (*tls.Certificate, error) {
	s.mu.Lock()
	if cert, ok := s.lookupLocked(hostname); ok {
		s.mu.Unlock()
		return cert, nil
	}
	if c, ok := s.inflight[hostname]; ok {
		s.mu.Unlock()
		<-c.done
		return c.cert, c.err
	}
	c := &call{done: make(chan struct{})}
	s.inflight[hostname] = c
	s.mu.Unlock()

	c.cert, c.err = s.generate(gen)

	s.mu.Lock()
	delete(s.inflight, hostname)
	if c.err == nil {
		s.addLocked(hostname, c.cert)
	}
	s.mu.Unlock()
	close(c.done)
	return c.cert, c.err
}

// generate runs gen, turning a panic or a nil certificate into an error:
// otherwise the waiters of this call would block forever or crash later.
func (s *Store) generate(gen func() (*tls.Certificate, error)) (cert *tls.Certificate, err error) {
	defer func() {
		if r := recover(); r != nil {
			cert, err = nil, fmt.Errorf("leaf certificate generation panicked: %v", r)
		}
	}()
	cert, err = gen()
	if err == nil && cert == nil {
		err = fmt.Errorf("leaf certificate generation returned no certificate")
	}
	if err == nil && s.onGenerate != nil {
		s.onGenerate()
	}
	return cert, err
}

// lookupLocked returns a fresh cached leaf and marks it recently used; an
// expired one is dropped so that the caller regenerates it.
func (s *Store) lookupLocked(host string) (*tls.Certificate, bool) {
	el, ok := s.entries[host]
	if !ok {
		return nil, false
	}
	e := el.Value.(*entry)
	if !s.now().Before(e.expires) {
		s.lru.Remove(el)
		delete(s.entries, host)
		return nil, false
	}
	s.lru.MoveToFront(el)
	return e.cert, true
}

// addLocked caches cert for host and evicts the least recently used leaves
// beyond maxEntries.
func (s *Store) addLocked(host string, cert *tls.Certificate) {
	e := &entry{host: host, cert: cert, expires: s.expiry(cert)}
	if el, ok := s.entries[host]; ok {
		el.Value = e
		s.lru.MoveToFront(el)
		return
	}
	s.entries[host] = s.lru.PushFront(e)
	for s.lru.Len() > s.maxEntries {
		last := s.lru.Back()
		s.lru.Remove(last)
		delete(s.entries, last.Value.(*entry).host)
	}
}

// expiry is the earlier of now+TTL and an hour before the leaf's NotAfter,
// so a long TTL never makes the store serve an expired certificate.
func (s *Store) expiry(cert *tls.Certificate) time.Time {
	exp := s.now().Add(s.ttl)
	if cert.Leaf != nil {
		if limit := cert.Leaf.NotAfter.Add(-clockSkew); limit.Before(exp) {
			exp = limit
		}
	}
	return exp
}

// Len returns the number of cached leaves, expired ones not yet dropped
// included.
func (s *Store) Len() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lru.Len()
}
