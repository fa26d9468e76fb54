package breakerstate

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// BenchmarkAllowDone measures the request path of a healthy key: one Allow
// and one Done(Success) on a Closed breaker.
func BenchmarkAllowDone(b *testing.B) {
	h := newHarness(b, true, keySettings(testKey, 5, 30*time.Second))
	b.ReportAllocs()
	for b.Loop() {
		tk, err := h.Allow(testKey)
		if err != nil {
			b.Fatal(err)
		}
		tk.Done(Success)
	}
}

// BenchmarkAllowDoneParallel spreads the same path over 64 keys: with one
// lock per key, throughput should scale with cores.
func BenchmarkAllowDoneParallel(b *testing.B) {
	const n = 64
	keys := make([]KeySettings, n)
	names := make([]string, n)
	for i := range keys {
		names[i] = fmt.Sprintf("maven:https://repo%d.example.org/maven2", i)
		keys[i] = keySettings(names[i], 5, 30*time.Second)
	}
	h := newHarness(b, true, keys...)
	var offset atomic.Uint32
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		// Each goroutine starts on its own stretch of keys so that they
		// rarely meet on one lock.
		i := int(offset.Add(17))
		for pb.Next() {
			tk, err := h.Allow(names[i%n])
			if err != nil {
				b.Error(err)
				return
			}
			tk.Done(Success)
			i++
		}
	})
}

// BenchmarkAllowRejected measures the fail-fast path of an open key.
func BenchmarkAllowRejected(b *testing.B) {
	h := newHarness(b, true, keySettings(testKey, 1, time.Hour))
	h.openBreaker(b, testKey)
	b.ReportAllocs()
	for b.Loop() {
		if _, err := h.Allow(testKey); err == nil {
			b.Fatal("admitted")
		}
	}
}
