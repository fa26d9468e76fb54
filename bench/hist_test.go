package main

import (
	"testing"
	"time"
)

func TestHistogramQuantiles(t *testing.T) {
	tests := []struct {
		name    string
		samples []time.Duration
		q       float64
		want    time.Duration
	}{
		{"tiny exact", []time.Duration{10, 20, 30}, 0.5, 20},
		{"p50 of 1..1000us", seq(1000, time.Microsecond), 0.5, 500 * time.Microsecond},
		{"p99 of 1..1000us", seq(1000, time.Microsecond), 0.99, 990 * time.Microsecond},
		{"single large", []time.Duration{3 * time.Second}, 0.99, 3 * time.Second},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var h histogram
			for _, s := range tc.samples {
				h.record(s)
			}
			got := h.quantile(tc.q)
			if diff := float64(got-tc.want) / float64(tc.want); diff > 0.035 || diff < -0.035 {
				t.Fatalf("quantile(%v) = %v, want %v ±3.5%%", tc.q, got, tc.want)
			}
		})
	}
}

func TestBucketsAreMonotonic(t *testing.T) {
	prev := -1
	for v := uint64(0); v < 1<<22; v += 7 {
		b := bucketOf(v)
		if b < prev {
			t.Fatalf("bucketOf(%d) = %d < %d", v, b, prev)
		}
		if mid := bucketMid(b); v >= 64 && (mid < v*96/100 || mid > v*104/100) {
			t.Fatalf("bucketMid(bucketOf(%d)) = %d, off by more than 4%%", v, mid)
		}
		prev = b
	}
	if b := bucketOf(^uint64(0)); b >= len(histogram{}.counts) {
		t.Fatalf("largest value lands in bucket %d, past the end", b)
	}
}

func seq(n int, unit time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(i+1) * unit
	}
	return out
}
