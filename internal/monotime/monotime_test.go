package monotime

import (
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// A test's clock is followed exactly, steps included: the packages that
// take one keep their tests deterministic.
func TestOfFollowsTheClockItIsGiven(t *testing.T) {
	c := testkit.NewClock()
	m := Of(c.Now)
	if got := m(); got != 0 {
		t.Fatalf("first reading %v, want 0", got)
	}
	c.Advance(90 * time.Second)
	if got := m(); got != 90*time.Second {
		t.Fatalf("after 90s: %v", got)
	}
	c.Advance(-time.Hour)
	if got := m(); got != 90*time.Second-time.Hour {
		t.Fatalf("a clock without a monotonic reading is followed as it is: %v", got)
	}
}
