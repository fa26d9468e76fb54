package route

import (
	"net/url"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/monotime"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// learnedOn builds a set timed the way production's is: wall is the wall
// clock (which an NTP step or an operator moves), mono the time that really
// passes (which never runs backwards). In production both are time.Now; a
// test needs two clocks because a time.Time cannot be made with a
// monotonic reading that disagrees with its wall reading.
func learnedOn(_, mono *testkit.Clock) *Learned { return newLearned(monotime.Of(mono.Now)) }

// A learned host expires learnedTTL after its last redirect in time that
// really passes: a wall clock stepped back an hour must not keep it an hour
// longer (issue 21, point 5).
func TestLearnedIgnoresWallClockSteps(t *testing.T) {
	wall, mono := testkit.NewClock(), testkit.NewClock()
	pass := func(d time.Duration) { wall.Advance(d); mono.Advance(d) }
	l := learnedOn(wall, mono)
	u, _ := url.Parse("https://blobs.example.test/x")
	if !l.Learn("docker:https://r.test", u) {
		t.Fatal("not learned")
	}
	wall.Advance(-time.Hour)
	pass(learnedTTL - time.Second)
	if _, ok := l.Lookup("blobs.example.test", "443"); !ok {
		t.Fatal("expired early")
	}
	pass(time.Second)
	if _, ok := l.Lookup("blobs.example.test", "443"); ok {
		t.Fatalf("still learned %v after its last redirect", learnedTTL)
	}
	if got := l.Current(); len(got) != 0 {
		t.Fatalf("Current lists %d expired hosts", len(got))
	}
}
