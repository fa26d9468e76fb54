package breakerstate

import (
	"errors"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// recorder collects transitions announced by the set.
type recorder struct {
	mu  sync.Mutex
	trs []Transition
}

func (r *recorder) record(tr Transition) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.trs = append(r.trs, tr)
}

func (r *recorder) all() []Transition {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]Transition(nil), r.trs...)
}

// harness bundles a Set with its clock, registry and transition log.
type harness struct {
	*Set
	clock *testkit.Clock
	reg   *prometheus.Registry
	rec   *recorder
}

const testKey = "pypi:https://pypi.org/simple"

// keySettings is a key with the given threshold and reset timeout.
func keySettings(key string, threshold int, reset time.Duration) KeySettings {
	return KeySettings{
		Key: key, Format: "pypi", FailureThreshold: threshold, ResetTimeout: reset,
		ThresholdSource: "global", ResetTimeoutSource: "global",
	}
}

// growing is keySettings with an open time that doubles up to max, without
// jitter.
func growing(key string, threshold int, reset, max time.Duration) KeySettings {
	k := keySettings(key, threshold, reset)
	k.ResetTimeoutMax = max
	return k
}

// newHarness builds an enabled set over keys; with no keys, one key
// (testKey) with threshold 3 and reset timeout 30s.
func newHarness(t testing.TB, enabled bool, keys ...KeySettings) *harness {
	t.Helper()
	if len(keys) == 0 {
		keys = []KeySettings{keySettings(testKey, 3, 30*time.Second)}
	}
	h := &harness{clock: testkit.NewClockAt(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)), reg: prometheus.NewRegistry(), rec: &recorder{}}
	s, err := New(Options{
		Enabled: enabled, Keys: keys, Now: h.clock.Now,
		Registerer: h.reg, OnTransition: h.rec.record,
	})
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	h.Set = s
	return h
}

// admit calls Allow and fails the test unless the request is admitted.
func (h *harness) admit(t testing.TB, key string) Ticket {
	t.Helper()
	tk, err := h.Allow(key)
	if err != nil {
		t.Fatalf("Allow(%q): %v, want admitted", key, err)
	}
	return tk
}

// rejected fails the test unless Allow rejects with ErrOpen.
func (h *harness) rejected(t testing.TB, key string) {
	t.Helper()
	if _, err := h.Allow(key); !errors.Is(err, ErrOpen) {
		t.Fatalf("Allow(%q) err = %v, want ErrOpen", key, err)
	}
}

// fail reports n failures of requests admitted while closed.
func (h *harness) fail(t testing.TB, key string, n int) {
	t.Helper()
	for range n {
		h.admit(t, key).Done(Failure)
	}
}

// snap returns key's snapshot.
func (h *harness) snap(t testing.TB, key string) Snapshot {
	t.Helper()
	for _, s := range h.Snapshot() {
		if s.Key == key {
			return s
		}
	}
	t.Fatalf("no snapshot for %q", key)
	return Snapshot{}
}

// openBreaker drives key to Open with exactly threshold failures.
func (h *harness) openBreaker(t testing.TB, key string) {
	t.Helper()
	h.fail(t, key, h.snap(t, key).Threshold)
	if st := h.snap(t, key).State; st != Open {
		t.Fatalf("state after threshold failures = %v, want open", st)
	}
}

// probe drives an open key to HalfOpen and returns the probe ticket.
func (h *harness) probe(t testing.TB, key string) Ticket {
	t.Helper()
	h.openBreaker(t, key)
	h.clock.Advance(h.snap(t, key).ResetTimeout)
	tk := h.admit(t, key)
	if !tk.Probe() {
		t.Fatal("first request after reset_timeout is not the probe")
	}
	return tk
}
