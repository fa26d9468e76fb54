package main

import (
	"math/bits"
	"time"
)

// histogram is a log-linear latency histogram: exact below 64 ns, then 32
// buckets per power of two (about 3 % resolution), so every worker can keep
// its own without allocation and they merge by addition.
type histogram struct {
	counts [1920]uint64
	n      uint64
}

func bucketOf(v uint64) int {
	if v < 64 {
		return int(v)
	}
	k := bits.Len64(v) - 1 // v in [2^k, 2^(k+1)), k >= 6
	shift := k - 5
	return (k-5)*32 + int(v>>shift)
}

// bucketMid is the middle of bucket i, in nanoseconds.
func bucketMid(i int) uint64 {
	if i < 64 {
		return uint64(i)
	}
	k := i/32 + 4
	m := uint64(i%32 + 32)
	shift := k - 5
	return m<<shift + (uint64(1)<<shift)/2
}

func (h *histogram) record(d time.Duration) {
	if d < 0 {
		d = 0
	}
	h.counts[bucketOf(uint64(d))]++
	h.n++
}

func (h *histogram) merge(o *histogram) {
	for i, c := range o.counts {
		h.counts[i] += c
	}
	h.n += o.n
}

// quantile returns the latency below which a fraction q of samples lie.
func (h *histogram) quantile(q float64) time.Duration {
	if h.n == 0 {
		return 0
	}
	rank := uint64(q*float64(h.n-1)) + 1
	var seen uint64
	for i, c := range h.counts {
		seen += c
		if seen >= rank {
			return time.Duration(bucketMid(i))
		}
	}
	return 0
}
