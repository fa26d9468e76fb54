package testkit

import (
	"testing"
	"time"
)

// PollUntil fails t unless cond becomes true within d. It is for waiting on
// a state the code has no event for (a closed connection noticed, a
// background commit done); it never stands in for one.
func PollUntil(t testing.TB, d time.Duration, cond func() bool) {
	t.Helper()
	if !Poll(d, cond) {
		t.Fatalf("condition not reached within %v", d)
	}
}

// Poll reports whether cond became true within d.
func Poll(d time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(5 * time.Millisecond)
	}
	return true
}
