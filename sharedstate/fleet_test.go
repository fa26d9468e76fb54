package sharedstate

import (
	"slices"
	"syscall"
	"testing"
	"time"
)

// These tests run the built nora-breaker binary: three processes in front
// of one dead upstream, with a real redis-server between them (issue 9's
// "done when"). Everything listens on 127.0.0.1; every process is stopped
// by its PID.

// Without shared state every process learns the outage on its own: the
// dead upstream sees failure_threshold requests per process.
func TestProcessFleetWithoutSharedStateLearnsThreeTimes(t *testing.T) {
	bin := buildBinary(t)
	u := newDeadUpstream(t)
	fleet := startProcFleet(t, bin, 3, u, "")
	for i, p := range fleet {
		if got := openAlone(t, p, i); got != procThreshold {
			t.Errorf("%s admitted %d requests before rejecting, want %d", p.name, got, procThreshold)
		}
		if s := p.shared(t); s != "off" {
			t.Errorf("%s: /health shared_state = %q, want off", p.name, s)
		}
	}
	if got := u.count(); got != 3*procThreshold {
		t.Fatalf("%d requests reached the dead upstream, want 3 x threshold = %d", got, 3*procThreshold)
	}
	t.Logf("without shared state: %d requests reached the dead upstream (3 x threshold)", u.count())
}

// With shared state the fleet learns the outage once, probes it once per
// reset_timeout, and every process recovers within a second of the probe's
// success. Redis is on TCP here (redis://), on a unix socket elsewhere.
func TestProcessFleetLearnsOnceProbesOnceRecoversTogether(t *testing.T) {
	r := startRedisTCP(t)
	bin := buildBinary(t)
	u := newDeadUpstream(t)
	fleet := startProcFleet(t, bin, 3, u, r.url())
	waitAll(t, fleet, 10*time.Second, "every process shares state",
		func(p *proxyProc) bool { return p.shared(t) == "up" })

	// One process meets the outage first; the others must hear of it.
	if got := openAlone(t, fleet[0], 0); got != procThreshold {
		t.Fatalf("%s admitted %d requests before rejecting, want %d", fleet[0].name, got, procThreshold)
	}
	lastFailure := u.all()[procThreshold-1].at
	waitAll(t, fleet[1:], 2*time.Second, "the open reaches the other processes",
		func(p *proxyProc) bool { return p.state(t) == "open" })
	t.Logf("open seen by every process %v after the last failure", time.Since(lastFailure).Round(time.Millisecond))
	// Until the open period (reset_timeout, jittered) has passed since the
	// last failure nothing may reach the upstream; a request sent later is rightly a probe, which a
	// busy machine can get to before the ten are through. Each process must
	// answer at least one request before then, or nothing was checked.
	due := lastFailure.Add(procShortest - 50*time.Millisecond)
	for i, p := range fleet[1:] {
		checked := 0
		for range 10 {
			a := p.get(i + 1)
			if a.at.After(due) {
				break
			}
			if a.err != nil || !a.rejected {
				t.Fatalf("%s: status %d, err %v; want the proxy's own 503", p.name, a.status, a.err)
			}
			checked++
		}
		if checked == 0 {
			t.Fatalf("%s: no request sent within reset_timeout (%v) of the last failure (now %v after it): "+
				"nothing checked that it obeys the open it heard of", p.name, procReset,
				time.Since(lastFailure).Round(time.Millisecond))
		}
	}
	if got := u.count(); got > procThreshold+1 {
		t.Fatalf("%d requests reached the dead upstream, want <= threshold + 1 = %d (3 x threshold alone)",
			got, procThreshold+1)
	}
	t.Logf("with shared state: %d requests reached the dead upstream while the fleet learned", u.count())

	// Traffic through all three until the fleet has probed three times:
	// one probe per reset_timeout for the whole fleet. How long that takes
	// depends on how busy the machine is, so the test waits for the probes
	// (generously) and then checks when each one came.
	t.Logf("traffic through the fleet starts %v after the last failure", time.Since(lastFailure).Round(time.Millisecond))
	tr := spread(fleet)
	eventually(t, 3*procReset+15*time.Second, "three probes through the fleet",
		func() bool { return u.count() >= procThreshold+3 })
	for _, a := range tr.end() {
		if a.err != nil || a.status != 503 {
			t.Fatalf("proc-%d: status %d, err %v during the outage", a.proc, a.status, a.err)
		}
	}
	probes := u.all()[procThreshold:]
	checkOneProbePerPeriod(t, lastFailure, probes, time.Since(lastFailure))

	recoverTogether(t, fleet, u)
}

// checkOneProbePerPeriod: after the last learning failure, each upstream
// hit comes one open period after the previous one: never two in one
// period (no gap shorter than the shortest jittered period), never a period
// skipped (no gap of two of the longest). How late within its period a probe comes depends on the machine
// (the probe lease is a Redis command with a 500 ms timeout): with both CPUs
// saturated a first probe came 1.5 s after the failure, which the upper
// bound this test once had (reset_timeout + 400 ms) took for a fault.
func checkOneProbePerPeriod(t *testing.T, last time.Time, probes []hit, window time.Duration) {
	t.Helper()
	nodes := make([]string, len(probes))
	gaps := make([]time.Duration, len(probes))
	for i, h := range probes {
		nodes[i] = h.node
		gaps[i] = h.at.Sub(last).Round(time.Millisecond)
		last = h.at
	}
	t.Logf("%d probes in the %v since the last learning failure, sent by %v, each after the previous failure by %v",
		len(probes), window.Round(time.Millisecond), nodes, gaps)
	// The caller waited for three probes, so there are at least three.
	if len(probes) > int(window/procShortest)+1 {
		t.Fatalf("%d probes reached the dead upstream in %v, want one per reset_timeout (%v)",
			len(probes), window, procReset)
	}
	for i, gap := range gaps {
		if gap < procShortest-50*time.Millisecond || gap >= 2*procLongest {
			t.Fatalf("probe %d (through %s) came %v after the previous failure, want one per %v",
				i, nodes[i], gap, procReset)
		}
	}
}

// recoverTogether makes the upstream healthy under traffic through every
// process and checks that each reports closed within one second of the
// probe's success.
func recoverTogether(t *testing.T, fleet []*proxyProc, u *deadUpstream) {
	t.Helper()
	before := u.count()
	tr := spread(fleet)
	u.healthy.Store(true)
	closedAt := make([]time.Time, len(fleet))
	eventually(t, 3*procReset+2*time.Second, "every process reports closed", func() bool {
		for i, p := range fleet {
			if closedAt[i].IsZero() && p.state(t) == "closed" {
				closedAt[i] = time.Now()
			}
		}
		return !slices.ContainsFunc(closedAt, time.Time.IsZero)
	})
	for _, a := range tr.end() {
		if a.err != nil {
			t.Fatalf("proc-%d: %v during recovery", a.proc, a.err)
		}
	}
	i := slices.IndexFunc(u.all()[before:], func(h hit) bool { return h.ok })
	if i < 0 {
		t.Fatal("no successful probe reached the upstream")
	}
	probe := u.all()[before+i]
	for i, at := range closedAt {
		lag := at.Sub(probe.at)
		t.Logf("%s reported closed %v after the successful probe through %s", fleet[i].name,
			lag.Round(time.Millisecond), probe.node)
		if lag > time.Second {
			t.Errorf("%s reported closed %v after the probe's success, want < 1s", fleet[i].name, lag)
		}
	}
}

// maxRedisLatency bounds every request while Redis hangs, dies and comes
// back. A request that waited on Redis would take at least the 500ms
// command timeout; a healthy proxied request takes a few milliseconds.
const maxRedisLatency = 250 * time.Millisecond

// Redis frozen, then killed mid-way: no request fails or slows, /health
// says shared_state "down"; Redis restarted on the same socket: the fleet
// shares state again (a new open on one process reaches the others).
func TestProcessFleetSurvivesRedisLoss(t *testing.T) {
	r := startRedis(t)
	bin := buildBinary(t)
	u := newDeadUpstream(t)
	u.healthy.Store(true)
	fleet := startProcFleet(t, bin, 3, u, r.url())
	waitAll(t, fleet, 10*time.Second, "every process shares state",
		func(p *proxyProc) bool { return p.shared(t) == "up" })

	tr := spread(fleet)
	enough := func(n int64) func() bool {
		mark := tr.sent.Load()
		return func() bool { return tr.sent.Load() >= mark+n }
	}
	eventually(t, 10*time.Second, "traffic before Redis fails", enough(150))
	frozen := time.Now()
	if err := r.cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	waitAll(t, fleet, 5*time.Second, "shared_state down while Redis hangs",
		func(p *proxyProc) bool { return p.shared(t) == "down" })
	eventually(t, 10*time.Second, "traffic while Redis hangs", enough(150))
	killed := time.Now()
	r.kill()
	eventually(t, 10*time.Second, "traffic while Redis is dead", enough(150))
	waitAll(t, fleet, time.Second, "shared_state still down", func(p *proxyProc) bool { return p.shared(t) == "down" })
	restarted := time.Now()
	r.start()
	waitAll(t, fleet, 10*time.Second, "shared_state up after the restart",
		func(p *proxyProc) bool { return p.shared(t) == "up" })
	checkUnaffected(t, tr.end(), []phase{{"Redis up", time.Time{}}, {"Redis hung", frozen},
		{"Redis dead", killed}, {"Redis restarted", restarted}})

	// The fleet shares again: an outage learned by one process reaches the
	// others, which reject without asking the upstream.
	u.healthy.Store(false)
	before := u.count()
	if got := openAlone(t, fleet[1], 1); got != procThreshold {
		t.Fatalf("%s admitted %d requests before rejecting, want %d", fleet[1].name, got, procThreshold)
	}
	others := []*proxyProc{fleet[0], fleet[2]}
	waitAll(t, others, 2*time.Second, "the open reaches the other processes after the restart",
		func(p *proxyProc) bool { return p.state(t) == "open" })
	for _, i := range []int{0, 2} {
		if a := fleet[i].get(i); a.err != nil || !a.rejected {
			t.Fatalf("%s: status %d, err %v; want the proxy's own 503", fleet[i].name, a.status, a.err)
		}
	}
	if got := u.count() - before; got != procThreshold {
		t.Fatalf("%d requests reached the dead upstream after the restart, want threshold = %d", got, procThreshold)
	}
}

// phase is a stretch of the Redis-loss test, from its start time.
type phase struct {
	name string
	from time.Time
}

// checkUnaffected fails on any request that failed or took longer than
// maxRedisLatency, and logs the slowest request of each phase.
func checkUnaffected(t *testing.T, answers []answer, phases []phase) {
	t.Helper()
	slowest := make([]time.Duration, len(phases))
	count := make([]int, len(phases))
	for _, a := range answers {
		if a.err != nil || a.status != 200 {
			t.Errorf("proc-%d at %v: status %d, err %v", a.proc, a.at.Format("15:04:05.000"), a.status, a.err)
			continue
		}
		ph := 0
		for i, p := range phases {
			if !a.at.Before(p.from) {
				ph = i
			}
		}
		count[ph]++
		slowest[ph] = max(slowest[ph], a.took)
		if a.took > maxRedisLatency {
			t.Errorf("proc-%d (%s): a request took %v, want < %v", a.proc, phases[ph].name, a.took, maxRedisLatency)
		}
	}
	for i, p := range phases {
		t.Logf("%s: %d requests, all 200, slowest %v", p.name, count[i], slowest[i].Round(time.Microsecond))
	}
}
