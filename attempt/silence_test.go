package attempt

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

const silentKey = "npm:http://hole.test"

// silentRig is a Sender and one breaker (threshold 3) on the bubble's clock.
type silentRig struct {
	set    *breakerstate.Set
	sender *Sender
	trs    chan breakerstate.Transition
}

func newSilentRig(t *testing.T) *silentRig {
	t.Helper()
	r := &silentRig{trs: make(chan breakerstate.Transition, 16)}
	reg := prometheus.NewRegistry()
	var err error
	r.set, err = breakerstate.New(breakerstate.Options{Enabled: true, Now: time.Now, Registerer: reg,
		Keys: []breakerstate.KeySettings{{Key: silentKey, Format: "npm", FailureThreshold: 3,
			ResetTimeout: 30 * time.Second}},
		OnTransition: func(tr breakerstate.Transition) { r.trs <- tr }})
	if err != nil {
		t.Fatal(err)
	}
	if r.sender, err = NewSender(time.Now, reg); err != nil {
		t.Fatal(err)
	}
	return r
}

func (r *silentRig) state(t *testing.T) breakerstate.State {
	t.Helper()
	st, _, _ := r.set.RetryAfter(silentKey)
	return st
}

// hangs is an upstream that never answers until the attempt is given up.
func hangs(req *http.Request) (*http.Response, error) {
	<-req.Context().Done()
	return nil, req.Context().Err()
}

// answersIn is an upstream that answers 200 after d.
func answersIn(d time.Duration) roundTripFunc {
	return func(req *http.Request) (*http.Response, error) {
		select {
		case <-time.After(d):
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody, Request: req}, nil
		case <-req.Context().Done():
			return nil, req.Context().Err()
		}
	}
}

// TestSilentAttemptsOpenTheBreakerEarly: three GETs to a black hole with
// suspect_after 0.5 s and a 5 s header wait open the breaker at 0.5 s,
// each is told (OnOpen), and one the caller then gives up with
// ErrCancelled is neutral, wrapped so, and never "client gone".
func TestSilentAttemptsOpenTheBreakerEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newSilentRig(t)
		start := time.Now()
		type result struct {
			err error
			at  time.Duration
		}
		results := make(chan result, 3)
		for range 3 {
			tk, err := r.set.Allow(silentKey)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithCancelCause(context.Background())
			defer cancel(nil)
			req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://hole.test/left-pad", nil)
			target := Target{Key: silentKey, HeaderTimeout: 5 * time.Second, SuspectAfter: 500 * time.Millisecond,
				OnOpen: func() { cancel(fmt.Errorf("%w: handed on", ErrCancelled)) }}
			go func() {
				_, err := r.sender.Send(roundTripFunc(hangs), req, target, tk)
				results <- result{err, time.Since(start)}
			}()
		}
		for range 3 {
			res := <-results
			if !errors.Is(res.err, ErrCancelled) || res.at != 500*time.Millisecond {
				t.Errorf("attempt ended at %v with %v, want ErrCancelled at 500ms", res.at, res.err)
			}
			if v := Decide(nil, res.err, nil); v != breakerstate.Neutral {
				t.Errorf("verdict %v, want neutral", v)
			}
		}
		tr := <-r.trs
		if tr.To != breakerstate.Open || !tr.Silent || tr.At.Sub(start) != 500*time.Millisecond {
			t.Fatalf("transition %+v, want a silent opening at 500ms", tr)
		}
		if st := r.state(t); st != breakerstate.Open {
			t.Fatalf("state %v, want open", st)
		}
	})
}

// TestSlowHostIsGivenItsUsualTime: a host whose recent answers took 0.8 s
// waits twice its tail before an attempt counts as silent, so three slow
// but working GETs at once leave the breaker closed; the same three with
// no history behind them open it (the tail is what keeps it closed).
func TestSlowHostIsGivenItsUsualTime(t *testing.T) {
	for _, tc := range []struct {
		name     string
		history  int
		wantOpen bool
	}{{"with history", 5, false}, {"without history", 0, true}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newSilentRig(t)
				target := Target{Key: silentKey, HeaderTimeout: 5 * time.Second, SuspectAfter: 500 * time.Millisecond}
				send := func() error {
					tk, err := r.set.Allow(silentKey)
					if err != nil {
						return err
					}
					req, _ := http.NewRequest(http.MethodGet, "http://slow.test/x", nil)
					resp, err := r.sender.Send(answersIn(800*time.Millisecond), req, target, tk)
					if err == nil {
						resp.Body.Close()
					}
					return err
				}
				for range tc.history {
					if err := send(); err != nil {
						t.Fatal(err)
					}
				}
				if tail, ok := r.sender.HeaderTail(silentKey); ok != (tc.history > 0) ||
					(ok && (tail < 800*time.Millisecond || tail > 1200*time.Millisecond)) {
					t.Fatalf("tail %v %v after %d answers in 0.8 s", tail, ok, tc.history)
				}
				var opened atomic.Bool
				done := make(chan error, 3)
				for range 3 {
					go func() { done <- send() }()
				}
				for range 3 {
					<-done
				}
				select {
				case tr := <-r.trs:
					opened.Store(tr.To == breakerstate.Open)
				default:
				}
				if opened.Load() != tc.wantOpen {
					t.Fatalf("opened = %v, want %v", opened.Load(), tc.wantOpen)
				}
			})
		})
	}
}

// TestAlarmCountsOnlyTheUpstream: the silence alarm runs on the header
// wait's clock, paused while the client's body is awaited, and never
// fires for an answer that comes first.
func TestAlarmCountsOnlyTheUpstream(t *testing.T) {
	for _, tc := range []struct {
		name     string
		body     bool
		answerIn time.Duration
		want     bool
	}{
		{"slow upload, prompt answer", true, 200 * time.Millisecond, false},
		{"no body, silent upstream", false, 2 * time.Second, true},
		{"no body, prompt answer", false, 900 * time.Millisecond, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				req, _ := http.NewRequest(http.MethodPut, "http://up.test/x", nil)
				if tc.body {
					req.Body = &pacedBody{pieces: 10, pause: 500 * time.Millisecond}
				}
				var fired atomic.Bool
				resp, _, release, err := roundTrip(upstream(tc.answerIn), req, 5*time.Second, Bound{},
					alarm{after: time.Second, fire: func() { fired.Store(true) }})
				if err != nil {
					t.Fatal(err)
				}
				resp.Body.Close()
				release(nil)
				synctest.Wait()
				if fired.Load() != tc.want {
					t.Fatalf("alarm fired = %v, want %v", fired.Load(), tc.want)
				}
			})
		})
	}
}

// TestGivenUpAttemptCountsWhenTheHostStaysSilent: three attempts given up
// by the proxy at 100 ms (their hedges served) count as silent when their
// 0.5 s suspect wait would have passed, since the host answered nobody
// meanwhile: the breaker opens then. Had the host answered anyone in
// between, they count for nothing.
func TestGivenUpAttemptCountsWhenTheHostStaysSilent(t *testing.T) {
	for _, tc := range []struct {
		name     string
		answered bool
		wantOpen bool
	}{{"host silent", false, true}, {"host answered meanwhile", true, false}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newSilentRig(t)
				target := Target{Key: silentKey, HeaderTimeout: 5 * time.Second, SuspectAfter: 500 * time.Millisecond}
				for range 3 {
					tk, err := r.set.Allow(silentKey)
					if err != nil {
						t.Fatal(err)
					}
					ctx, cancel := context.WithCancelCause(context.Background())
					time.AfterFunc(100*time.Millisecond, func() { cancel(fmt.Errorf("%w: a hedge served", ErrCancelled)) })
					req, _ := http.NewRequestWithContext(ctx, http.MethodGet, "http://hole.test/x", nil)
					go r.sender.Send(roundTripFunc(hangs), req, target, tk)
				}
				if tc.answered {
					time.Sleep(200 * time.Millisecond)
					tk, _ := r.set.Allow(silentKey)
					req, _ := http.NewRequest(http.MethodGet, "http://hole.test/y", nil)
					resp, err := r.sender.Send(answersIn(0), req, target, tk)
					if err != nil {
						t.Fatal(err)
					}
					resp.Body.Close()
				}
				time.Sleep(time.Second)
				if open := r.state(t) == breakerstate.Open; open != tc.wantOpen {
					t.Fatalf("open = %v, want %v", open, tc.wantOpen)
				}
			})
		})
	}
}
