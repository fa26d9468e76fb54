package breakerstate

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
)

// Breakers whose key still exists keep their state; new thresholds apply.
func TestReconfigureKeepsStateAndAppliesNewSettings(t *testing.T) {
	h := newHarness(t, true, keySettings("a", 5, 30*time.Second), keySettings("b", 5, 30*time.Second))
	h.fail(t, "a", 2)
	h.Reconfigure(true, []KeySettings{keySettings("b", 5, 30*time.Second), keySettings("a", 3, 10*time.Second)})
	s := h.snap(t, "a")
	if s.State != Closed || s.FailureCount != 2 || s.Threshold != 3 || s.ResetTimeout != 10*time.Second {
		t.Fatalf("a after reload: %+v, want closed, count 2, threshold 3, reset 10s", s)
	}
	if snaps := h.Snapshot(); snaps[0].Key != "b" || snaps[1].Key != "a" {
		t.Fatalf("snapshot order %s,%s; want the new config order b,a", snaps[0].Key, snaps[1].Key)
	}
	h.fail(t, "a", 1) // third failure: opens under the new threshold
	if st := h.snap(t, "a").State; st != Open {
		t.Fatalf("state = %v, want open at the new threshold", st)
	}
	h.Reconfigure(true, []KeySettings{keySettings("a", 3, 20*time.Second), keySettings("b", 5, 30*time.Second)})
	if st := h.snap(t, "a"); st.State != Open || st.RetryAfter != 20*time.Second {
		t.Fatalf("open breaker after reload: %+v, want still open with the new reset_timeout", st)
	}
}

// An outstanding ticket keeps working across a reload of its key.
func TestReconfigureKeepsOutstandingProbe(t *testing.T) {
	h := newHarness(t, true)
	probe := h.probe(t, testKey)
	h.Reconfigure(true, []KeySettings{keySettings(testKey, 3, 30*time.Second)})
	h.rejected(t, testKey)
	probe.Done(Success)
	if st := h.snap(t, testKey).State; st != Closed {
		t.Fatalf("state = %v, want closed by the probe admitted before the reload", st)
	}
}

// Removed keys are dropped with their series; new keys start Closed.
func TestReconfigureRemovesAndAddsKeys(t *testing.T) {
	h := newHarness(t, true, keySettings("a", 1, time.Minute), keySettings("b", 1, time.Minute))
	late := h.admit(t, "a")
	h.openBreaker(t, "a")
	h.rejected(t, "a")
	h.Reconfigure(true, []KeySettings{keySettings("b", 1, time.Minute), keySettings("c", 1, time.Minute)})

	if _, err := h.Allow("a"); !errors.Is(err, ErrUnknownKey) {
		t.Fatalf("Allow(removed) = %v, want ErrUnknownKey", err)
	}
	late.Done(Success) // a report from before the reload must not resurrect the series
	late.Done(Failure)
	got := series(t, h.reg)
	for name := range got {
		if strings.Contains(name, "registry=a,") || strings.HasSuffix(name, "registry=a}") {
			t.Errorf("series of removed key survived: %s", name)
		}
	}
	if v, ok := got["nora_circuit_breaker_state{registry=c}"]; !ok || v != 0 {
		t.Errorf("new key c gauge = %v (present %v), want 0", v, ok)
	}
	if s := h.snap(t, "c"); s.State != Closed || s.FailureCount != 0 {
		t.Errorf("new key: %+v", s)
	}
	if err := h.Force("a", ModeOpen); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("Force(removed) = %v, want ErrUnknownKey", err)
	}

	// A key that comes back starts afresh.
	h.Reconfigure(true, []KeySettings{keySettings("a", 1, time.Minute)})
	if s := h.snap(t, "a"); s.State != Closed || s.Rejections != 0 {
		t.Errorf("re-added key: %+v, want fresh", s)
	}
}

// Turning the breakers off resets them and removes the gauges; turning them
// on starts every key Closed at 0.
func TestReconfigureEnableDisable(t *testing.T) {
	keys := []KeySettings{keySettings("a", 1, time.Minute)}
	h := newHarness(t, true, keys...)
	h.openBreaker(t, "a")
	h.Reconfigure(false, keys)
	if h.Enabled() {
		t.Fatal("still enabled")
	}
	if s := h.snap(t, "a"); s.State != Closed || s.FailureCount != 0 || !s.LastFailure.IsZero() {
		t.Fatalf("disabled: %+v, want clean closed", s)
	}
	if n := testutil.CollectAndCount(h.metrics.state); n != 0 {
		t.Fatalf("%d state series while disabled, want 0", n)
	}
	h.admit(t, "a")
	h.Reconfigure(true, keys)
	if v, ok := series(t, h.reg)["nora_circuit_breaker_state{registry=a}"]; !ok || v != 0 {
		t.Fatalf("gauge after enabling = %v (present %v), want 0", v, ok)
	}
	h.openBreaker(t, "a")
	if v := series(t, h.reg)["nora_circuit_breaker_state{registry=a}"]; v != 1 {
		t.Fatalf("gauge = %v, want 1", v)
	}
}

// Invalid entries cannot fail a reload; they are made harmless.
func TestReconfigureSanitises(t *testing.T) {
	h := newHarness(t, true)
	h.Reconfigure(true, []KeySettings{
		keySettings("a", 0, -time.Second), keySettings("", 3, 0), keySettings("a", 9, time.Hour),
	})
	snaps := h.Snapshot()
	if len(snaps) != 1 || snaps[0].Threshold != 1 || snaps[0].ResetTimeout != 0 {
		t.Fatalf("snapshots = %+v, want one key a with threshold 1 and reset 0", snaps)
	}
}

// Adjust adds and drops keys without touching any other: an open breaker
// stays open with its count and settings, even when the added key's list
// names it again with other settings.
func TestAdjustTouchesOnlyTheKeysItNames(t *testing.T) {
	h := newHarness(t, true, keySettings("a", 1, time.Minute), keySettings("b", 3, time.Minute))
	h.openBreaker(t, "a")
	failing := h.admit(t, "b")
	failing.Done(Failure)
	h.Adjust([]KeySettings{keySettings("c", 2, time.Second), keySettings("a", 9, time.Hour)}, []string{"b"})

	if s := h.snap(t, "a"); s.State != Open || s.Threshold != 1 || s.ResetTimeout != time.Minute {
		t.Errorf("a after Adjust: %+v, want still open with its own settings", s)
	}
	if _, err := h.Allow("b"); !errors.Is(err, ErrUnknownKey) {
		t.Errorf("Allow(dropped b) = %v, want ErrUnknownKey", err)
	}
	if s := h.snap(t, "c"); s.State != Closed || s.Threshold != 2 {
		t.Errorf("added c: %+v, want closed with threshold 2", s)
	}
	if got := strings.Join(h.Keys(), ","); got != "a,c" {
		t.Errorf("Keys() = %s, want a,c", got)
	}
	got := series(t, h.reg)
	for name := range got {
		if strings.Contains(name, "registry=b,") || strings.HasSuffix(name, "registry=b}") {
			t.Errorf("series of dropped key survived: %s", name)
		}
	}
}
