package fallback

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// rig holds real breakers on a fake clock, a Sender and a loopback-only
// transport, shared by the chain tests.
type rig struct {
	clock  *fakeClock
	set    *breakerstate.Set
	sender *attempt.Sender
	tr     *http.Transport
	reg    *prometheus.Registry
}

// fakeClock is the injected clock: tests move time instead of sleeping.
type fakeClock = testkit.Clock

func newFakeClock() *fakeClock {
	return testkit.NewClockAt(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
}

func newRig(t testing.TB, keys ...string) *rig {
	t.Helper()
	r := &rig{clock: newFakeClock(), reg: prometheus.NewRegistry(),
		tr: &http.Transport{Proxy: nil, DisableCompression: true}}
	t.Cleanup(r.tr.CloseIdleConnections)
	var ks []breakerstate.KeySettings
	for _, k := range keys {
		format, _, _ := strings.Cut(k, ":")
		ks = append(ks, breakerstate.KeySettings{Key: k, Format: format, FailureThreshold: 3,
			ResetTimeout: 30 * time.Second})
	}
	var err error
	r.set, err = breakerstate.New(breakerstate.Options{Enabled: true, Keys: ks, Now: r.clock.Now, Registerer: r.reg})
	if err != nil {
		t.Fatal(err)
	}
	if r.sender, err = attempt.NewSender(r.clock.Now, r.reg); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *rig) admit(t testing.TB, key string) breakerstate.Ticket {
	t.Helper()
	tk, err := r.set.Allow(key)
	if err != nil {
		t.Fatalf("Allow(%s): %v", key, err)
	}
	return tk
}
