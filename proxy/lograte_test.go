package proxy

import (
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

func TestLineLimiter(t *testing.T) {
	clock := testkit.NewClock()
	l := newLineLimiter(clock.Now, time.Second, 3)
	var got []bool
	var reported []int64
	step := func(n int) {
		for i := 0; i < n; i++ {
			ok, s := l.allow()
			got = append(got, ok)
			if ok {
				reported = append(reported, s)
			}
		}
	}
	step(5) // 3 through, 2 left out
	clock.Advance(999 * time.Millisecond)
	step(1) // same interval: left out
	clock.Advance(time.Millisecond)
	step(2) // a new interval: through, the first reports the 3 left out
	if want := []bool{true, true, true, false, false, false, true, true}; !slices.Equal(got, want) {
		t.Fatalf("allow sequence %v, want %v", got, want)
	}
	if wantR := []int64{0, 0, 0, 3, 0}; !slices.Equal(reported, wantR) {
		t.Fatalf("suppressed counts %v, want %v", reported, wantR)
	}
}

func TestLineLimiterConcurrent(t *testing.T) {
	l := newLineLimiter(testkit.NewClock().Now, time.Hour, 10)
	var wg sync.WaitGroup
	var mu sync.Mutex
	through := 0
	for i := 0; i < 8; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < 1000; j++ {
				if ok, _ := l.allow(); ok {
					mu.Lock()
					through++
					mu.Unlock()
				}
			}
		}()
	}
	wg.Wait()
	if through != 10 {
		t.Fatalf("%d lines through, want the burst of 10", through)
	}
}
