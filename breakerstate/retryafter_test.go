package breakerstate

import (
	"math"
	"testing"
	"time"
)

func TestCeilSeconds(t *testing.T) {
	tests := []struct {
		in, want time.Duration
	}{
		{-5 * time.Second, time.Second},
		{0, time.Second},
		{time.Nanosecond, time.Second},
		{time.Second, time.Second},
		{time.Second + time.Nanosecond, 2 * time.Second},
		{1500 * time.Millisecond, 2 * time.Second},
		{30 * time.Second, 30 * time.Second},
		{29*time.Second + 999*time.Millisecond, 30 * time.Second},
		{math.MaxInt64, math.MaxInt64 / time.Second * time.Second}, // no overflow
	}
	for _, tt := range tests {
		if got := ceilSeconds(tt.in); got != tt.want {
			t.Errorf("ceilSeconds(%v) = %v, want %v", tt.in, got, tt.want)
		}
	}
}

// Retry-After of a rejected key: while Open, the seconds until a probe is
// allowed, rounded up, at least 1; while HalfOpen, 1.
func TestRetryAfter(t *testing.T) {
	tests := []struct {
		name    string
		reset   time.Duration
		setup   func(t *testing.T, h *harness)
		state   State
		wantDur time.Duration
	}{
		{"closed", 30 * time.Second, func(*testing.T, *harness) {}, Closed, 0},
		{"closed with failures", 30 * time.Second, func(t *testing.T, h *harness) { h.fail(t, testKey, 2) }, Closed, 0},
		{"just opened", 30 * time.Second, func(t *testing.T, h *harness) { h.openBreaker(t, testKey) }, Open, 30 * time.Second},
		{"open 0.5s", 30 * time.Second, func(t *testing.T, h *harness) {
			h.openBreaker(t, testKey)
			h.clock.Advance(500 * time.Millisecond)
		}, Open, 30 * time.Second},
		{"open 1s", 30 * time.Second, func(t *testing.T, h *harness) {
			h.openBreaker(t, testKey)
			h.clock.Advance(time.Second)
		}, Open, 29 * time.Second},
		{"0.1s left", 30 * time.Second, func(t *testing.T, h *harness) {
			h.openBreaker(t, testKey)
			h.clock.Advance(29900 * time.Millisecond)
		}, Open, time.Second},
		{"probe due but not taken", 30 * time.Second, func(t *testing.T, h *harness) {
			h.openBreaker(t, testKey)
			h.clock.Advance(time.Hour)
		}, Open, time.Second},
		{"fractional reset", 1500 * time.Millisecond, func(t *testing.T, h *harness) { h.openBreaker(t, testKey) }, Open, 2 * time.Second},
		{"zero reset", 0, func(t *testing.T, h *harness) { h.openBreaker(t, testKey) }, Open, time.Second},
		{"half open", 30 * time.Second, func(t *testing.T, h *harness) { h.probe(t, testKey) }, HalfOpen, time.Second},
		{"forced open", 30 * time.Second, func(t *testing.T, h *harness) { mustForce(t, h, ModeOpen) }, Open, 30 * time.Second},
		{"forced open fractional", 1500 * time.Millisecond, func(t *testing.T, h *harness) { mustForce(t, h, ModeOpen) }, Open, 2 * time.Second},
		{"forced open zero reset", 0, func(t *testing.T, h *harness) { mustForce(t, h, ModeOpen) }, Open, time.Second},
		{"forced closed", 30 * time.Second, func(t *testing.T, h *harness) {
			mustForce(t, h, ModeClosed)
			h.fail(t, testKey, 10)
		}, Closed, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newHarness(t, true, keySettings(testKey, 3, tt.reset))
			tt.setup(t, h)
			st, d, ok := h.RetryAfter(testKey)
			if !ok || st != tt.state || d != tt.wantDur {
				t.Fatalf("RetryAfter = %v, %v, %v; want %v, %v, true", st, d, ok, tt.state, tt.wantDur)
			}
			if s := h.snap(t, testKey); s.RetryAfter != tt.wantDur || s.State != tt.state {
				t.Fatalf("snapshot RetryAfter/State = %v/%v, want %v/%v", s.RetryAfter, s.State, tt.wantDur, tt.state)
			}
		})
	}
}

func TestRetryAfterUnknownKey(t *testing.T) {
	h := newHarness(t, true)
	if st, d, ok := h.RetryAfter("nope"); ok || st != Closed || d != 0 {
		t.Fatalf("RetryAfter(unknown) = %v, %v, %v", st, d, ok)
	}
}

func mustForce(t *testing.T, h *harness, m Mode) {
	t.Helper()
	if err := h.Force(testKey, m); err != nil {
		t.Fatalf("Force(%v): %v", m, err)
	}
}
