package main

import (
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// TestRunRateSchedule: every scheduled request is sent and answered, and the
// run spans the schedule.
func TestRunRateSchedule(t *testing.T) {
	srv := httptest.NewServer(bareHandler())
	t.Cleanup(srv.Close)
	res := runRate(rateSpec{client: newClient(clientOpts{conns: 4, timeout: 5 * time.Second}), url: srv.URL,
		rate: 1000, duration: 200 * time.Millisecond, workers: 4, want: http.StatusOK, grace: 5 * time.Second})
	if res.scheduled != 200 || res.sent != 200 || res.dropped != 0 || res.bad != 0 || res.latency.n != 200 {
		t.Fatalf("scheduled %d, sent %d, dropped %d, bad %d (%s), latencies %d; want 200 sent, all good",
			res.scheduled, res.sent, res.dropped, res.bad, res.firstErr, res.latency.n)
	}
	// The last request is scheduled at 199 ms.
	if res.elapsed < 199*time.Millisecond {
		t.Fatalf("elapsed %v, shorter than the schedule", res.elapsed)
	}
}

// TestRunRateCountsWaiting: one worker, and the first answer takes 100 ms.
// The requests scheduled during that stall queue behind it; counted from
// their scheduled times, those scheduled in its first 60 ms (about 30 % of
// the run) each waited over 40 ms. A generator that timed each request from
// its actual send would see one slow request and 199 fast ones.
func TestRunRateCountsWaiting(t *testing.T) {
	var first atomic.Bool
	bare := bareHandler()
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if first.CompareAndSwap(false, true) {
			// A slow answer is the behaviour under test, not a wait for a
			// state.
			time.Sleep(100 * time.Millisecond)
		}
		bare.ServeHTTP(w, r)
	}))
	t.Cleanup(srv.Close)
	res := runRate(rateSpec{client: newClient(clientOpts{conns: 1, timeout: 5 * time.Second}), url: srv.URL,
		rate: 1000, duration: 200 * time.Millisecond, workers: 1, want: http.StatusOK, grace: 5 * time.Second})
	if res.sent != 200 || res.bad != 0 {
		t.Fatalf("sent %d, bad %d (%s); want 200 good", res.sent, res.bad, res.firstErr)
	}
	if p70 := res.latency.quantile(0.70); p70 < 40*time.Millisecond {
		t.Errorf("p70 latency %v: the requests queued behind the stall were not charged for their wait", p70)
	}
	if w70 := res.wait.quantile(0.70); w70 < 40*time.Millisecond {
		t.Errorf("p70 wait before send %v, want over 40 ms", w70)
	}
}

// TestRunRateDrops: a target that never answers holds the only worker; once
// the grace period is over the queued requests are dropped, not sent, and
// every scheduled request is accounted for.
func TestRunRateDrops(t *testing.T) {
	release := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(srv.Close)
	t.Cleanup(func() { close(release) })
	res := runRate(rateSpec{client: newClient(clientOpts{conns: 1, timeout: 300 * time.Millisecond}), url: srv.URL,
		rate: 100, duration: 100 * time.Millisecond, workers: 1, want: http.StatusOK, grace: 50 * time.Millisecond})
	if res.scheduled != 10 || res.sent != 1 || res.bad != 1 || res.dropped != 9 {
		t.Fatalf("scheduled %d, sent %d, bad %d, dropped %d; want 10 scheduled, 1 sent and failed, 9 dropped",
			res.scheduled, res.sent, res.bad, res.dropped)
	}
}
