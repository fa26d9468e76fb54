package throttle

import (
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

func TestWait(t *testing.T) {
	now := time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC)
	const def = 60 * time.Second
	tests := []struct {
		name, header string
		want         time.Duration
	}{
		{"absent: the default", "", def},
		{"seconds", "120", 120 * time.Second},
		{"seconds with spaces", " 7 ", 7 * time.Second},
		{"zero: the default", "0", def},
		{"negative: the default", "-5", def},
		{"capped at an hour", "86400", time.Hour},
		{"huge number capped", "99999999999999999", time.Hour},
		{"HTTP date", now.Add(90 * time.Second).Format(http.TimeFormat), 90 * time.Second},
		{"HTTP date beyond an hour", now.Add(5 * time.Hour).Format(http.TimeFormat), time.Hour},
		{"HTTP date in the past: the default", now.Add(-time.Minute).Format(http.TimeFormat), def},
		{"garbage: the default", "soon", def},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			h := http.Header{}
			if tc.header != "" {
				h.Set("Retry-After", tc.header)
			}
			if got := Wait(h, now, def); got != tc.want {
				t.Errorf("Wait(%q) = %v, want %v", tc.header, got, tc.want)
			}
		})
	}
}

func TestTableMarkLeftAndGauge(t *testing.T) {
	clock := testkit.NewClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	reg := prometheus.NewRegistry()
	tab, err := New(clock.Now, []string{"a", "b"}, reg)
	if err != nil {
		t.Fatal(err)
	}
	if tab.Left("a") != 0 || tab.Left("never-seen") != 0 {
		t.Fatal("throttled before any 429")
	}
	tab.Mark("a", clock.Now().Add(30*time.Second))
	tab.Mark("a", clock.Now().Add(10*time.Second)) // never shortens
	if got := tab.Left("a"); got != 30*time.Second {
		t.Fatalf("Left = %v, want 30s", got)
	}
	want := "# HELP nora_upstream_throttled 1 while the host behind this breaker key is skipped after answering 429, else 0.\n" +
		"# TYPE nora_upstream_throttled gauge\n" +
		"nora_upstream_throttled{registry=\"a\"} 1\nnora_upstream_throttled{registry=\"b\"} 0\n"
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatal(err)
	}
	clock.Advance(30 * time.Second)
	if tab.Left("a") != 0 {
		t.Fatal("still throttled once the time is up")
	}
	want = strings.Replace(want, `registry="a"} 1`, `registry="a"} 0`, 1)
	if err := testutil.GatherAndCompare(reg, strings.NewReader(want)); err != nil {
		t.Fatalf("after the time is up: %v", err)
	}
}

// TestTableConcurrentMarksAndReads: many goroutines marking and reading
// the same keys; the longest mark wins.
func TestTableConcurrentMarksAndReads(t *testing.T) {
	clock := testkit.NewClock(time.Date(2026, 12, 1, 10, 0, 0, 0, time.UTC))
	tab, err := New(clock.Now, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	for g := range 32 {
		wg.Go(func() {
			for i := range 500 {
				key := []string{"x", "y"}[i%2]
				tab.Mark(key, clock.Now().Add(time.Duration(g*500+i)*time.Millisecond))
				_ = tab.Left(key)
			}
		})
	}
	wg.Wait()
	if got, want := tab.Left("y"), time.Duration(31*500+499)*time.Millisecond; got != want {
		t.Fatalf("Left(y) = %v, want the longest mark %v", got, want)
	}
}
