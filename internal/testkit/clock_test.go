package testkit

import (
	"sync"
	"testing"
	"time"
)

func TestAdvanceIsConcurrencySafe(t *testing.T) {
	start := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	c := NewClock(start)
	var wg sync.WaitGroup
	for i := 0; i < 100; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c.Advance(time.Second)
			_ = c.Now()
		}()
	}
	wg.Wait()
	if got := c.Now().Sub(start); got != 100*time.Second {
		t.Fatalf("advanced %v, want 100s", got)
	}
}
