package throttle

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nora-breaker/nora-breaker/internal/monotime"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// tableOn builds a table timed the way production's is: wall is the wall
// clock (which an NTP step or an operator moves), mono the time that really
// passes (which never runs backwards). In production both are time.Now; a
// test needs two clocks because a time.Time cannot be made with a
// monotonic reading that disagrees with its wall reading.
func tableOn(t *testing.T, wall, mono *testkit.Clock) *Table {
	t.Helper()
	tab, err := newTable(wall.Now, monotime.Of(mono.Now), []string{"a"}, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return tab
}

// A throttle lasts as long as the 429 asked for, in time that really
// passes: stepping the wall clock back an hour must not keep the host
// throttled an hour longer (issue 21, point 5).
func TestThrottleIgnoresWallClockSteps(t *testing.T) {
	wall := testkit.NewClockAt(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	mono := testkit.NewClock()
	pass := func(d time.Duration) { wall.Advance(d); mono.Advance(d) }
	tab := tableOn(t, wall, mono)
	tab.Mark("a", wall.Now().Add(30*time.Second))
	wall.Advance(-time.Hour)
	if left := tab.Left("a"); left != 30*time.Second {
		t.Fatalf("left %v after the wall clock stepped back an hour, want 30s", left)
	}
	pass(20 * time.Second)
	// A mark made after the step is computed from the stepped clock and
	// read against it when made, so it means what it says; it does not
	// shorten the earlier one.
	tab.Mark("a", wall.Now().Add(5*time.Second))
	if left := tab.Left("a"); left != 10*time.Second {
		t.Fatalf("left %v after 20s, want 10s", left)
	}
	pass(10 * time.Second)
	if left := tab.Left("a"); left != 0 {
		t.Fatalf("still throttled for %v when the 30s are over", left)
	}
}
