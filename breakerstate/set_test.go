package breakerstate

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

func TestNewValidates(t *testing.T) {
	ok := keySettings("a", 1, 0)
	tests := []struct {
		name string
		opts Options
		want string
	}{
		{"no registerer", Options{Keys: []KeySettings{ok}}, "Registerer is required"},
		{"empty key", Options{Keys: []KeySettings{keySettings("", 1, 0)}, Registerer: prometheus.NewRegistry()}, "empty key"},
		{"duplicate", Options{Keys: []KeySettings{ok, ok}, Registerer: prometheus.NewRegistry()}, "listed twice"},
		{"threshold", Options{Keys: []KeySettings{keySettings("a", 0, 0)}, Registerer: prometheus.NewRegistry()}, "failure_threshold 0 < 1"},
		{"reset", Options{Keys: []KeySettings{keySettings("a", 1, -time.Second)}, Registerer: prometheus.NewRegistry()}, "reset_timeout -1s < 0"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := New(tt.opts)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("New error = %v, want it to contain %q", err, tt.want)
			}
		})
	}
}

func TestNewRefusesSecondSetOnSameRegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	opts := Options{Enabled: true, Keys: []KeySettings{keySettings("a", 1, 0)}, Registerer: reg}
	if _, err := New(opts); err != nil {
		t.Fatalf("first New: %v", err)
	}
	var are prometheus.AlreadyRegisteredError
	if _, err := New(opts); !errors.As(err, &are) {
		t.Fatalf("second New = %v, want AlreadyRegisteredError", err)
	}
}

func TestNilClockMeansTimeNow(t *testing.T) {
	s, err := New(Options{Enabled: true, Keys: []KeySettings{keySettings("a", 1, time.Hour)}, Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	before := time.Now()
	tk, _ := s.Allow("a")
	tk.Done(Failure)
	if lf := s.Snapshot()[0].LastFailure; lf.Before(before) {
		t.Fatalf("LastFailure %v is before the call (%v): clock not time.Now", lf, before)
	}
}

func TestAllowUnknownKey(t *testing.T) {
	for _, enabled := range []bool{true, false} {
		h := newHarness(t, enabled)
		tk, err := h.Allow("npm:https://registry.npmjs.org")
		if !errors.Is(err, ErrUnknownKey) || tk != (Ticket{}) {
			t.Fatalf("enabled=%v: Allow(unknown) = %+v, %v; want zero ticket, ErrUnknownKey", enabled, tk, err)
		}
	}
}

// Disabled: Allow never rejects and never changes state; snapshots say closed.
func TestDisabledNeverRejects(t *testing.T) {
	h := newHarness(t, false)
	if h.Enabled() {
		t.Fatal("Enabled() = true")
	}
	for range 50 {
		tk := h.admit(t, testKey)
		if tk.Probe() {
			t.Fatal("probe while disabled")
		}
		tk.Done(Failure)
		h.clock.Advance(time.Second)
	}
	s := h.snap(t, testKey)
	want := Snapshot{Key: testKey, Format: "pypi", State: Closed, Threshold: 3, ResetTimeout: 30 * time.Second,
		ThresholdSource: "global", ResetTimeoutSource: "global", OpenTime: 30 * time.Second,
		ResetTimeoutMax: 30 * time.Second}
	if s != want {
		t.Fatalf("snapshot = %+v, want %+v", s, want)
	}
	if st, d, ok := h.RetryAfter(testKey); st != Closed || d != 0 || !ok {
		t.Fatalf("RetryAfter = %v, %v, %v", st, d, ok)
	}
	if len(h.rec.all()) != 0 {
		t.Fatalf("transitions while disabled: %+v", h.rec.all())
	}
}

// Snapshot lists keys in config order with their settings and sources.
func TestSnapshotConfigOrder(t *testing.T) {
	keys := []KeySettings{
		{Key: "maven:https://b", Format: "maven", FailureThreshold: 2, ResetTimeout: time.Second,
			ThresholdSource: `override "maven"`, ResetTimeoutSource: "global"},
		keySettings("cargo", 5, time.Minute),
		keySettings("maven:https://a", 5, time.Minute),
	}
	h := newHarness(t, true, keys...)
	snaps := h.Snapshot()
	if len(snaps) != len(keys) {
		t.Fatalf("%d snapshots, want %d", len(snaps), len(keys))
	}
	for i, s := range snaps {
		k := keys[i]
		if s.Key != k.Key || s.Format != k.Format || s.Threshold != k.FailureThreshold || s.ResetTimeout != k.ResetTimeout ||
			s.ThresholdSource != k.ThresholdSource || s.ResetTimeoutSource != k.ResetTimeoutSource {
			t.Errorf("snapshot %d = %+v, want settings of %+v", i, s, k)
		}
	}
}

// The transition hook runs outside the breaker's lock: a hook that reads the
// set (as a logger might) must not deadlock.
func TestOnTransitionRunsOutsideLock(t *testing.T) {
	var s *Set
	var seen []State
	var err error
	s, err = New(Options{
		Enabled: true, Keys: []KeySettings{keySettings("a", 1, 0)}, Now: testkit.NewClockAt(time.Date(2025, 3, 1, 12, 0, 0, 0, time.UTC)).Now,
		Registerer: prometheus.NewRegistry(),
		OnTransition: func(tr Transition) {
			st, _, _ := s.RetryAfter(tr.Key) // takes the breaker lock
			seen = append(seen, st)
		},
	})
	if err != nil {
		t.Fatal(err)
	}
	tk, _ := s.Allow("a")
	tk.Done(Failure) // -> open
	tk, _ = s.Allow("a")
	tk.Done(Success) // -> half_open -> closed
	want := []State{Open, HalfOpen, Closed}
	if len(seen) != len(want) {
		t.Fatalf("hook saw %v, want %v", seen, want)
	}
	for i := range want {
		if seen[i] != want[i] {
			t.Fatalf("hook saw %v, want %v", seen, want)
		}
	}
}

func TestStringsAndParseMode(t *testing.T) {
	strs := map[string]string{
		Closed.String(): "closed", Open.String(): "open", HalfOpen.String(): "half_open", State(7).String(): "State(7)",
		Success.String(): "success", Failure.String(): "failure", Alive.String(): "alive", Neutral.String(): "neutral",
		Outcome(9).String(): "Outcome(9)", Mode(5).String(): "Mode(5)",
	}
	for got, want := range strs {
		if got != want {
			t.Errorf("String() = %q, want %q", got, want)
		}
	}
	for _, m := range []Mode{ModeAuto, ModeOpen, ModeClosed} {
		got, err := ParseMode(m.String())
		if err != nil || got != m {
			t.Errorf("ParseMode(%q) = %v, %v", m.String(), got, err)
		}
	}
	for _, bad := range []string{"", "OPEN", "half_open", "forced"} {
		if _, err := ParseMode(bad); !errors.Is(err, ErrInvalidMode) {
			t.Errorf("ParseMode(%q) err = %v, want ErrInvalidMode", bad, err)
		}
	}
}

// FuzzParseMode: the mode comes from an admin query parameter. Only the
// three names parse, and each round-trips through String.
func FuzzParseMode(f *testing.F) {
	for _, s := range []string{"auto", "open", "closed", "", "OPEN", "half_open", "open\x00", " auto"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		m, err := ParseMode(s)
		if err != nil {
			if !errors.Is(err, ErrInvalidMode) {
				t.Fatalf("ParseMode(%q) error %v is not ErrInvalidMode", s, err)
			}
			return
		}
		if m.String() != s {
			t.Fatalf("ParseMode(%q) = %v, which prints as %q", s, m, m.String())
		}
	})
}
