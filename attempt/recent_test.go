package attempt

import (
	"testing"
	"time"
)

// TestRecentTail: the figure is the 99th percentile's bucket top (within
// √2 above it), says nothing with fewer than five answers, and forgets
// answers older than two windows.
func TestRecentTail(t *testing.T) {
	born := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	r := &recent{born: born}
	now := born.Add(time.Second)
	for i := range 4 {
		r.observe("k", now, 100*time.Millisecond)
		if _, ok := r.tailOf("k", now.Add(time.Duration(i+1)*recentRefresh)); ok {
			t.Fatalf("a figure after %d answers", i+1)
		}
	}
	// 196 answers at 100 ms and 4 at 3 s: the 99th percentile is 3 s.
	for range 192 {
		r.observe("k", now, 100*time.Millisecond)
	}
	for range 4 {
		r.observe("k", now, 3*time.Second)
	}
	later := now.Add(10 * recentRefresh)
	tail, ok := r.tailOf("k", later)
	if !ok || tail < 3*time.Second || tail > 4243*time.Millisecond {
		t.Fatalf("tail %v %v, want within [3s, 3s·√2]", tail, ok)
	}
	// Two windows on, nothing is remembered.
	if _, ok := r.tailOf("k", now.Add(2*recentWindow+recentRefresh)); ok {
		t.Fatal("a figure from answers two windows old")
	}
	if _, ok := r.tailOf("other", later); ok {
		t.Fatal("a figure for a key that never answered")
	}
}

func TestBucketBounds(t *testing.T) {
	for _, d := range []time.Duration{0, 500 * time.Microsecond, time.Millisecond, 7 * time.Millisecond,
		800 * time.Millisecond, 30 * time.Second, 300 * time.Second} {
		b := bucketOf(d)
		if top := bucketTop(b); top < d || (d >= time.Millisecond && float64(top) > float64(d)*1.4143) {
			t.Errorf("%v: bucket %d tops at %v", d, b, top)
		}
	}
}
