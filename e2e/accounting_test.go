//go:build e2e

package e2e

import (
	"fmt"
	"strings"
	"testing"
	"time"
)

// breakerCheck ties a breaker key to what its dead upstream's front counts:
// connections when toxiproxy accepts and swallows them (the front sees the
// connection but no request), requests when the origin behind the front is
// gone (the front sees each request and drops it). When toxiproxy refuses
// connections nothing reaches the front, and the count is nora's own
// attempts (attemptsOf).
type breakerCheck struct {
	n     *nora
	key   string
	reset time.Duration
	seen  func() int64
}

// connsOf counts connections that reached a front.
func connsOf(f *front) func() int64 { return func() int64 { _, c := f.count(); return c } }

// reqsOf counts requests that reached a front.
func reqsOf(f *front) func() int64 { return func() int64 { r, _ := f.count(); return r } }

// attemptsOf counts the attempts nora made at key's upstream, those that
// failed to connect included: what a front cannot see when toxiproxy in
// front of it refuses connections.
func attemptsOf(t *testing.T, n *nora, key string) func() int64 {
	return func() int64 {
		return int64(n.metric(t, "nora_upstream_request_duration_seconds_count", fmt.Sprintf("registry=%q", key)))
	}
}

// triedAtMost fails when nora attempted key more often since before than
// its breaker allows: threshold failures, then one probe per reset_timeout
// elapsed since start.
func triedAtMost(t *testing.T, key string, got int64, threshold int, reset time.Duration, start time.Time) {
	t.Helper()
	if allowed := int64(threshold) + int64(time.Since(start)/reset); got > allowed {
		t.Errorf("nora tried %s %d times in %v while it refused connections; its breaker allows %d",
			key, got, time.Since(start).Round(time.Millisecond), allowed)
	}
}

// openUntil runs action (a client run that must succeed or fail on its own
// terms) until the key's breaker reports open, at most tries times, and
// returns each run's wall time.
func (b breakerCheck) openUntil(t *testing.T, tries int, action func() clientRun) []time.Duration {
	t.Helper()
	var walls []time.Duration
	for b.n.state(t, b.key) != 1 {
		if len(walls) == tries {
			t.Fatalf("breaker %s not open after %d client runs", b.key, tries)
		}
		walls = append(walls, action().wall)
	}
	return walls
}

// quietWhileOpen runs action with the breaker open and fails when the dead
// upstream saw more than one probe per reset_timeout elapsed meanwhile.
// It returns what the upstream saw during the window.
func (b breakerCheck) quietWhileOpen(t *testing.T, action func()) int64 {
	t.Helper()
	if b.n.state(t, b.key) != 1 {
		t.Fatalf("breaker %s is not open", b.key)
	}
	before, openedAt := b.seen(), time.Now()
	rej := b.n.metric(t, "nora_circuit_breaker_rejections_total", fmt.Sprintf("registry=%q", b.key))
	action()
	got := b.seen() - before
	if allowed := int64(time.Since(openedAt) / b.reset); got > allowed {
		t.Fatalf("open breaker %s let %d through to the dead upstream in %v (one probe per %v allowed)",
			b.key, got, time.Since(openedAt), b.reset)
	}
	if b.n.metric(t, "nora_circuit_breaker_rejections_total", fmt.Sprintf("registry=%q", b.key)) <= rej {
		t.Fatalf("no rejection counted for %s while open", b.key)
	}
	return got
}

// oneProbe waits until a probe is due, runs action, and checks that the
// breaker ended in want: 1 (still down: exactly one attempt reached the
// upstream) or 0 (back: the probe closed it and the run went on there).
func (b breakerCheck) oneProbe(t *testing.T, want float64, action func()) {
	t.Helper()
	b.n.waitProbeDue(t, b.key, b.reset)
	before := b.seen()
	toClosed := b.n.transitions(t, b.key, "half_open", "closed")
	action()
	got := b.seen() - before
	if (want == 1 && got != 1) || got == 0 {
		t.Fatalf("probe of %s: upstream saw %d attempts, want exactly 1 while down, some once back", b.key, got)
	}
	if s := b.n.state(t, b.key); s != want {
		t.Fatalf("after the probe breaker %s is in state %v, want %v", b.key, s, want)
	}
	if want == 0 && b.n.transitions(t, b.key, "half_open", "closed") != toClosed+1 {
		t.Fatalf("breaker %s closed without a half_open→closed transition", b.key)
	}
}

// frontMark is a front's counters at one moment, so a case that shares
// its fronts with others reports only what it added.
type frontMark struct {
	f           *front
	reqs, conns int64
}

// markFront takes a front's counters now.
func markFront(f *front) frontMark {
	r, c := f.count()
	return frontMark{f: f, reqs: r, conns: c}
}

// seen is what reached the front since the mark, as "name=Nreq/Mconn".
func (m frontMark) seen() string {
	r, c := m.f.count()
	return fmt.Sprintf("%s=%dreq/%dconn", m.f.name, r-m.reqs, c-m.conns)
}

// seenSince joins the marks' seen.
func seenSince(marks ...frontMark) string {
	parts := make([]string, len(marks))
	for i, m := range marks {
		parts[i] = m.seen()
	}
	return strings.Join(parts, " ")
}
