package certs

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// stubGen returns a generator of distinct placeholder certificates that
// counts its calls. notAfter, when non-zero, is set on the Leaf.
func stubGen(calls *atomic.Int64, notAfter time.Time) func() (*tls.Certificate, error) {
	return func() (*tls.Certificate, error) {
		n := calls.Add(1)
		c := &tls.Certificate{Certificate: [][]byte{[]byte(fmt.Sprint(n))}}
		if !notAfter.IsZero() {
			c.Leaf = &x509.Certificate{NotAfter: notAfter}
		}
		return c, nil
	}
}

func TestStoreDefaults(t *testing.T) {
	s := NewStore(StoreOptions{})
	if s.maxEntries != 1024 || s.ttl != 24*time.Hour || s.now == nil {
		t.Fatalf("defaults: max=%d ttl=%v", s.maxEntries, s.ttl)
	}
}

func TestStoreHitAndLRUEviction(t *testing.T) {
	var calls atomic.Int64
	var generated atomic.Int64
	s := NewStore(StoreOptions{MaxEntries: 2, Now: testkit.NewClockAt(t0).Now, OnGenerate: func() { generated.Add(1) }})
	gen := stubGen(&calls, time.Time{})

	a1, _ := s.Fetch("a", gen)
	if _, err := s.Fetch("b", gen); err != nil {
		t.Fatal(err)
	}
	if a2, _ := s.Fetch("a", gen); a2 != a1 { // hit; makes "a" most recently used
		t.Fatal("second Fetch of a generated again")
	}
	if _, err := s.Fetch("c", gen); err != nil { // evicts b, the least recently used
		t.Fatal(err)
	}
	if s.Len() != 2 {
		t.Fatalf("Len = %d, want 2", s.Len())
	}
	if calls.Load() != 3 {
		t.Fatalf("gen calls = %d, want 3", calls.Load())
	}
	if a3, _ := s.Fetch("a", gen); a3 != a1 {
		t.Error("a was evicted although recently used")
	}
	if _, err := s.Fetch("b", gen); err != nil {
		t.Fatal(err)
	}
	if calls.Load() != 4 {
		t.Errorf("gen calls = %d, want 4 (b regenerated after eviction)", calls.Load())
	}
	if generated.Load() != calls.Load() {
		t.Errorf("OnGenerate = %d, gen calls = %d", generated.Load(), calls.Load())
	}
	if s.Len() != 2 {
		t.Errorf("Len = %d, want 2", s.Len())
	}
}

func TestStoreTTL(t *testing.T) {
	tests := []struct {
		name     string
		ttl      time.Duration
		notAfter time.Time // leaf NotAfter; zero = no Leaf
		stillHit time.Duration
		expired  time.Duration
	}{
		{name: "default ttl", ttl: 0, stillHit: 24*time.Hour - time.Second, expired: 24 * time.Hour},
		{name: "short ttl", ttl: time.Minute, stillHit: 59 * time.Second, expired: time.Minute},
		{name: "leaf expires before ttl", ttl: 30 * 24 * time.Hour, notAfter: t0.Add(3 * time.Hour),
			stillHit: 2*time.Hour - time.Second, expired: 2 * time.Hour},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			clock := testkit.NewClockAt(t0)
			var calls atomic.Int64
			s := NewStore(StoreOptions{TTL: tt.ttl, Now: clock.Now})
			gen := stubGen(&calls, tt.notAfter)
			first, _ := s.Fetch("h", gen)
			clock.Advance(tt.stillHit)
			if c, _ := s.Fetch("h", gen); c != first || calls.Load() != 1 {
				t.Fatalf("regenerated before expiry (calls=%d)", calls.Load())
			}
			clock.Advance(tt.expired - tt.stillHit)
			if c, _ := s.Fetch("h", gen); c == first || calls.Load() != 2 {
				t.Fatalf("not regenerated at expiry (calls=%d)", calls.Load())
			}
			if s.Len() != 1 {
				t.Errorf("Len = %d, want 1", s.Len())
			}
		})
	}
}

func TestStoreSingleFlight(t *testing.T) {
	var calls atomic.Int64
	release := make(chan struct{})
	gen := func() (*tls.Certificate, error) {
		calls.Add(1)
		<-release // hold the generation open so every goroutine finds it in flight or cached
		return &tls.Certificate{}, nil
	}
	s := NewStore(StoreOptions{})
	const n = 100
	var started, done sync.WaitGroup
	results := make([]*tls.Certificate, n)
	errs := make([]error, n)
	for i := range n {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			started.Done()
			results[i], errs[i] = s.Fetch("same.example", gen)
		}()
	}
	started.Wait()
	close(release)
	done.Wait()
	if got := calls.Load(); got != 1 {
		t.Fatalf("gen ran %d times, want 1", got)
	}
	for i := range n {
		if errs[i] != nil || results[i] != results[0] {
			t.Fatalf("goroutine %d got %p, %v; want the shared certificate", i, results[i], errs[i])
		}
	}
}

func TestStoreErrorsNotCached(t *testing.T) {
	boom := errors.New("boom")
	var calls atomic.Int64
	failing := func() (*tls.Certificate, error) { calls.Add(1); return nil, boom }
	s := NewStore(StoreOptions{})
	for range 2 {
		if _, err := s.Fetch("h", failing); !errors.Is(err, boom) {
			t.Fatalf("err = %v, want boom", err)
		}
	}
	if calls.Load() != 2 {
		t.Fatalf("failing gen ran %d times, want 2 (errors must not be cached)", calls.Load())
	}
	if s.Len() != 0 {
		t.Fatalf("Len = %d after failures", s.Len())
	}
	if c, err := s.Fetch("h", stubGen(&calls, time.Time{})); err != nil || c == nil {
		t.Fatalf("Fetch after failure: %v", err)
	}
}

func TestStoreBadGenerators(t *testing.T) {
	tests := []struct {
		name string
		gen  func() (*tls.Certificate, error)
	}{
		{"panics", func() (*tls.Certificate, error) { panic("bad") }},
		{"nil certificate", func() (*tls.Certificate, error) { return nil, nil }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := NewStore(StoreOptions{})
			if _, err := s.Fetch("h", tt.gen); err == nil {
				t.Fatal("no error")
			}
			if s.Len() != 0 || len(s.inflight) != 0 {
				t.Fatalf("state left behind: len=%d inflight=%d", s.Len(), len(s.inflight))
			}
		})
	}
}

func BenchmarkFetchHit(b *testing.B) {
	s := NewStore(StoreOptions{})
	var calls atomic.Int64
	if _, err := s.Fetch("registry.example", stubGen(&calls, time.Time{})); err != nil {
		b.Fatal(err)
	}
	gen := func() (*tls.Certificate, error) { return nil, errors.New("unexpected miss") }
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := s.Fetch("registry.example", gen); err != nil {
				b.Error(err) // b.Fatal may not be called from RunParallel's goroutines
				return
			}
		}
	})
}
