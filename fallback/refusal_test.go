package fallback

import (
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime/debug"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nora-breaker/nora-breaker/answer"
	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/fallback/format"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// refusalRig is the coalescing rig with the loop rig's realm for A and its
// parent proxy for A and B, so every kind of refusal can be set up.
func refusalRig(t *testing.T) *loopRig {
	t.Helper()
	r := newCoalescingRig(t)
	r.chain.o.Formats = format.Set{"maven": loopFormat{Plain: format.Plain{FinalNotFound: true},
		realms: map[string]string{r.a.Key: realmKey}}}
	return r
}

// refusalRequest is the rig's client GET for /g/a.jar.
func (r *loopRig) refusalRequest() Request {
	req := httptest.NewRequestWithContext(r.client, http.MethodGet, r.a.URL.String()+"/g/a.jar", nil)
	req.RequestURI = ""
	return Request{Client: req, Addressed: r.a, HostKey: r.a.Key, Rel: "/g/a.jar",
		Candidates: []*config.Upstream{r.b, r.c}, Settings: Settings{Transport: r.tr, ParentKey: parentOf}}
}

// refusalSeen is what a client and the breakers see of one refusal.
type refusalSeen struct {
	status     int
	kind       answer.Result
	coalesced  bool
	header     http.Header
	body       string
	steps      []string
	rejections map[string]uint64
}

func (r *loopRig) seen(t *testing.T, res Result) refusalSeen {
	t.Helper()
	body, err := io.ReadAll(res.Resp.Body)
	res.Resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	s := refusalSeen{status: res.Resp.StatusCode, kind: res.Kind, coalesced: res.Coalesced, header: http.Header{},
		body: string(body), steps: r.steps(res.Attempts), rejections: map[string]uint64{}}
	for _, k := range []string{"Retry-After", "X-Nora-Breaker-Key", "X-Nora-Breaker-State", "Content-Type",
		"Content-Length"} {
		s.header[k] = res.Resp.Header[k]
	}
	for _, b := range r.set.Snapshot() {
		s.rejections[r.names[b.Key]] = b.Rejections
	}
	return s
}

// sameRefusal fails t unless got (named g) and want (named w) showed their
// client and the breakers the same: status, kind, body, attempts, headers
// and the rejections each breaker counted.
func sameRefusal(t *testing.T, g string, got refusalSeen, w string, want refusalSeen) {
	t.Helper()
	if got.status != want.status || got.kind != want.kind || got.body != want.body ||
		!slices.Equal(got.steps, want.steps) {
		t.Errorf("%s: %d %s %q %v\n%s: %d %s %q %v", g, got.status, got.kind, got.body, got.steps,
			w, want.status, want.kind, want.body, want.steps)
	}
	for k, v := range want.header {
		if !slices.Equal(got.header[k], v) {
			t.Errorf("%s: %s %q, %s %q", k, g, got.header[k], w, v)
		}
	}
	for k, v := range want.rejections {
		if got.rejections[k] != v {
			t.Errorf("rejections at %s: %s %d, %s %d", k, g, got.rejections[k], w, v)
		}
	}
}

// TestRefusalAloneAnswersAsTheSharedDecision: a GET that can only be
// refused is decided on its own (refusal.go), and its client and the
// breakers see exactly what the shared decision would have shown them:
// the same status, headers, body and attempts, one rejection counted at
// each breaker that refused it. Each case runs twice on rigs set up
// alike, once through Serve and once through the shared decision itself.
func TestRefusalAloneAnswersAsTheSharedDecision(t *testing.T) {
	for _, c := range []struct {
		name  string
		setup func(*testing.T, *loopRig)
		kind  answer.Result
	}{
		{"every breaker open", forceOpen("A", "B", "C"), answer.Synthesized503},
		{"addressed throttled, candidates open", all(throttled("A"), forceOpen("B", "C")), answer.Throttled},
		{"token realm open, candidates open", forceOpen("R", "B", "C"), answer.Synthesized503},
		{"parent open, the direct candidate open", forceOpen("P", "C"), answer.Synthesized503},
		{"opened by failures, probe not due", all(opened("A"), forceOpen("B", "C")), answer.Synthesized503},
	} {
		t.Run(c.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				alone := refusalRig(t)
				c.setup(t, alone)
				got := alone.seen(t, alone.chain.Serve(alone.refusalRequest()))

				shared := refusalRig(t)
				c.setup(t, shared)
				req := shared.refusalRequest()
				fm := shared.chain.o.Formats.Of("maven")
				key, sk, ok := shared.chain.joinKey(req, fm, knownStaleKey{})
				if !ok {
					t.Fatal("the request may not share a decision")
				}
				want := shared.seen(t, shared.chain.serveJoined(req, fm, sk, key))

				if got.kind != c.kind || got.coalesced {
					t.Fatalf("decided alone: %s (coalesced %v), want %s", got.kind, got.coalesced, c.kind)
				}
				sameRefusal(t, "alone", got, "shared", want)
				if k, _, _ := alone.chain.joinKey(alone.refusalRequest(), fm, knownStaleKey{}); alone.chain.joins.Deciding(alone.a, k) {
					t.Error("a refusal decided alone left a fetch in flight")
				}
			})
		})
	}
}

// TestRefusalOfAGetThatCannotShareAnswersAsDecidedAlone: a GET the stale
// cache must not key (credentials under stale_authenticated = off) never
// shares a decision; the refusal pass refuses it with exactly what the
// loop deciding it alone gives: status, headers, body, attempts and one
// rejection at each breaker that refused.
func TestRefusalOfAGetThatCannotShareAnswersAsDecidedAlone(t *testing.T) {
	request := func(r *loopRig) Request {
		req := r.refusalRequest()
		req.Client.Header.Set("Authorization", "Bearer secret")
		req.Settings.StaleMode = "off"
		return req
	}
	synctest.Test(t, func(t *testing.T) {
		pass, loop := refusalRig(t), refusalRig(t)
		for _, r := range []*loopRig{pass, loop} {
			forceOpen("A", "B", "C")(t, r)
		}
		fm := loop.chain.o.Formats.Of("maven")
		if _, _, ok := loop.chain.joinKey(request(loop), fm, knownStaleKey{}); ok {
			t.Fatal("the request may share a decision")
		}
		var sk knownStaleKey
		res, refused := pass.chain.refuseAlone(request(pass), fm, &sk)
		if !refused {
			t.Fatal("the refusal pass did not refuse it")
		}
		got, want := pass.seen(t, res), loop.seen(t, loop.chain.decide(request(loop), fm, knownStaleKey{}))
		if got.kind != answer.Synthesized503 {
			t.Errorf("the pass answered %s, want %s", got.kind, answer.Synthesized503)
		}
		sameRefusal(t, "pass", got, "loop", want)
		for _, k := range []string{"A", "B", "C"} {
			if got.rejections[k] != 1 {
				t.Errorf("rejections at %s: %d, want 1", k, got.rejections[k])
			}
		}
	})
}

// opened opens the named upstream's breaker by failures, so its probe
// falls due after the reset timeout (30 s).
func opened(name string) func(*testing.T, *loopRig) {
	return func(t *testing.T, r *loopRig) {
		for range 3 {
			tk, err := r.set.Admit(r.keyOf(name))
			if err != nil {
				t.Fatal(err)
			}
			tk.Done(breakerstate.Failure)
		}
	}
}

// TestRefusalJoinsAProbeInFlight: while A's half-open probe is out and
// every candidate refuses, identical GETs are not refused on their own:
// they wait for the probe and get its answer (docs/behaviour.md §5.9), and
// A is asked once.
func TestRefusalJoinsAProbeInFlight(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := refusalRig(t)
		opened("A")(t, r)
		forceOpen("B", "C")(t, r)
		time.Sleep(30 * time.Second) // A's probe falls due
		gate := make(chan struct{})
		r.up["A"].Script(gated(gate, testkit.Status(200, "from A's probe")))
		probe := r.startAll(t, make([]http.Header, 1))
		synctest.Wait() // the probe is out, held by A
		if st := r.snapshot(t, r.a.Key).State; st != breakerstate.HalfOpen {
			t.Fatalf("A is %v with its probe out, want half-open", st)
		}
		joiners := r.startAll(t, make([]http.Header, 9))
		synctest.Wait() // each has joined the probe's fetch or been refused
		close(gate)
		for i, s := range append(probe(), joiners()...) {
			if s.res.Resp.StatusCode != 200 || s.body != "from A's probe" {
				t.Errorf("client %d: %d %s %q, want the probe's answer", i, s.res.Resp.StatusCode, s.res.Kind, s.body)
			}
		}
		if n := r.up["A"].Hits(); n != 1 {
			t.Errorf("A asked %d times, want once", n)
		}
	})
}

// TestRefusalWithAStaleCopyIsShared: a GET whose upstreams all refuse but
// that has a stale copy is not a refusal: every client gets the copy. The
// look for a copy before the refusal opens no body of its own: the files
// the process holds are as many after the clients have read their copies
// as before (the collector is off, so no finalizer closes a file left
// open).
func TestRefusalWithAStaleCopyIsShared(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := refusalRig(t)
		keptCopy("the kept copy")(t, r)
		forceOpen("A", "B", "C")(t, r)
		defer debug.SetGCPercent(debug.SetGCPercent(-1))
		before := openFiles(t)
		for i, s := range r.startAll(t, make([]http.Header, 5))() {
			if s.res.Kind != answer.Stale || s.body != "the kept copy" {
				t.Errorf("client %d: %s %q, want the stale copy", i, s.res.Kind, s.body)
			}
		}
		synctest.Wait()
		if after := openFiles(t); after != before {
			t.Errorf("%d files open after serving the copies, %d before", after, before)
		}
	})
}

// openFiles is how many file descriptors the process holds.
func openFiles(t *testing.T) int {
	t.Helper()
	fds, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("cannot count open files: %v", err)
	}
	return len(fds)
}

// TestRefusalsAsAProbeFallsDue: many identical GETs arriving, from many
// goroutines, as A's probe falls due while every candidate refuses:
// exactly one reaches A, and every client gets either A's answer (it
// took the probe or waited for it) or a 503 decided before the probe was
// due, never a 503 while the probe was out. Run with -race.
func TestRefusalsAsAProbeFallsDue(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := refusalRig(t)
		opened("A")(t, r)
		forceOpen("B", "C")(t, r)
		gate := make(chan struct{})
		r.up["A"].Script(gated(gate, testkit.Status(200, "from A's probe")))
		const clients = 64
		var (
			mu      sync.Mutex
			refused int
			probed  []served
		)
		var wg sync.WaitGroup
		for i := range clients {
			wg.Go(func() {
				// Half arrive just before the probe is due, half as it falls due.
				time.Sleep(30*time.Second - time.Duration(i%2)*time.Millisecond)
				res := r.chain.Serve(r.refusalRequest())
				b, _ := io.ReadAll(res.Resp.Body)
				res.Resp.Body.Close()
				mu.Lock()
				defer mu.Unlock()
				if res.Resp.StatusCode == http.StatusServiceUnavailable {
					refused++
					return
				}
				probed = append(probed, served{res: res, body: string(b)})
			})
		}
		time.Sleep(30 * time.Second) // every client has asked
		synctest.Wait()
		mu.Lock()
		early := refused
		mu.Unlock()
		close(gate)
		wg.Wait()
		if n := r.up["A"].Hits(); n != 1 {
			t.Fatalf("A asked %d times, want exactly once", n)
		}
		if refused != early || refused != clients/2 {
			t.Errorf("%d refused (%d before the probe answered), want the %d that came before it was due",
				refused, early, clients/2)
		}
		for i, s := range probed {
			if s.res.Resp.StatusCode != 200 || !strings.Contains(s.body, "probe") {
				t.Errorf("client %d: %d %q", i, s.res.Resp.StatusCode, s.body)
			}
		}
	})
}

// TestRefusalPassOfAHealthyGetAllocatesNothing: the pass runs before every
// GET that may share a decision, so for one whose addressed upstream's
// breaker admits it, it ends at once and allocates nothing (its search
// stays on the stack, refusal.go).
func TestRefusalPassOfAHealthyGetAllocatesNothing(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		r := refusalRig(t)
		req := r.refusalRequest()
		fm := r.chain.o.Formats.Of("maven")
		var sk knownStaleKey
		if _, refused := r.chain.refuseAlone(req, fm, &sk); refused {
			t.Fatal("a GET to a closed breaker was refused")
		}
		if n := testing.AllocsPerRun(100, func() { r.chain.refuseAlone(req, fm, &sk) }); n != 0 {
			t.Errorf("the pass allocated %v times per healthy GET, want 0", n)
		}
	})
}
