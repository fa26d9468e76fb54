package sharedstate

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// waitUp waits until every node shares state with the fleet.
func waitUp(t *testing.T, nodes []*node, up bool) {
	t.Helper()
	eventually(t, 5*time.Second, "shared state status settles", func() bool {
		for _, n := range nodes {
			if n.client.Up() != up {
				return false
			}
		}
		return true
	})
	want := 0.0
	if up {
		want = 1
	}
	for _, n := range nodes {
		if g := testutil.ToFloat64(n.client.gauge); g != want {
			t.Fatalf("%s: nora_sidecar_shared_state_up = %v, want %v", n.name, g, want)
		}
	}
}

// probesOnePerPeriod checks the upstream hits in [from, to) are probes of
// one fleet-wide election each: consecutive hits one reset_timeout apart,
// never two in one period, never a period skipped.
func probesOnePerPeriod(t *testing.T, hits []hit, from, to time.Time) []hit {
	t.Helper()
	var in []hit
	for _, h := range hits {
		if !h.at.Before(from) && h.at.Before(to) {
			in = append(in, h)
		}
	}
	if len(in) < 3 {
		t.Fatalf("%d probes in %v, want one per reset_timeout (%v)", len(in), to.Sub(from), resetAfter)
	}
	for i := 1; i < len(in); i++ {
		gap := in[i].at.Sub(in[i-1].at)
		if gap < resetAfter-20*time.Millisecond || gap > resetAfter+200*time.Millisecond {
			t.Fatalf("probe %d (%s) came %v after probe %d (%s); want about %v",
				i, in[i].node, gap, i-1, in[i-1].node, resetAfter)
		}
	}
	return in
}

// recoverAll makes the upstream healthy and checks that every node closes
// within one second of the fleet's successful probe.
func recoverAll(t *testing.T, nodes []*node, u *upstream) {
	t.Helper()
	stop := make(chan struct{})
	wait := hammer(nodes, stop)
	defer func() { close(stop); wait() }()
	healed := time.Now()
	u.healthy.Store(true)
	closedAt := make([]time.Time, len(nodes))
	eventually(t, 3*resetAfter+2*time.Second, "every node closes", func() bool {
		all := true
		for i, n := range nodes {
			if closedAt[i].IsZero() && n.state() == breakerstate.Closed {
				closedAt[i] = time.Now()
			}
			all = all && !closedAt[i].IsZero()
		}
		return all
	})
	var probe hit
	for _, h := range u.all() {
		if h.ok && h.at.After(healed) {
			probe = h
			break
		}
	}
	for i, at := range closedAt {
		lag := at.Sub(probe.at)
		t.Logf("%s closed %v after %s's successful probe", nodes[i].name, lag.Round(time.Millisecond), probe.node)
		if lag > time.Second {
			t.Errorf("%s closed %v after the probe's success, want < 1s", nodes[i].name, lag)
		}
	}
}

// Without shared state every process learns the outage on its own.
func TestFleetWithoutSharedStateLearnsThreeTimes(t *testing.T) {
	u := newUpstream(t)
	nodes := fleet(t, 3, u, "")
	if got := learn(t, nodes, u, false); got != 3*threshold {
		t.Fatalf("%d requests reached the dead upstream, want 3 x threshold = %d", got, 3*threshold)
	}
}

// The fleet learns an outage once, elects one probe per reset_timeout, and
// recovers everywhere within a second of the probe's success.
func TestFleetLearnsOnceProbesOnceRecoversTogether(t *testing.T) {
	r := startRedis(t)
	u := newUpstream(t)
	nodes := fleet(t, 3, u, r.url())
	waitUp(t, nodes, true)

	if got := learn(t, nodes, u, true); got != threshold {
		t.Fatalf("%d requests reached the dead upstream while learning, want threshold = %d", got, threshold)
	}
	opened := time.Now()
	stop := make(chan struct{})
	wait := hammer(nodes, stop)
	time.Sleep(5 * resetAfter) // traffic runs for five periods: a duration under test, not a wait for a state
	close(stop)
	results := wait()
	hits := u.all()
	if first := len(hits); first < threshold {
		t.Fatalf("only %d hits", first)
	}
	var firstPeriod int
	for _, h := range hits {
		if h.at.Before(opened.Add(resetAfter + resetAfter/2)) {
			firstPeriod++
		}
	}
	if firstPeriod > threshold+1 {
		t.Fatalf("%d requests reached the dead upstream in the first period, want <= threshold + 1 = %d",
			firstPeriod, threshold+1)
	}
	probes := probesOnePerPeriod(t, hits[threshold:], opened, time.Now())
	t.Logf("learning: %d hits; then %d probes over %v by %v", threshold, len(probes), 5*resetAfter, nodesOf(probes))
	for i, rs := range results {
		for _, res := range rs {
			if res.err != nil {
				t.Fatalf("%s: request failed: %v", nodes[i].name, res.err)
			}
		}
	}
	recoverAll(t, nodes, u)
}

// A pod that joins late reads the fleet's state at start.
func TestFleetLateJoinerReadsState(t *testing.T) {
	r := startRedis(t)
	u := newUpstream(t)
	first := fleet(t, 1, u, r.url())
	waitUp(t, first, true)
	learn(t, first, u, false)
	late := newNode(t, "late", u, r.url())
	waitUp(t, []*node{late}, true)
	eventually(t, time.Second, "late joiner opens", func() bool { return late.state() == breakerstate.Open })
	// The record holds the time left on Redis's clock, not a time of the
	// first pod's: the late joiner's probe falls due when the first's does,
	// give or take the round trips between them.
	if got, want := late.openUntil(), first[0].openUntil(); got.Sub(want).Abs() > 50*time.Millisecond {
		t.Fatalf("late joiner open until %v, fleet %v", got, want)
	}
}

// Manual modes from the admin API reach every pod (Redis on TCP here).
func TestFleetForcePropagates(t *testing.T) {
	r := startRedisTCP(t)
	u := newUpstream(t)
	nodes := fleet(t, 3, u, r.url())
	waitUp(t, nodes, true)
	for _, m := range []breakerstate.Mode{breakerstate.ModeOpen, breakerstate.ModeClosed, breakerstate.ModeAuto} {
		if err := nodes[0].set.Force(fleetKey, m); err != nil {
			t.Fatal(err)
		}
		want := map[breakerstate.Mode]string{breakerstate.ModeOpen: "open", breakerstate.ModeClosed: "closed"}[m]
		eventually(t, 2*time.Second, "force "+m.String()+" reaches every pod", func() bool {
			for _, n := range nodes {
				if n.set.Snapshot()[0].Forced != want {
					return false
				}
			}
			return true
		})
	}
}

// Redis killed mid-way: no request fails or slows, each pod works alone,
// and the fleet reconverges when Redis comes back.
func TestFleetSurvivesRedisLoss(t *testing.T) {
	r := startRedis(t)
	u := newUpstream(t)
	u.healthy.Store(true)
	nodes := fleet(t, 3, u, r.url())
	waitUp(t, nodes, true)

	stop := make(chan struct{})
	wait := hammer(nodes, stop)
	r.kill()
	waitUp(t, nodes, false)
	u.healthy.Store(false) // an outage while each pod is alone
	eventually(t, 2*time.Second, "every pod opens alone", func() bool {
		for _, n := range nodes {
			if n.state() == breakerstate.Closed {
				return false
			}
		}
		return true
	})
	alone := time.Now()
	time.Sleep(2 * resetAfter) // traffic for two periods without Redis
	perNode := map[string]int{}
	for _, h := range u.all() {
		if h.at.After(alone) {
			perNode[h.node]++
		}
	}
	for _, n := range nodes {
		if perNode[n.name] == 0 {
			t.Errorf("%s never probed while alone", n.name)
		}
	}
	close(stop)
	var slowest time.Duration
	for i, rs := range wait() {
		for _, res := range rs {
			if res.err != nil {
				t.Fatalf("%s: request failed while Redis was down: %v", nodes[i].name, res.err)
			}
			slowest = max(slowest, res.took)
		}
	}
	t.Logf("slowest request while Redis was lost: %v", slowest)
	if slowest > 50*time.Millisecond {
		t.Fatalf("a request took %v while Redis was down, want < 50ms", slowest)
	}

	r.start()
	waitUp(t, nodes, true)
	eventually(t, 2*time.Second, "open_until converges", func() bool {
		u0 := nodes[0].openUntil()
		for _, n := range nodes[1:] {
			if n.openUntil().Sub(u0).Abs() > 50*time.Millisecond || n.state() == breakerstate.Closed {
				return false
			}
		}
		return true
	})
	from := time.Now()
	stop = make(chan struct{})
	wait = hammer(nodes, stop)
	time.Sleep(4 * resetAfter) // four periods of traffic after reconvergence
	close(stop)
	wait()
	probes := probesOnePerPeriod(t, u.all(), from, time.Now())
	t.Logf("after Redis returned: %d probes over %v by %v", len(probes), 4*resetAfter, nodesOf(probes))
	recoverAll(t, nodes, u)
}

func nodesOf(hs []hit) []string {
	out := make([]string, len(hs))
	for i, h := range hs {
		out[i] = h.node
	}
	return out
}
