package breakerstate

import (
	"fmt"
	"sync/atomic"
	"testing"
	"time"
)

// benchKeys returns a harness over n maven-like keys and their names.
func benchKeys(b *testing.B, n int) (*harness, []string) {
	keys := make([]KeySettings, n)
	names := make([]string, n)
	for i := range keys {
		names[i] = fmt.Sprintf("maven:https://repo%d.example.org/maven2", i)
		keys[i] = keySettings(names[i], 5, 30*time.Second)
	}
	return newHarness(b, true, keys...), names
}

// BenchmarkAllowDone measures the request path of healthy keys, one
// goroutine: Allow and Done(Success) on Closed breakers, cycling over the
// same 64 keys as the parallel benchmark so the two compare.
func BenchmarkAllowDone(b *testing.B) {
	h, names := benchKeys(b, 64)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		tk, err := h.Allow(names[i%len(names)])
		if err != nil {
			b.Fatal(err)
		}
		tk.Done(Success)
		i++
	}
}

// BenchmarkAllowDoneParallel runs the same path from every core over 64
// keys: with one lock per key and a lock-free healthy path, throughput
// should scale with cores.
func BenchmarkAllowDoneParallel(b *testing.B) {
	h, names := benchKeys(b, 64)
	var offset atomic.Uint32
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		// Each goroutine starts on its own stretch of keys.
		i := int(offset.Add(17))
		for pb.Next() {
			tk, err := h.Allow(names[i%len(names)])
			if err != nil {
				b.Error(err)
				return
			}
			tk.Done(Success)
			i++
		}
	})
}

// BenchmarkAllowDoneParallelOneKey puts all traffic on one key, as when
// every build pulls from the same registry.
func BenchmarkAllowDoneParallelOneKey(b *testing.B) {
	h, names := benchKeys(b, 1)
	b.ReportAllocs()
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			tk, err := h.Allow(names[0])
			if err != nil {
				b.Error(err)
				return
			}
			tk.Done(Success)
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
