package sharedstate

import (
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// counts is every node's failure count of the fleet key.
func counts(nodes []*node) []int {
	out := make([]int, len(nodes))
	for i, n := range nodes {
		out[i] = n.set.Snapshot()[0].FailureCount
	}
	return out
}

func allEqual(got []int, want int) bool {
	for _, v := range got {
		if v != want {
			return false
		}
	}
	return true
}

// Failures count across the fleet (issue 25, point 3): with the load spread
// evenly, one failure per process opens every process once the fleet has
// seen failure_threshold of them, and the dead upstream sees exactly that
// many requests. Alone, each process would need threshold failures of its
// own (TestFleetWithoutSharedStateLearnsThreeTimes).
func TestFleetCountsFailuresTogether(t *testing.T) {
	r := startRedis(t)
	u := newUpstream(t)
	nodes := fleet(t, threshold, u, r.url())
	waitUp(t, nodes, true)
	for i, n := range nodes {
		if res := n.request(); !res.admitted {
			t.Fatalf("%s refused request %d before the fleet reached its threshold", n.name, i+1)
		}
		if i+1 < threshold {
			eventually(t, 2*time.Second, "every node counts the fleet's failures", func() bool {
				return allEqual(counts(nodes), i+1)
			})
		}
	}
	eventually(t, 2*time.Second, "every node opens at the fleet's threshold", func() bool {
		for _, n := range nodes {
			if n.state() != breakerstate.Open {
				return false
			}
		}
		return true
	})
	for _, n := range nodes {
		if n.request().admitted {
			t.Fatalf("%s admitted a request after the fleet opened", n.name)
		}
	}
	if got := u.count(); got != threshold {
		t.Fatalf("%d requests reached the dead upstream, want the fleet's threshold %d", got, threshold)
	}
}

// The first success after failures resets the count everywhere, so only
// consecutive failures of the fleet open it; successes on a clean breaker
// send nothing.
func TestFleetRecoveryResetsCounts(t *testing.T) {
	r := startRedis(t)
	u := newUpstream(t)
	nodes := fleet(t, 3, u, r.url())
	waitUp(t, nodes, true)
	for range threshold - 1 {
		nodes[0].request()
	}
	eventually(t, 2*time.Second, "the failures reach every node", func() bool {
		return allEqual(counts(nodes), threshold-1)
	})
	u.healthy.Store(true)
	if res := nodes[1].request(); res.status != 200 {
		t.Fatalf("healthy request: %+v", res)
	}
	eventually(t, 2*time.Second, "the recovery resets every node", func() bool { return allEqual(counts(nodes), 0) })
	u.healthy.Store(false)
	for range threshold - 1 {
		nodes[2].request()
	}
	eventually(t, 2*time.Second, "the new failures reach every node", func() bool {
		return allEqual(counts(nodes), threshold-1)
	})
	for _, n := range nodes {
		if n.state() != breakerstate.Closed {
			t.Fatalf("%s opened on failures that were not consecutive", n.name)
		}
	}
}

// The fleet carries the growth of the open time (issue 25, point 4): the
// probe fails wherever it goes, and every process's open period and count
// of failed probes follow it.
func TestFleetCarriesTheGrowingOpenTime(t *testing.T) {
	r := startRedis(t)
	u := newUpstream(t)
	ks := breakerstate.KeySettings{Key: fleetKey, Format: "docker", FailureThreshold: threshold,
		ResetTimeout: resetAfter, ResetTimeoutMax: 4 * resetAfter}
	var nodes []*node
	for _, name := range []string{"pod-0", "pod-1", "pod-2"} {
		nodes = append(nodes, newNodeWith(t, name, u, r.url(), ks))
	}
	waitUp(t, nodes, true)
	learn(t, nodes, u, true)
	stop := make(chan struct{})
	wait := hammer(nodes, stop)
	eventually(t, 10*time.Second, "two probes fail", func() bool { return u.count() >= threshold+2 })
	close(stop)
	wait()
	eventually(t, 2*time.Second, "every node knows of both failed probes", func() bool {
		for _, n := range nodes {
			if s := n.set.Snapshot()[0]; s.FailedProbes < 2 {
				return false
			}
		}
		return true
	})
	hits := u.all()[threshold-1:]
	for i := 1; i < len(hits); i++ {
		gap := hits[i].at.Sub(hits[i-1].at)
		want := min(resetAfter<<(i-1), 4*resetAfter)
		t.Logf("hit %d (%s) came %v after the previous one (open time %v)", threshold-1+i, hits[i].node,
			gap.Round(time.Millisecond), want)
		if gap < want-20*time.Millisecond {
			t.Errorf("a probe came %v after the previous failure, before its open time %v was over", gap, want)
		}
	}
	for _, n := range nodes {
		s := n.set.Snapshot()[0]
		if s.State == breakerstate.Closed || s.OpenTime < 4*resetAfter-20*time.Millisecond {
			t.Errorf("%s: %+v, want open for 4 x reset_timeout after two failed probes", n.name, s)
		}
	}
}
