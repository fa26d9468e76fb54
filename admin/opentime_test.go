package admin

import (
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
	"github.com/nora-breaker/nora-breaker/throttle"
)

// GET /breakers and the status page show how long a breaker stays open and
// the failed probes that grew it (docs/behaviour.md §4).
func TestViewsShowTheGrowingOpenTime(t *testing.T) {
	const key = "npm:https://registry.npmjs.org"
	clock := testkit.NewClock()
	reg := prometheus.NewRegistry()
	set, err := breakerstate.New(breakerstate.Options{Enabled: true, Now: clock.Now, Registerer: reg,
		Keys: []breakerstate.KeySettings{{Key: key, Format: "npm", FailureThreshold: 1,
			ResetTimeout: 30 * time.Second, ResetTimeoutMax: 240 * time.Second}}})
	if err != nil {
		t.Fatal(err)
	}
	th, err := throttle.New(clock.Now, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	s := New(Options{Registry: reg, Breakers: set, Throttles: th, History: &History{},
		Hosts: func() map[string]KeyHost { return map[string]KeyHost{key: {Host: "registry.npmjs.org", Upstream: key}} },
		Token: func() string { return "" }, Shared: func() string { return "off" },
		ShuttingDown: func() bool { return false }, Now: clock.Now, Started: clock.Now(), Logger: zerolog.Nop()})
	fail := func() {
		tk, err := set.Allow(key)
		if err != nil {
			t.Fatal(err)
		}
		tk.Done(breakerstate.Failure)
	}
	fail()
	for _, period := range []time.Duration{30 * time.Second, 60 * time.Second} {
		clock.Advance(period)
		fail() // the probe fails
	}
	v := s.Views()[0]
	if v.OpenTime != 120 || v.FailedProbes != 2 || v.ResetTimeoutMax != 240 || v.RetryAfter != 120 {
		t.Fatalf("view %+v, want open 120s after 2 failed probes, max 240s", v)
	}
	row := breakerRow(t, s.statusPageHTML(t), key)
	for _, want := range []string{`data-seconds="120" data-failed-probes="2"`, "2m 0s", "after 2 failed probes"} {
		if !strings.Contains(row, want) {
			t.Errorf("row lacks %s:\n%s", want, row)
		}
	}
}

// statusPageHTML renders the status page.
func (s *Server) statusPageHTML(t *testing.T) string {
	t.Helper()
	var b strings.Builder
	if err := statusPageTemplate.Execute(&b, s.statusPage()); err != nil {
		t.Fatal(err)
	}
	return b.String()
}
