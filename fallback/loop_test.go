package fallback

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"slices"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/answer"
	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/fallback/format"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
	"github.com/nora-breaker/nora-breaker/stale"
	"github.com/nora-breaker/nora-breaker/throttle"
)

// The loop's table test. Each case runs in a testing/synctest bubble: the
// upstreams are in-memory handlers (testkit.Transport), and every clock the
// loop reads (the breakers', the throttles', the search deadline's and the
// attempts' header timers) is the bubble's time.Now, so a case that waits
// takes exactly the fake time it should and none of the real.

// realmKey is the breaker key of a host the test format says A needs.
const realmKey = "realm:http://auth.test"

// parentKey is the breaker key of the parent proxy A and B are reached
// through (C is reached directly).
const parentKey = "parent:http://corp-proxy.test:3128"

// parentOf is the loop's Settings.ParentKey for the rig's upstreams.
func parentOf(u *url.URL) string {
	if u.Host == "a.test" || u.Host == "b.test" {
		return parentKey
	}
	return ""
}

// loopFormat is format.Plain with a realm for A and a choice of whether
// another upstream's 404 is final.
type loopFormat struct {
	format.Plain
	realms map[string]string // upstream key → realm key
}

func (f loopFormat) Realm(u *config.Upstream) string { return f.realms[u.Key] }

// loopRig is one case's chain over A (addressed), B and C (its candidates).
type loopRig struct {
	chain     *Chain
	set       *breakerstate.Set
	throttles *throttle.Table
	stale     *stale.Cache
	tr        testkit.Transport
	a, b, c   *config.Upstream
	up        map[string]*testkit.Upstream // by name: A, B, C
	names     map[string]string            // breaker key → name
	reg       *prometheus.Registry
	// client is the client's context; cancel makes the client leave.
	client context.Context
	cancel context.CancelFunc
}

func newLoopRig(t *testing.T, final404 bool, deadline time.Duration) *loopRig {
	t.Helper()
	r := &loopRig{up: map[string]*testkit.Upstream{}, tr: testkit.Transport{}, names: map[string]string{}}
	ctx, cancel := context.WithCancel(context.Background())
	r.setClient(t, ctx, cancel)
	for _, n := range []string{"A", "B", "C"} {
		host := strings.ToLower(n) + ".test"
		r.up[n] = testkit.NewUpstream(func(w http.ResponseWriter, req *http.Request) {
			t.Errorf("%s was asked for %s but should not have been", n, req.URL.Path)
			w.WriteHeader(http.StatusTeapot)
		})
		r.tr[host] = r.up[n]
	}
	r.a = testkit.ConfigUpstream(t, "maven", "http://a.test/repo")
	r.b = testkit.ConfigUpstream(t, "maven", "http://b.test/mirror")
	r.c = testkit.ConfigUpstream(t, "maven", "http://c.test/mirror")
	r.names[r.a.Key], r.names[r.b.Key], r.names[r.c.Key], r.names[realmKey] = "A", "B", "C", "R"
	r.names[parentKey] = "P"
	reg := prometheus.NewRegistry()
	r.reg = reg
	var ks []breakerstate.KeySettings
	for _, k := range []string{r.a.Key, r.b.Key, r.c.Key, realmKey, parentKey} {
		ks = append(ks, breakerstate.KeySettings{Key: k, Format: "maven", FailureThreshold: 3,
			ResetTimeout: 30 * time.Second})
	}
	var err error
	if r.set, err = breakerstate.New(breakerstate.Options{Enabled: true, Keys: ks, Now: time.Now,
		Registerer: reg}); err != nil {
		t.Fatal(err)
	}
	sender, err := attempt.NewSender(time.Now, reg)
	if err != nil {
		t.Fatal(err)
	}
	if r.throttles, err = throttle.New(time.Now, nil, reg); err != nil {
		t.Fatal(err)
	}
	if r.stale, err = stale.Open(stale.Options{Dir: t.TempDir(), MaxBytes: 1 << 20, MaxObjectBytes: 1 << 20,
		Now: time.Now, Registerer: reg, Logger: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { r.stale.Close() })
	fm := loopFormat{Plain: format.Plain{FinalNotFound: final404}, realms: map[string]string{r.a.Key: realmKey}}
	if r.chain, err = New(Options{Breakers: r.set, Sender: sender, Formats: format.Set{"maven": fm},
		Stale: r.stale, Throttles: r.throttles, Deadline: deadline, Now: time.Now, Registerer: reg,
		Logger: zerolog.Nop()}); err != nil {
		t.Fatal(err)
	}
	return r
}

// serve sends the client's request for /g/a.jar through the loop and
// returns its answer with the body read, and how long the loop took.
func (r *loopRig) serve(t *testing.T, method string) (Result, string, time.Duration) {
	t.Helper()
	req := httptest.NewRequestWithContext(r.client, method, r.a.URL.String()+"/g/a.jar", nil)
	req.RequestURI = ""
	start := time.Now()
	res := r.chain.Serve(Request{Client: req, Addressed: r.a, Rel: "/g/a.jar",
		Candidates: []*config.Upstream{r.b, r.c}, Settings: Settings{Transport: r.tr, ParentKey: parentOf}})
	took := time.Since(start)
	body, _ := io.ReadAll(res.Resp.Body)
	res.Resp.Body.Close()
	return res, string(body), took
}

// steps names each attempt: who ("A", or "R" for a realm), "hedge" for a
// hedge's, then why it was skipped, or its verdict and status ("timeout",
// "search bound", "given up" or "error" when it got none; "+" when its body
// still had the last word).
func (r *loopRig) steps(as Attempts) []string {
	var out []string
	for _, a := range as {
		s := r.names[a.Key] + " "
		if a.Hedge {
			s += "hedge "
		}
		switch {
		case a.Skipped == SkipRealm, a.Skipped == SkipParent:
			s += "skipped " + string(a.Skipped) + " " + r.names[a.Realm]
		case a.Skipped != "":
			s += "skipped " + string(a.Skipped)
		case strings.Contains(a.Error, attempt.ErrHeaderTimeout.Error()):
			s += a.Verdict.String() + " timeout"
		case strings.Contains(a.Error, errSearchBound.Error()):
			s += a.Verdict.String() + " search bound"
		case strings.Contains(a.Error, attempt.ErrCancelled.Error()):
			s += a.Verdict.String() + " given up"
		case a.Error != "":
			s += a.Verdict.String() + " error"
		default:
			s += fmt.Sprintf("%s %d", a.Verdict, a.Status)
		}
		if a.Pending {
			s += "+"
		}
		out = append(out, s)
	}
	return out
}

// retryAfter answers 429, asking to be left alone for 30 s.
func retryAfter(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Retry-After", "30")
	w.WriteHeader(http.StatusTooManyRequests)
}

func TestLoop(t *testing.T) {
	ok := testkit.Status(200, "from B")
	tests := []struct {
		name     string
		method   string // "" is GET
		final404 bool   // the format's NotFoundIsFinal
		deadline time.Duration
		a, b, c  []http.HandlerFunc // nil: must not be asked
		setup    func(t *testing.T, r *loopRig)
		// want is the status, how the request was answered, who served
		// (A, B, C or ""), the body (when not ""), the steps, and how much
		// of the bubble's time the loop took.
		wantStatus int
		wantKind   answer.Result
		wantBy     string
		wantBody   string
		wantSteps  []string
		wantTook   time.Duration
		// wantKey names whose key a synthesized answer carries ("": not
		// checked).
		wantKey string
	}{
		{name: "addressed ok", a: h(testkit.Status(200, "from A")),
			wantStatus: 200, wantKind: answer.Forwarded, wantBy: "A", wantBody: "from A",
			wantSteps: []string{"A success 200+"}},
		{name: "5xx then candidate", a: h(testkit.Status(502, "A is broken")), b: h(ok),
			wantStatus: 200, wantKind: answer.Fallback, wantBy: "B", wantBody: "from B",
			wantSteps: []string{"A failure 502", "B success 200+"}},
		{name: "refused", b: h(ok), setup: forceOpen("A"),
			wantStatus: 200, wantKind: answer.Fallback, wantBy: "B",
			wantSteps: []string{"A skipped breaker", "B success 200+"}},
		{name: "throttled", b: h(ok), setup: throttled("A"),
			wantStatus: 200, wantKind: answer.Fallback, wantBy: "B",
			wantSteps: []string{"A skipped throttled", "B success 200+"}},
		{name: "realm refused", b: h(ok), setup: forceOpen("R"),
			wantStatus: 200, wantKind: answer.Fallback, wantBy: "B",
			wantSteps: []string{"A skipped realm R", "B success 200+"}},
		// The parent A and B are reached through is down: neither is
		// asked nor has its own breaker asked; C, reached directly, serves.
		{name: "parent refused", c: h(testkit.Status(200, "from C")), setup: forceOpen("P"),
			wantStatus: 200, wantKind: answer.Fallback, wantBy: "C", wantBody: "from C",
			wantSteps: []string{"A skipped parent P", "B skipped parent P", "C success 200+"}},
		{name: "parent refused, no way left", setup: forceOpen("P", "C"),
			wantStatus: 503, wantKind: answer.Synthesized503, wantKey: "P",
			wantSteps: []string{"A skipped parent P", "B skipped parent P", "C skipped breaker"}},
		{name: "parent refused, stale", setup: all(keptCopy("the kept copy"), forceOpen("P", "C")),
			wantStatus: 200, wantKind: answer.Stale, wantBody: "the kept copy",
			wantSteps: []string{"A skipped parent P", "B skipped parent P", "C skipped breaker"}},
		{name: "5xx candidate moves on", a: h(testkit.Status(502, "")), b: h(testkit.Status(500, "")),
			c:          h(testkit.Status(200, "from C")),
			wantStatus: 200, wantKind: answer.Fallback, wantBy: "C", wantBody: "from C",
			wantSteps: []string{"A failure 502", "B failure 500", "C success 200+"}},
		// B is waited on for the 1 s left of the search, not its 5 s
		// proxy_timeout: the proxy gives it up, neutral (§5.1). C is not
		// asked once the deadline has passed, and A's own 502 is the
		// answer.
		{name: "deadline cut", deadline: time.Second, a: h(testkit.Status(502, "A is broken")),
			b:          h(testkit.Hang),
			wantStatus: 502, wantKind: answer.Forwarded, wantBy: "A", wantBody: "A is broken",
			wantSteps: []string{"A failure 502", "B neutral search bound"}, wantTook: time.Second},
		// With 8 s for the search, B's own 5 s proxy_timeout ends first
		// and is its failure; C gets the 3 s left, and is given up.
		{name: "proxy_timeout before the deadline", deadline: 8 * time.Second,
			a: h(testkit.Status(502, "A is broken")), b: h(testkit.Hang), c: h(testkit.Hang),
			wantStatus: 502, wantKind: answer.Forwarded, wantBy: "A", wantBody: "A is broken",
			wantSteps: []string{"A failure 502", "B failure timeout", "C neutral search bound"},
			wantTook:  8 * time.Second},
		// The client gives up after 2 s, while A (5 s to answer) is silent.
		{name: "client gone while addressed", a: h(testkit.Hang), setup: clientLeavesAfter(2 * time.Second),
			wantStatus: 502, wantKind: answer.Error, wantBody: "client went away",
			wantSteps: []string{"A neutral error"}, wantTook: 2 * time.Second},
		// The client leaves once A's 502 is on its way: no candidate is
		// asked for a client that is not there.
		{name: "client gone before candidate", a: h(func(w http.ResponseWriter, req *http.Request) {
			w.WriteHeader(502)
			w.(http.Flusher).Flush()
			leave(req)
		}),
			wantStatus: 502, wantKind: answer.Forwarded, wantBy: "A",
			wantSteps: []string{"A failure 502"}},
		{name: "stale", a: h(testkit.Status(502, "")), b: h(testkit.Status(404, "")),
			c: h(testkit.Status(404, "")), setup: keptCopy("the kept copy"),
			wantStatus: 200, wantKind: answer.Stale, wantBody: "the kept copy",
			wantSteps: []string{"A failure 502", "B alive 404", "C alive 404"}},
		{name: "terminal 404", final404: true, b: h(testkit.Status(404, "")), c: h(testkit.Status(410, "")),
			setup:      forceOpen("A"),
			wantStatus: 404, wantKind: answer.Synthesized404,
			wantSteps: []string{"A skipped breaker", "B alive 404", "C alive 410"}},
		{name: "404 not final", b: h(testkit.Status(404, "")), c: h(testkit.Status(404, "")),
			setup:      forceOpen("A"),
			wantStatus: 503, wantKind: answer.Synthesized503,
			wantSteps: []string{"A skipped breaker", "B alive 404", "C alive 404"}},
		{name: "terminal 503", setup: forceOpen("A", "B", "C"),
			wantStatus: 503, wantKind: answer.Synthesized503, wantKey: "A",
			wantSteps: []string{"A skipped breaker", "B skipped breaker", "C skipped breaker"}},
		// The throttled answer is maven's (these upstreams' format): a 503
		// with the time left (answer.TooManyRequests).
		{name: "terminal 429", b: h(testkit.Status(500, "")), c: h(testkit.Status(500, "")), setup: throttled("A"),
			wantStatus: 503, wantKind: answer.Throttled,
			wantSteps: []string{"A skipped throttled", "B failure 500", "C failure 500"}},
		{name: "addressed answers 429", a: h(retryAfter), b: h(testkit.Status(500, "")),
			c:          h(testkit.Status(500, "")),
			wantStatus: 503, wantKind: answer.Throttled,
			wantSteps: []string{"A alive 429", "B failure 500", "C failure 500"}},
		{name: "addressed 5xx replayed", a: h(testkit.Status(502, "A is broken")), b: h(testkit.Status(500, "")),
			c:          h(testkit.Status(503, "")),
			wantStatus: 502, wantKind: answer.Forwarded, wantBy: "A", wantBody: "A is broken",
			wantSteps: []string{"A failure 502", "B failure 500", "C failure 503"}},
		{name: "addressed connection error", a: h(testkit.HangUp), b: h(testkit.Status(500, "")),
			c:          h(testkit.Status(500, "")),
			wantStatus: 502, wantKind: answer.Error,
			wantSteps: []string{"A failure error", "B failure 500", "C failure 500"}},
		// Nor answered from a stale copy: the one kept is a GET's.
		{name: "POST is never substituted", method: http.MethodPost,
			setup:      all(keptCopy("the GET's copy"), forceOpen("A")),
			wantStatus: 503, wantKind: answer.Synthesized503,
			wantSteps: []string{"A skipped breaker"}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newLoopRig(t, tc.final404, tc.deadline)
				if tc.setup != nil {
					tc.setup(t, r)
				}
				r.script(tc.a, tc.b, tc.c)
				method := cmp.Or(tc.method, http.MethodGet)
				res, body, took := r.serve(t, method)
				if res.Resp.StatusCode != tc.wantStatus || res.Kind != tc.wantKind {
					t.Errorf("got %d %s, want %d %s", res.Resp.StatusCode, res.Kind, tc.wantStatus, tc.wantKind)
				}
				if by := r.names[res.ServedBy]; by != tc.wantBy {
					t.Errorf("served by %q, want %q", by, tc.wantBy)
				}
				if tc.wantBody != "" && !strings.Contains(body, tc.wantBody) {
					t.Errorf("body %q, want %q", body, tc.wantBody)
				}
				if got := r.steps(res.Attempts); !slices.Equal(got, tc.wantSteps) {
					t.Errorf("steps %q, want %q", got, tc.wantSteps)
				}
				if took != tc.wantTook {
					t.Errorf("took %v of the bubble's time, want %v", took, tc.wantTook)
				}
				if got := r.names[res.Resp.Header.Get("X-Nora-Breaker-Key")]; tc.wantKey != "" && got != tc.wantKey {
					t.Errorf("X-Nora-Breaker-Key names %q, want %q", got, tc.wantKey)
				}
				if strings.HasPrefix(tc.name, "parent refused") {
					for _, n := range []string{"A", "B"} {
						if b := r.snapshot(t, r.keyOf(n)); b.FailureCount != 0 || b.Rejections != 0 || b.State != breakerstate.Closed {
							t.Errorf("%s's breaker moved while its parent refused: %+v", n, b)
						}
					}
				}
			})
		})
	}
}

// all runs each setup in turn.
func all(setups ...func(*testing.T, *loopRig)) func(*testing.T, *loopRig) {
	return func(t *testing.T, r *loopRig) {
		for _, s := range setups {
			s(t, r)
		}
	}
}

// h is a script of answers.
func h(answers ...http.HandlerFunc) []http.HandlerFunc { return answers }

// forceOpen opens the breakers of the named upstreams (R: the realm's).
func forceOpen(names ...string) func(*testing.T, *loopRig) {
	return func(t *testing.T, r *loopRig) {
		for _, n := range names {
			if err := r.set.Force(r.keyOf(n), breakerstate.ModeOpen); err != nil {
				t.Fatal(err)
			}
		}
	}
}

// throttled marks the named upstream's host as having asked for 30 s of
// peace.
func throttled(name string) func(*testing.T, *loopRig) {
	return func(_ *testing.T, r *loopRig) { r.throttles.Mark(r.keyOf(name), time.Now().Add(30*time.Second)) }
}

// clientLeavesAfter makes the client give up d after the request starts.
func clientLeavesAfter(d time.Duration) func(*testing.T, *loopRig) {
	return func(t *testing.T, r *loopRig) {
		ctx, cancel := context.WithTimeout(context.Background(), d)
		r.setClient(t, ctx, cancel)
	}
}

// setClient makes ctx the client's context, carrying cancel for leave.
func (r *loopRig) setClient(t *testing.T, ctx context.Context, cancel context.CancelFunc) {
	t.Cleanup(cancel)
	r.client, r.cancel = context.WithValue(ctx, leaveKey{}, cancel), cancel
}

// leaveKey carries, in the client's context, how it leaves, so an upstream
// handler can make the client go away at a chosen moment.
type leaveKey struct{}

// leave makes the client of req go away.
func leave(req *http.Request) { req.Context().Value(leaveKey{}).(context.CancelFunc)() }

// keptCopy serves the request once through a healthy A, so the stale
// cache keeps body; the case's own request then meets its script.
func keptCopy(body string) func(*testing.T, *loopRig) {
	return func(t *testing.T, r *loopRig) {
		r.up["A"].Script(testkit.Status(200, body))
		res, got, _ := r.serve(t, http.MethodGet)
		if res.Kind != answer.Forwarded || got != body {
			t.Fatalf("priming the stale copy: %s %q", res.Kind, got)
		}
		synctest.Wait() // the copy is committed in the background
	}
}

// keyOf is the breaker key of a named upstream.
// snapshot is key's breaker as the set shows it.
func (r *loopRig) snapshot(t *testing.T, key string) breakerstate.Snapshot {
	t.Helper()
	for _, b := range r.set.Snapshot() {
		if b.Key == key {
			return b
		}
	}
	t.Fatalf("no breaker %s", key)
	return breakerstate.Snapshot{}
}

func (r *loopRig) keyOf(name string) string {
	for k, n := range r.names {
		if n == name {
			return k
		}
	}
	return ""
}

// retryFormat sends a candidate's request a second time when the first
// answer is 401, as docker does with a token, after between has run.
type retryFormat struct {
	format.Plain
	between func()
}

func (f retryFormat) Send(c format.Candidate) (*http.Response, error) {
	resp, err := c.Call.Send(c.Call.Request())
	if err != nil || resp.StatusCode != http.StatusUnauthorized {
		return resp, err
	}
	format.DrainClose(resp.Body)
	f.between()
	return c.Call.Send(c.Call.Request())
}

// TestLoopRetryIsAnAttemptOfItsOwn: a format's second send at a candidate
// is admitted by the candidate's breaker anew, and listed on its own.
func TestLoopRetryIsAnAttemptOfItsOwn(t *testing.T) {
	for _, tc := range []struct {
		name      string
		openFirst bool // B's breaker opens between the two sends
		wantSteps []string
		wantKind  answer.Result
	}{
		{"retry admitted", false, []string{"A failure 502", "B alive 401", "B success 200+"}, answer.Fallback},
		{"retry refused", true, []string{"A failure 502", "B alive 401", "B skipped breaker", "C success 200+"},
			answer.Fallback},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newLoopRig(t, false, 0)
				fm := retryFormat{between: func() {
					if tc.openFirst {
						forceOpen("B")(t, r)
					}
				}}
				r.chain.o.Formats = format.Set{"maven": fm}
				r.up["A"].Script(testkit.Status(502, ""))
				r.up["B"].Script(testkit.Status(401, ""), testkit.Status(200, "from B"))
				r.up["C"].Script(testkit.Status(200, "from C"))
				res, _, _ := r.serve(t, http.MethodGet)
				if got := r.steps(res.Attempts); res.Kind != tc.wantKind || !slices.Equal(got, tc.wantSteps) {
					t.Errorf("%s, steps %q; want %s, %q", res.Kind, got, tc.wantKind, tc.wantSteps)
				}
			})
		})
	}
}

// quietFormat sends nothing at all to the candidate quiet names.
type quietFormat struct {
	format.Plain
	quiet *string // a breaker key, or ""
}

func (f quietFormat) Send(c format.Candidate) (*http.Response, error) {
	if c.Upstream.Key == *f.quiet {
		return nil, errors.New("sent nothing")
	}
	return f.Plain.Send(c)
}

// TestLoopUnusedAdmissionIsGivenBack: a format that sends nothing at a
// half-open candidate leaves its probe slot free for the next request.
func TestLoopUnusedAdmissionIsGivenBack(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := newLoopRig(t, false, 0)
		quiet := r.b.Key
		r.chain.o.Formats = format.Set{"maven": quietFormat{quiet: &quiet}}
		forceOpen("A")(t, r)
		for range 3 {
			tk, err := r.set.Admit(r.b.Key)
			if err != nil {
				t.Fatal(err)
			}
			tk.Done(breakerstate.Failure)
		}
		time.Sleep(30 * time.Second) // B's reset timeout: its next admission is the probe
		r.up["C"].Script(testkit.Status(200, "from C"))
		if res, _, _ := r.serve(t, http.MethodGet); r.names[res.ServedBy] != "C" {
			t.Fatalf("with B quiet, served by %q, want C", r.names[res.ServedBy])
		}
		quiet = ""
		r.up["B"].Script(testkit.Status(200, "from B"))
		res, _, _ := r.serve(t, http.MethodGet)
		if got := r.steps(res.Attempts); r.names[res.ServedBy] != "B" {
			t.Errorf("next request served by %q (steps %q), want B's probe", r.names[res.ServedBy], got)
		}
	})
}

// presentFormat reports every answer it presents storable or not, as a
// format that could (PyPI: a page rewritten) or could not (a page in an
// encoding it cannot read) make a candidate's answer right for the client.
type presentFormat struct {
	format.Plain
	storable bool
}

func (f presentFormat) Present(*http.Request, *http.Response, string) bool { return f.storable }

// TestLoopUnstorableAnswerKeepsTheCopy: a candidate's answer its format
// could not make right is served, but never replaces the copy kept from
// the addressed upstream; one it could make right does replace it.
func TestLoopUnstorableAnswerKeepsTheCopy(t *testing.T) {
	for _, tc := range []struct {
		storable  bool
		wantStale string
	}{{true, "from B"}, {false, "the kept copy"}} {
		t.Run(fmt.Sprintf("storable=%v", tc.storable), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newLoopRig(t, false, 0)
				r.chain.o.Formats = format.Set{"maven": presentFormat{storable: tc.storable}}
				keptCopy("the kept copy")(t, r)
				time.Sleep(31 * time.Second) // past the cache's refresh age: a new answer may replace the copy
				r.up["A"].Script(testkit.Status(502, ""))
				r.up["B"].Script(testkit.Status(200, "from B"))
				if res, body, _ := r.serve(t, http.MethodGet); res.Kind != answer.Fallback || body != "from B" {
					t.Fatalf("B's answer: %s %q", res.Kind, body)
				}
				synctest.Wait() // a copy of B's answer, if kept, is committed
				r.up["A"].Script(testkit.Status(502, ""))
				r.up["B"].Script(testkit.Status(502, ""))
				r.up["C"].Script(testkit.Status(502, ""))
				if res, body, _ := r.serve(t, http.MethodGet); res.Kind != answer.Stale || body != tc.wantStale {
					t.Fatalf("everything down: %s %q, want the stale %q", res.Kind, body, tc.wantStale)
				}
			})
		})
	}
}

// servingFormat lets only the candidates it names answer.
type servingFormat struct {
	format.Plain
	serving map[string]bool // breaker key → may answer
}

func (f servingFormat) MayAnswer(_ *http.Request, cand *config.Upstream) bool {
	return f.serving[cand.Key]
}

// TestLoopCandidateMayNotAnswer: a candidate its format says may not
// answer the request is skipped before its breaker is asked (B's forced
// open breaker is never consulted: its step says not_serving), and with
// none left the request gets a stale copy, else the terminal answer (A's
// own 502).
func TestLoopCandidateMayNotAnswer(t *testing.T) {
	for _, tc := range []struct {
		name       string
		setup      func(*testing.T, *loopRig)
		wantStatus int
		wantKind   answer.Result
		wantSteps  []string
	}{
		{name: "next candidate serves",
			wantStatus: 200, wantKind: answer.Fallback,
			wantSteps: []string{"A failure 502", "B skipped not_serving", "C success 200+"}},
		{name: "stale copy", setup: keptCopy("the kept copy"),
			wantStatus: 200, wantKind: answer.Stale,
			wantSteps: []string{"A failure 502", "B skipped not_serving", "C skipped not_serving"}},
		{name: "terminal answer", setup: forceOpen("B"),
			wantStatus: 502, wantKind: answer.Forwarded,
			wantSteps: []string{"A failure 502", "B skipped not_serving", "C skipped not_serving"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newLoopRig(t, true, 0)
				serving := map[string]bool{r.c.Key: tc.name == "next candidate serves"}
				r.chain.o.Formats = format.Set{"maven": servingFormat{serving: serving}}
				if tc.setup != nil {
					tc.setup(t, r)
				}
				r.up["A"].Script(testkit.Status(502, "A is broken"))
				if serving[r.c.Key] {
					r.up["C"].Script(testkit.Status(200, "from C"))
				}
				res, _, _ := r.serve(t, http.MethodGet)
				if got := r.steps(res.Attempts); res.Resp.StatusCode != tc.wantStatus || res.Kind != tc.wantKind ||
					!slices.Equal(got, tc.wantSteps) {
					t.Errorf("%d %s, steps %q; want %d %s, %q", res.Resp.StatusCode, res.Kind, got,
						tc.wantStatus, tc.wantKind, tc.wantSteps)
				}
			})
		})
	}
}

// TestLoopEquivalentHost: a request to one of A's equivalent hosts is A's
// registry under another name: it is asked first, under its own key; when
// it cannot serve, A at its URL is the first candidate; and while A's
// token realm refuses, the equivalent host counts as refused as A does.
func TestLoopEquivalentHost(t *testing.T) {
	for _, tc := range []struct {
		name      string
		setup     func(*testing.T, *loopRig)
		e, a, b   []http.HandlerFunc
		wantBy    string
		wantSteps []string
	}{
		{name: "served at its own name", e: h(testkit.Status(200, "from E")),
			wantBy: "E", wantSteps: []string{"E success 200+"}},
		{name: "down: the registry at its URL serves", e: h(testkit.Status(502, "")), a: h(testkit.Status(200, "from A")),
			wantBy: "A", wantSteps: []string{"E failure 502", "A success 200+"}},
		{name: "the registry's realm refuses", setup: forceOpen("R"), b: h(testkit.Status(200, "from B")),
			wantBy: "B", wantSteps: []string{"E skipped realm R", "A skipped realm R", "B success 200+"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newLoopRig(t, false, 0)
				eqKey := r.a.Key + "@e.test"
				r.names[eqKey] = "E"
				e := testkit.NewUpstream(func(w http.ResponseWriter, req *http.Request) {
					t.Errorf("E was asked for %s but should not have been", req.URL.Path)
				})
				r.tr["e.test"] = e
				if tc.setup != nil {
					tc.setup(t, r)
				}
				for up, script := range map[*testkit.Upstream][]http.HandlerFunc{e: tc.e, r.up["A"]: tc.a, r.up["B"]: tc.b} {
					if script != nil {
						up.Script(script...)
					}
				}
				req := httptest.NewRequestWithContext(r.client, http.MethodGet, "http://e.test/repo/g/a.jar", nil)
				req.RequestURI = ""
				res := r.chain.Serve(Request{Client: req, Addressed: r.a, HostKey: eqKey, Rel: "/g/a.jar",
					Candidates: []*config.Upstream{r.a, r.b, r.c}, Equivalent: true, Settings: Settings{Transport: r.tr}})
				res.Resp.Body.Close()
				by := r.names[res.ServedBy]
				if got := r.steps(res.Attempts); by != tc.wantBy || !slices.Equal(got, tc.wantSteps) {
					t.Errorf("served by %q, steps %q; want %q, %q", by, got, tc.wantBy, tc.wantSteps)
				}
			})
		})
	}
}

// unfitFormat says that every answer it presents could not be made right
// for the addressed URL when unfit is set (a page whose links it could not
// rewrite).
type unfitFormat struct {
	format.Plain
	unfit bool
}

func (f unfitFormat) Present(*http.Request, *http.Response, string) bool {
	return !f.unfit
}

// TestLoopKeepsNoUnfitAnswer: a candidate's answer that its format could
// not present correctly for the addressed URL is served (it is the best
// answer there is), but never replaces the good stale copy, which the next
// outage serves (issue 22.1). A fit answer does replace it.
func TestLoopKeepsNoUnfitAnswer(t *testing.T) {
	for _, tc := range []struct {
		name      string
		unfit     bool
		wantStale string
	}{
		{"unfit answer not kept", true, "the good copy"},
		{"fit answer replaces the copy", false, "from B"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newLoopRig(t, false, 0)
				r.chain.o.Formats = format.Set{"maven": unfitFormat{unfit: tc.unfit}}
				keptCopy("the good copy")(t, r)
				time.Sleep(time.Minute) // older than the refresh interval: an answer may replace it
				r.up["A"].Script(testkit.Status(502, ""), testkit.Status(502, ""))
				r.up["B"].Script(testkit.Status(200, "from B"), testkit.Status(500, ""))
				r.up["C"].Script(testkit.Status(500, ""))
				if res, body, _ := r.serve(t, http.MethodGet); res.Kind != answer.Fallback || body != "from B" {
					t.Fatalf("B's answer: %s %q, want it served", res.Kind, body)
				}
				synctest.Wait()
				res, body, _ := r.serve(t, http.MethodGet)
				if res.Kind != answer.Stale || body != tc.wantStale {
					t.Fatalf("everything down: %s %q, want the stale copy %q", res.Kind, body, tc.wantStale)
				}
			})
		})
	}
}

// script gives A, B and C their scripts; a nil one is left as it is.
func (r *loopRig) script(a, b, c []http.HandlerFunc) {
	for n, script := range map[string][]http.HandlerFunc{"A": a, "B": b, "C": c} {
		if script != nil {
			r.up[n].Script(script...)
		}
	}
}
