package fallback

import (
	"cmp"
	"io"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/nora-breaker/nora-breaker/answer"
	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// answerAfter answers status and body d after the request arrives, unless
// it is given up first.
func answerAfter(d time.Duration, status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(d):
		case <-r.Context().Done():
			return
		}
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// probeDue fails the named upstream's breaker open and lets its open time
// pass, so that its next admission is the half-open probe.
func probeDue(name string) func(*testing.T, *loopRig) {
	return func(t *testing.T, r *loopRig) {
		opened(name)(t, r)
		time.Sleep(30 * time.Second)
	}
}

// failures is the named upstream's failure count.
func (r *loopRig) failures(name string) int {
	for _, s := range r.set.Snapshot() {
		if s.Key == r.keyOf(name) {
			return s.FailureCount
		}
	}
	return -1
}

// TestLoopHedge: with A's hedge_after at 250 ms, a GET whose A has not
// answered by then is also sent to the next admitted candidate; the first
// answer that serves wins and the other attempt is given up, neutral for
// its breaker; an A that fails leaves the hedge as the candidate it is.
func TestLoopHedge(t *testing.T) {
	const after = 250 * time.Millisecond
	tests := []struct {
		name       string
		method     string
		a, b, c    []http.HandlerFunc
		setup      func(*testing.T, *loopRig)
		wantStatus int
		wantKind   answer.Result
		wantBy     string
		wantSteps  []string
		wantTook   time.Duration
		wantSent   float64
		wantWon    float64
	}{
		{name: "hedge serves", a: h(testkit.Hang), b: h(answerAfter(0, 200, "from B")),
			wantStatus: 200, wantKind: answer.Fallback, wantBy: "B",
			wantSteps: []string{"A neutral given up", "B hedge success 200+"}, wantTook: after,
			wantSent: 1, wantWon: 1},
		{name: "addressed answers first", a: h(answerAfter(400*time.Millisecond, 200, "from A")),
			b:          h(answerAfter(time.Second, 200, "from B")),
			wantStatus: 200, wantKind: answer.Forwarded, wantBy: "A",
			wantSteps: []string{"A success 200+", "B hedge neutral given up"}, wantTook: 400 * time.Millisecond,
			wantSent: 1},
		{name: "addressed fails, hedge serves", a: h(answerAfter(300*time.Millisecond, 502, "")),
			b:          h(answerAfter(after, 200, "from B")),
			wantStatus: 200, wantKind: answer.Fallback, wantBy: "B",
			wantSteps: []string{"A failure 502", "B hedge success 200+"}, wantTook: 2 * after,
			wantSent: 1, wantWon: 1},
		{name: "hedge fails, addressed serves", a: h(answerAfter(400*time.Millisecond, 200, "from A")),
			b:          h(answerAfter(0, 500, "")),
			wantStatus: 200, wantKind: answer.Forwarded, wantBy: "A",
			wantSteps: []string{"A success 200+", "B hedge failure 500"}, wantTook: 400 * time.Millisecond,
			wantSent: 1},
		// B, hedged, is not asked again: the loop goes on after it.
		{name: "hedge 404, addressed fails, next candidate", a: h(answerAfter(400*time.Millisecond, 502, "")),
			b: h(answerAfter(0, 404, "")), c: h(answerAfter(0, 200, "from C")),
			wantStatus: 200, wantKind: answer.Fallback, wantBy: "C",
			wantSteps: []string{"A failure 502", "B hedge alive 404", "C success 200+"}, wantTook: 400 * time.Millisecond,
			wantSent: 1},
		{name: "the hedge goes to the next admitted candidate", setup: forceOpen("B"), a: h(testkit.Hang),
			c:          h(answerAfter(0, 200, "from C")),
			wantStatus: 200, wantKind: answer.Fallback, wantBy: "C",
			wantSteps: []string{"A neutral given up", "B skipped breaker", "C hedge success 200+"}, wantTook: after,
			wantSent: 1, wantWon: 1},
		{name: "no hedge for an answer in time", a: h(answerAfter(200*time.Millisecond, 200, "from A")),
			wantStatus: 200, wantKind: answer.Forwarded, wantBy: "A",
			wantSteps: []string{"A success 200+"}, wantTook: 200 * time.Millisecond},
		{name: "never for a POST", method: http.MethodPost, a: h(answerAfter(400*time.Millisecond, 200, "from A")),
			wantStatus: 200, wantKind: answer.Forwarded, wantBy: "A",
			wantSteps: []string{"A success 200+"}, wantTook: 400 * time.Millisecond},
		{name: "never for the probe", setup: probeDue("A"), a: h(answerAfter(400*time.Millisecond, 200, "from A")),
			wantStatus: 200, wantKind: answer.Forwarded, wantBy: "A",
			wantSteps: []string{"A success 200+"}, wantTook: 400 * time.Millisecond},
		{name: "client gone during the race", setup: clientLeavesAfter(time.Second), a: h(testkit.Hang),
			b:          h(testkit.Hang),
			wantStatus: 502, wantKind: answer.Error,
			wantSteps: []string{"A neutral error", "B hedge neutral error"}, wantTook: time.Second, wantSent: 1},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newLoopRig(t, true, 0)
				r.a.HedgeAfter = after
				if tc.setup != nil {
					tc.setup(t, r)
				}
				r.script(tc.a, tc.b, tc.c)
				method := cmp.Or(tc.method, http.MethodGet)
				res, _, took := r.serve(t, method)
				if res.Resp.StatusCode != tc.wantStatus || res.Kind != tc.wantKind || r.names[res.ServedBy] != tc.wantBy {
					t.Errorf("got %d %s by %q, want %d %s by %q", res.Resp.StatusCode, res.Kind, r.names[res.ServedBy],
						tc.wantStatus, tc.wantKind, tc.wantBy)
				}
				if got := r.steps(res.Attempts); !slices.Equal(got, tc.wantSteps) {
					t.Errorf("steps %q, want %q", got, tc.wantSteps)
				}
				if took != tc.wantTook {
					t.Errorf("took %v, want %v", took, tc.wantTook)
				}
				sent := testutil.ToFloat64(r.chain.hedgesSent.WithLabelValues(r.a.Key))
				won := testutil.ToFloat64(r.chain.hedgesWon.WithLabelValues(r.a.Key))
				if sent != tc.wantSent || won != tc.wantWon {
					t.Errorf("hedges sent %v, won %v; want %v, %v", sent, won, tc.wantSent, tc.wantWon)
				}
				synctest.Wait()
				// A given-up attempt counts for nothing.
				for _, a := range res.Attempts {
					if strings.Contains(a.Error, attempt.ErrCancelled.Error()) && r.failures(r.names[a.Key]) != 0 {
						t.Errorf("%s given up, yet its failure count is %d", r.names[a.Key], r.failures(r.names[a.Key]))
					}
				}
			})
		})
	}
}

// TestLoopHedgeSearchBound: a hedge's candidate is waited on, like any
// candidate, for no longer than what is left of the search (docs/behaviour.md
// §5.4), here 1 s from when the hedge is sent at 250 ms. B, silent, is
// given up at 1.25 s, neutral, and A's own 502 at 2 s is the answer.
func TestLoopHedgeSearchBound(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLoopRig(t, true, time.Second)
		r.a.HedgeAfter = 250 * time.Millisecond
		r.script(h(answerAfter(2*time.Second, 502, "A is broken")), h(testkit.Hang), nil)
		res, body, took := r.serve(t, http.MethodGet)
		if res.Resp.StatusCode != 502 || res.Kind != answer.Forwarded || body != "A is broken" {
			t.Errorf("got %d %s %q, want A's 502", res.Resp.StatusCode, res.Kind, body)
		}
		want := []string{"A failure 502", "B hedge neutral search bound"}
		if got := r.steps(res.Attempts); !slices.Equal(got, want) {
			t.Errorf("steps %q, want %q", got, want)
		}
		if took != 2*time.Second {
			t.Errorf("took %v, want 2s", took)
		}
		synctest.Wait()
		if n := r.failures("B"); n != 0 {
			t.Errorf("B, given up by the search's bound, has %d failures", n)
		}
	})
}

// serveAlone is serve for a request that has no candidates (a single
// upstream): only a stale copy could stand in for A.
func (r *loopRig) serveAlone(t *testing.T) (Result, time.Duration) {
	t.Helper()
	req := httptest.NewRequestWithContext(r.client, http.MethodGet, r.a.URL.String()+"/g/a.jar", nil)
	req.RequestURI = ""
	start := time.Now()
	res := r.chain.Serve(Request{Client: req, Addressed: r.a, Rel: "/g/a.jar", Settings: Settings{Transport: r.tr}})
	took := time.Since(start)
	io.Copy(io.Discard, res.Resp.Body)
	res.Resp.Body.Close()
	return res, took
}

// inParallel runs n copies of f at once and returns their results in the
// order they finished.
func inParallel[T any](n int, f func() T) []T {
	out := make(chan T, n)
	for range n {
		go func() { out <- f() }()
	}
	res := make([]T, 0, n)
	for range n {
		res = append(res, <-out)
	}
	return res
}

// timed is one client's answer and how long it took.
type timed struct {
	res  Result
	took time.Duration
}

// TestLoopHedgeBudget: twenty GETs wait on A at once. While A has answered
// nobody since they were sent, each is hedged (a dead host's failovers,
// only sooner); once A has answered someone meanwhile, it is merely slow,
// and at most max(3, 20 % of the 20 waiting) = 4 hedges are sent at once.
func TestLoopHedgeBudget(t *testing.T) {
	for _, tc := range []struct {
		name           string
		answered       bool
		wantSent, over float64
	}{{"host silent", false, 20, 0}, {"host answering", true, 4, 16}} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newLoopRig(t, true, 0)
				r.a.HedgeAfter = 250 * time.Millisecond
				r.up["B"].Script(answerAfter(2*time.Second, 200, "from B"))
				warm := make(chan Result, 1)
				if tc.answered {
					r.up["A"].Script(answerAfter(100*time.Millisecond, 200, "quick"))
					go func() { res, _, _ := r.serve(t, http.MethodGet); warm <- res }()
					synctest.Wait() // the quick request is at A
				}
				r.up["A"].Script(answerAfter(time.Second, 200, "from A"))
				results := inParallel(20, func() timed { res, _, took := r.serve(t, http.MethodGet); return timed{res, took} })
				for _, s := range results {
					if s.res.Kind != answer.Forwarded || s.took != time.Second {
						t.Errorf("%s after %v, want A's answer after 1s", s.res.Kind, s.took)
					}
				}
				if tc.answered {
					<-warm
				}
				sent := testutil.ToFloat64(r.chain.hedgesSent.WithLabelValues(r.a.Key))
				over := testutil.ToFloat64(r.chain.hedgesOverBudget.WithLabelValues(r.a.Key))
				if sent != tc.wantSent || over != tc.over {
					t.Fatalf("hedges sent %v, over budget %v; want %v, %v", sent, over, tc.wantSent, tc.over)
				}
			})
		})
	}
}

// TestLoopHedgeWaitFollowsTheHost: a host whose recent answers took 10 ms
// is hedged after hedgeFloor (twice its tail, 20 ms, is shorter), not after
// its hedge_after of 1 s.
func TestLoopHedgeWaitFollowsTheHost(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLoopRig(t, true, 0)
		r.a.HedgeAfter = time.Second
		r.up["A"].Script(answerAfter(10*time.Millisecond, 200, "quick"))
		for range 10 {
			if res, _, _ := r.serve(t, http.MethodGet); res.Kind != answer.Forwarded {
				t.Fatalf("priming: %s", res.Kind)
			}
		}
		time.Sleep(time.Second) // longer than the Sender keeps a computed tail
		r.up["A"].Script(answerAfter(time.Second, 200, "slow"))
		r.up["B"].Script(answerAfter(0, 200, "from B"))
		res, _, took := r.serve(t, http.MethodGet)
		if res.Kind != answer.Fallback || took != hedgeFloor {
			t.Fatalf("%s after %v, want B's answer after %v", res.Kind, took, hedgeFloor)
		}
	})
}

// TestLoopHandedOn: three GETs wait on a silent A (suspect_after 0.5 s,
// threshold 3). At 0.5 s A's breaker opens, and each is handed on at once:
// to B when there is a candidate, to the stale copy when there is only
// that; with neither it goes on waiting, and A's answer at 0.8 s serves.
func TestLoopHandedOn(t *testing.T) {
	const suspect = 500 * time.Millisecond
	for _, tc := range []struct {
		name     string
		alone    bool // no candidates
		copy     bool // a stale copy is kept
		a        http.HandlerFunc
		wantKind answer.Result
		wantTook time.Duration
		wantStep string // the first step
	}{
		{name: "to a candidate", a: testkit.Hang, wantKind: answer.Fallback, wantTook: suspect,
			wantStep: "A neutral given up"},
		{name: "to a stale copy", alone: true, copy: true, a: testkit.Hang, wantKind: answer.Stale, wantTook: suspect,
			wantStep: "A neutral given up"},
		{name: "nowhere to go", alone: true, a: answerAfter(800*time.Millisecond, 200, "from A"),
			wantKind: answer.Forwarded, wantTook: 800 * time.Millisecond, wantStep: "A success 200+"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newLoopRig(t, true, 0)
				r.a.SuspectAfter = suspect
				if tc.copy {
					keptCopy("the kept copy")(t, r)
				}
				r.up["A"].Script(tc.a)
				r.up["B"].Script(answerAfter(0, 200, "from B"))
				results := inParallel(3, func() timed {
					if tc.alone {
						res, took := r.serveAlone(t)
						return timed{res, took}
					}
					res, _, took := r.serve(t, http.MethodGet)
					return timed{res, took}
				})
				for _, s := range results {
					if s.res.Kind != tc.wantKind || s.took != tc.wantTook || r.steps(s.res.Attempts)[0] != tc.wantStep {
						t.Errorf("%s after %v, steps %q; want %s after %v, first %q", s.res.Kind, s.took,
							r.steps(s.res.Attempts), tc.wantKind, tc.wantTook, tc.wantStep)
					}
				}
				if opened := r.openings(t, "A"); opened != 1 {
					t.Errorf("A opened %v times, want once", opened)
				}
			})
		})
	}
}

// openings is how many times the named upstream's breaker opened from
// closed (nora_circuit_breaker_transitions_total).
func (r *loopRig) openings(t *testing.T, name string) float64 {
	t.Helper()
	mfs, err := r.reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != "nora_circuit_breaker_transitions_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["registry"] == r.keyOf(name) && labels["from"] == "closed" && labels["to"] == "open" {
				return m.GetCounter().GetValue()
			}
		}
	}
	return 0
}

// TestLoopSlowOnlyUpstreamKeepsServing: a registry that takes 0.8 s for
// every answer, the only upstream, with suspect_after 0.5 s and NORA's
// threshold of 5, keeps serving: eight clients that start 100 ms apart and
// ask back to back for 20 s are all served by it, because some answer
// always comes before five requests are silent; then a burst of 16 at once
// is too, because by then the host's 0.8 s answers have made it wait twice
// that before a request counts as silent. Its breaker never opens.
func TestLoopSlowOnlyUpstreamKeepsServing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLoopRig(t, true, 0)
		var ks []breakerstate.KeySettings
		for _, k := range []string{r.a.Key, r.b.Key, r.c.Key, realmKey} {
			ks = append(ks, breakerstate.KeySettings{Key: k, Format: "maven", FailureThreshold: 5,
				ResetTimeout: 30 * time.Second})
		}
		r.set.Reconfigure(true, ks)
		r.a.SuspectAfter = 500 * time.Millisecond
		r.up["A"].Script(answerAfter(800*time.Millisecond, 200, "from A"))
		check := func(res Result) {
			if res.Kind != answer.Forwarded || res.Resp.StatusCode != 200 {
				t.Errorf("%d %s, steps %q; want A's 200", res.Resp.StatusCode, res.Kind, r.steps(res.Attempts))
			}
		}
		done := make(chan int, 8)
		end := time.Now().Add(20 * time.Second)
		for k := range 8 {
			go func() {
				time.Sleep(time.Duration(k) * 100 * time.Millisecond)
				n := 0
				for time.Now().Before(end) {
					res, _ := r.serveAlone(t)
					check(res)
					n++
				}
				done <- n
			}()
		}
		total := 0
		for range 8 {
			total += <-done
		}
		for _, s := range inParallel(16, func() timed { res, took := r.serveAlone(t); return timed{res, took} }) {
			check(s.res)
		}
		if opened := r.openings(t, "A"); opened != 0 || total < 8*20 {
			t.Fatalf("A's breaker opened %v times over %d requests, want never", opened, total+16)
		}
	})
}

// TestLoopBlackHoleWithMirror: A takes connections and answers nothing, B
// is a healthy mirror; hedge_after 250 ms, suspect_after 500 ms, threshold
// 3. Sixteen GETs at once are all hedged at 250 ms (A has answered nobody,
// so the budget does not hold them back) and served by B then; their A
// attempts, given up early, count as silent at 500 ms since A answered
// nobody meanwhile, so A's breaker opens then, and a GET after it goes to
// B without waiting for a hedge at all.
func TestLoopBlackHoleWithMirror(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLoopRig(t, true, 0)
		r.a.HedgeAfter, r.a.SuspectAfter = 250*time.Millisecond, 500*time.Millisecond
		r.up["A"].Script(testkit.Hang)
		r.up["B"].Script(answerAfter(0, 200, "from B"))
		for _, s := range inParallel(16, func() timed { res, _, took := r.serve(t, http.MethodGet); return timed{res, took} }) {
			if s.res.Kind != answer.Fallback || s.took != 250*time.Millisecond {
				t.Errorf("%s after %v, steps %q; want B's answer after 250ms", s.res.Kind, s.took, r.steps(s.res.Attempts))
			}
		}
		if opened := r.openings(t, "A"); opened != 0 {
			t.Fatalf("A opened before any of its attempts' suspect wait passed")
		}
		time.Sleep(time.Second)
		if opened := r.openings(t, "A"); opened != 1 {
			t.Fatalf("A opened %v times by 1.25 s, want once", opened)
		}
		res, _, took := r.serve(t, http.MethodGet)
		if got := r.steps(res.Attempts); took != 0 || !slices.Equal(got, []string{"A skipped breaker", "B success 200+"}) {
			t.Fatalf("after the opening: %v, steps %q", took, got)
		}
	})
}
