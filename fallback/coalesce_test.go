package fallback

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/answer"
	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/coalesce"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/fallback/format"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// newCoalescingRig is the loop's rig whose chain lets identical GETs share
// a decision. Call it inside a synctest bubble.
func newCoalescingRig(t *testing.T) *loopRig {
	t.Helper()
	r := newLoopRig(t, true, 0)
	r.reg = prometheus.NewRegistry()
	sender, err := attempt.NewSender(time.Now, r.reg)
	if err != nil {
		t.Fatal(err)
	}
	if r.chain, err = New(Options{Breakers: r.set, Sender: sender,
		Formats: format.Set{"maven": loopFormat{Plain: format.Plain{FinalNotFound: true}}}, Stale: r.stale,
		Throttles: r.throttles, Coalesce: &coalesce.Options{Dir: t.TempDir()}, Now: time.Now,
		Registerer: r.reg, Logger: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	return r
}

// served is one client's answer, its body read.
type served struct {
	res  Result
	body string
}

// serveAll sends one GET per header set at once and returns the answers
// once every client has its body. release runs when every request has
// arrived and waits (the upstream's script waits for it).
func (r *loopRig) serveAll(t *testing.T, hdrs []http.Header, release func()) []served {
	t.Helper()
	wait := r.startAll(t, hdrs)
	synctest.Wait()
	release()
	return wait()
}

// startAll sends one GET per header set at once; wait returns the answers
// once every client has its body.
func (r *loopRig) startAll(t *testing.T, hdrs []http.Header) (wait func() []served) {
	t.Helper()
	out := make([]served, len(hdrs))
	var wg sync.WaitGroup
	for i, h := range hdrs {
		wg.Go(func() {
			req := httptest.NewRequestWithContext(r.client, http.MethodGet, r.a.URL.String()+"/g/a.jar", nil)
			req.RequestURI = ""
			for k, v := range h {
				req.Header[k] = v
			}
			res := r.chain.Serve(Request{Client: req, Addressed: r.a, Rel: "/g/a.jar",
				Candidates: []*config.Upstream{r.b, r.c}, Settings: Settings{Transport: r.tr}})
			b, err := io.ReadAll(res.Resp.Body)
			res.Resp.Body.Close()
			if err != nil {
				t.Errorf("client %d: %v", i, err)
			}
			out[i] = served{res: res, body: string(b)}
		})
	}
	return func() []served { wg.Wait(); return out }
}

// gated answers like h once gate is closed.
func gated(gate chan struct{}, h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, req *http.Request) {
		<-gate
		h(w, req)
	}
}

// failures is key's failure count.
func failures(t *testing.T, set *breakerstate.Set, key string) int {
	t.Helper()
	for _, s := range set.Snapshot() {
		if s.Key == key {
			return s.FailureCount
		}
	}
	t.Fatalf("no breaker %s", key)
	return 0
}

// TestCoalescedFailure: ten identical GETs while the addressed upstream
// fails cost it one request and one failure, and the candidate one
// request: the whole loop runs once, and every client gets the candidate's
// answer.
func TestCoalescedFailure(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newCoalescingRig(t)
		gate := make(chan struct{})
		big := strings.Repeat("jar from B ", 10<<10) // past the spool's memory head
		r.up["A"].Script(gated(gate, testkit.Status(502, "A is broken")))
		r.up["B"].Script(testkit.Status(200, big))
		got := r.serveAll(t, make([]http.Header, 10), func() { close(gate) })
		joined := 0
		for i, s := range got {
			if s.res.Resp.StatusCode != 200 || s.body != big || s.res.Kind != answer.Fallback || s.res.ServedBy != r.b.Key {
				t.Errorf("client %d: %d %s by %s, %d bytes", i, s.res.Resp.StatusCode, s.res.Kind, s.res.ServedBy, len(s.body))
			}
			if s.res.Coalesced {
				joined++
			}
			if steps := r.steps(s.res.Attempts); strings.Join(steps, ", ") != "A failure 502, B success 200+" {
				t.Errorf("client %d: steps %v", i, steps)
			}
		}
		synctest.Wait()
		if a, b := r.up["A"].Hits(), r.up["B"].Hits(); a != 1 || b != 1 {
			t.Errorf("A asked %d times, B %d; want once each", a, b)
		}
		if n := failures(t, r.set, r.a.Key); n != 1 {
			t.Errorf("A's failures: %d, want 1", n)
		}
		if n := testutil.ToFloat64(r.chain.fallbacks.WithLabelValues(r.a.Key, r.b.Key)); joined != 9 || n != 10 {
			t.Errorf("joined %d, fallbacks counted %v; want 9 and 10", joined, n)
		}
	})
}

// TestCoalescedStaleCopy: when nothing serves, every client of the one
// decision gets the stale copy it found, and each counts as a stale copy
// served.
func TestCoalescedStaleCopy(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newCoalescingRig(t)
		keptCopy("the kept copy")(t, r)
		gate := make(chan struct{})
		r.up["A"].Script(gated(gate, testkit.Status(502, "")))
		r.up["B"].Script(testkit.Status(404, ""))
		r.up["C"].Script(testkit.Status(404, ""))
		got := r.serveAll(t, make([]http.Header, 5), func() { close(gate) })
		for i, s := range got {
			if s.res.Kind != answer.Stale || s.body != "the kept copy" || s.res.Resp.Header.Get("X-Nora-Stale") != "true" {
				t.Errorf("client %d: %s %q", i, s.res.Kind, s.body)
			}
		}
		if a, b, c := r.up["A"].Hits(), r.up["B"].Hits(), r.up["C"].Hits(); a != 2 || b != 1 || c != 1 {
			t.Errorf("A asked %d times (one to keep the copy), B %d, C %d", a, b, c)
		}
		if n := testutil.ToFloat64(r.chain.staleServed.WithLabelValues(r.a.Key)); n != 5 {
			t.Errorf("stale copies served: %v, want 5", n)
		}
	})
}

// TestCoalescedCredentialsApart: requests with other credentials never
// share a decision: each set of credentials gets the answer fetched with
// its own.
func TestCoalescedCredentialsApart(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newCoalescingRig(t)
		gate := make(chan struct{})
		r.up["A"].Script(gated(gate, func(w http.ResponseWriter, req *http.Request) {
			io.WriteString(w, "for "+req.Header.Get("Authorization"))
		}))
		auth := func(v string) http.Header { return http.Header{"Authorization": {v}} }
		hdrs := []http.Header{auth("Bearer alice"), auth("Bearer bob"), auth("Bearer alice"), auth("Bearer bob"), {}}
		got := r.serveAll(t, hdrs, func() { close(gate) })
		for i, s := range got {
			if want := "for " + hdrs[i].Get("Authorization"); s.body != want {
				t.Errorf("client %d: %q, want %q", i, s.body, want)
			}
		}
		if n := r.up["A"].Hits(); n != 3 {
			t.Errorf("A asked %d times, want 3: one per set of credentials", n)
		}
	})
}

// TestNotCoalesced: requests that must have a fetch of their own each get
// one, even while an identical one is in flight.
func TestNotCoalesced(t *testing.T) {
	for name, h := range map[string]http.Header{
		"range":    {"Range": {"bytes=0-3"}},
		"if-range": {"If-Range": {`"v1"`}},
	} {
		t.Run(name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newCoalescingRig(t)
				gate := make(chan struct{})
				r.up["A"].Script(gated(gate, testkit.Status(200, "jar")))
				r.serveAll(t, []http.Header{h, h, h}, func() { close(gate) })
				if n := r.up["A"].Hits(); n != 3 {
					t.Errorf("A asked %d times, want 3", n)
				}
			})
		})
	}
}

// TestCoalescedClientGoneBeforeAnswer: a client that joined and leaves
// while the shared decision is still under way gets the client-gone answer
// at once; the decision goes on for the others.
func TestCoalescedClientGoneBeforeAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newCoalescingRig(t)
		gate := make(chan struct{})
		r.up["A"].Script(gated(gate, testkit.Status(200, "jar")))
		others := r.startAll(t, make([]http.Header, 2))
		synctest.Wait()
		ctx, cancel := context.WithCancel(r.client)
		req := httptest.NewRequestWithContext(ctx, http.MethodGet, r.a.URL.String()+"/g/a.jar", nil)
		req.RequestURI = ""
		done := make(chan Result, 1)
		go func() {
			done <- r.chain.Serve(Request{Client: req, Addressed: r.a, Settings: Settings{Transport: r.tr}})
		}()
		synctest.Wait()
		cancel()
		if res := <-done; res.Kind != answer.Error {
			t.Errorf("the client that left: %s", res.Kind)
		}
		close(gate)
		for i, s := range others() {
			if s.body != "jar" {
				t.Errorf("client %d: %q", i, s.body)
			}
		}
		if n := r.up["A"].Hits(); n != 1 {
			t.Errorf("A asked %d times", n)
		}
	})
}

// TestNoCacheJoinsBeforeTheAnswer: requests that ask for no cached answer
// (what Maven's resolver sends on every request) share a fetch whose
// answer has not come yet: it is made after each of them was sent. That a
// no-cache request after the answer fetches for itself is
// coalesce.TestFreshJoinsOnlyBeforeTheAnswer.
func TestNoCacheJoinsBeforeTheAnswer(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newCoalescingRig(t)
		gate := make(chan struct{})
		r.up["A"].Script(gated(gate, testkit.Status(200, "jar")))
		h := http.Header{"Cache-Control": {"no-cache"}, "Pragma": {"no-cache"}}
		got := r.serveAll(t, []http.Header{h, h, h}, func() { close(gate) })
		for i, s := range got {
			if s.body != "jar" {
				t.Errorf("client %d: %q", i, s.body)
			}
		}
		if n := r.up["A"].Hits(); n != 1 {
			t.Errorf("A asked %d times, want once", n)
		}
	})
}
