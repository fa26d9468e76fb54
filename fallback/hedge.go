package fallback

// The wait for the addressed upstream (docs/behaviour.md §5.10). A GET or
// HEAD that has somewhere else to go waits for the addressed upstream in a
// race: once its hedge wait passes without headers, the request is also
// sent to the next admitted candidate (the hedge), and whichever serves
// first is the client's answer; the other attempt is given up, neutral for
// its breaker. And when the addressed host's breaker opens while the
// attempt is silent (early opening, breakerstate/silent.go), the attempt is
// given up at once and the request goes on, to the hedge, the candidates or
// a stale copy. The race runs in the request's goroutine, which waits in
// the addressed attempt; the hedge wait's timer admits the hedge from its
// own goroutine while the request's is blocked, and the request's waits
// for that admission to be over before it touches the search again.

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/fallback/format"
)

// hedgeFloor is the shortest hedge wait a host's history can make. A hedge
// asks another registry (for docker, one that may count it against a rate
// limit), and a pause of a few hundred milliseconds on a host that answers
// (a collection, a busy machine, a cache miss at a CDN) is not the failure
// hedging is for; a quarter of a second is where a user begins to notice,
// and still a hundredth of a usual proxy_timeout (docs/behaviour.md §5.10).
const hedgeFloor = 250 * time.Millisecond

// errHandedOn gives up an attempt whose host's breaker opened while it was
// silent: the request goes on elsewhere.
var errHandedOn = fmt.Errorf("%w: its breaker opened while it waited, and the request went on", attempt.ErrCancelled)

// superseded gives up an attempt because key's attempt served first.
func superseded(key string) error {
	return fmt.Errorf("%w: %s answered first", attempt.ErrCancelled, key)
}

// How a race's wait for the addressed attempt ended; the first to claim
// it decides, so that nothing gives the attempt up once it came back.
const (
	racePending   int32 = iota
	raceAddressed       // the addressed attempt came back (whatever it got)
	raceHedge           // the hedge served before it came back
	raceHandedOn        // its breaker opened and the request went on
)

// race is the wait for the addressed upstream of a request that has
// somewhere else to go. nil is a request that has not: its methods then
// say nothing happened.
type race struct {
	ctx    context.Context         // the addressed attempt's
	cancel context.CancelCauseFunc // gives the addressed attempt up
	state  atomic.Int32
	// timer fires at the hedge wait (nil: no hedging) and armed is closed
	// once its callback is done with the search: from then on, hedge (nil:
	// none sent), skips (the candidates admission skipped on its way to
	// the hedge's) and next (the loop's index after the last candidate it
	// considered; 0: none) are the request goroutine's to read.
	timer   *time.Timer
	armed   chan struct{}
	hedge   *hedge
	hedging atomic.Bool // a hedge is in flight or served (read by onOpen)
	skips   Attempts
	next    int
	// load counts the request against its host's hedging budget, and
	// answers is how many answers the host had given when it was sent.
	load    *hostLoad
	answers uint64
}

// hedge is one hedge attempt: the candidate, its own context, and what it
// got (set before done is closed).
type hedge struct {
	u        *config.Upstream
	cancel   context.CancelCauseFunc
	done     chan struct{}
	resp     *http.Response
	err      error
	attempts Attempts
}

// sendAddressed makes the addressed attempt; a GET or HEAD with a
// candidate or a stale copy to go on to races it (see the file's comment).
func (s *search) sendAddressed(u *config.Upstream, t breakerstate.Ticket) (*http.Response, *race, error) {
	req := s.r.Client
	target := targetOf(u)
	target.Key = s.r.HostKey
	if !s.fm.Substitutable(req) || (len(s.r.Candidates) == 0 && s.c.o.Stale == nil) {
		resp, err := s.c.o.Sender.Send(s.r.Settings.Transport, req, target, t)
		return resp, nil, err
	}
	if s.c.o.Stale != nil {
		// onOpen runs on another goroutine and looks for a stale copy
		// under the request's key: the key is worked out here, on the
		// request's goroutine, so that onOpen only reads it.
		s.staleKey()
	}
	rc := &race{}
	rc.ctx, rc.cancel = context.WithCancelCause(req.Context())
	target.OnOpen = func() { s.onOpen(rc) }
	if wait := s.hedgeWait(u, t); wait > 0 {
		rc.load = s.c.hedges.of(s.r.HostKey)
		rc.load.waiting.Add(1)
		rc.answers = s.c.o.Sender.Answered(s.r.HostKey)
		rc.armed = make(chan struct{})
		rc.timer = time.AfterFunc(wait, func() { s.fireHedge(rc) })
	}
	resp, err := s.c.o.Sender.Send(s.r.Settings.Transport, req.WithContext(rc.ctx), target, t)
	rc.back()
	return resp, rc, err
}

// hedgeWait is how long the addressed attempt waits for headers before a
// hedge is sent: the upstream's hedge_after, or twice its host's recent
// tail when that is shorter (never below hedgeFloor); 0 for no hedge: off,
// nothing to hedge to, a request its format keeps from hedging (docker's
// ping), the half-open probe (its verdict is the breaker's
// to wait for) or a wait that proxy_timeout ends first.
func (s *search) hedgeWait(u *config.Upstream, t breakerstate.Ticket) time.Duration {
	if u.HedgeAfter <= 0 || len(s.r.Candidates) == 0 || t.Probe() || !s.fm.Hedgeable(s.r.Client) {
		return 0
	}
	wait := u.HedgeAfter
	if tail, ok := s.c.o.Sender.HeaderTail(s.r.HostKey); ok {
		wait = min(wait, max(2*tail, hedgeFloor))
	}
	if u.ProxyTimeout > 0 && wait >= u.ProxyTimeout {
		return 0
	}
	return wait
}

// back records that the addressed attempt came back: from now on nothing
// gives it up, its timer is stopped, and if the timer's callback has begun
// the request waits until it is done with the search.
func (rc *race) back() {
	rc.state.CompareAndSwap(racePending, raceAddressed)
	if rc.timer == nil {
		return
	}
	if !rc.timer.Stop() {
		<-rc.armed
	}
	rc.load.waiting.Add(-1)
}

// ended says how the wait ended (raceAddressed for a request without a
// race).
func (rc *race) ended() int32 {
	if rc == nil {
		return raceAddressed
	}
	return rc.state.Load()
}

// onOpen is the addressed attempt's OnOpen: its host's breaker opened while
// it was silent. The attempt is given up when the request has somewhere
// else to go; otherwise it goes on waiting, since its upstream may still
// answer. It runs on whichever goroutine opened the breaker and reads only
// what no other goroutine writes.
func (s *search) onOpen(rc *race) {
	if (rc.hedging.Load() || s.elsewhere()) && rc.state.CompareAndSwap(racePending, raceHandedOn) {
		rc.cancel(errHandedOn)
	}
}

// elsewhere reports whether the request could be answered without the
// addressed upstream: a candidate that may answer it and is neither
// refused nor throttled, or a stale copy.
func (s *search) elsewhere() bool {
	for _, c := range s.r.Candidates {
		if s.fm.MayAnswer(s.r.Client, c) && !s.c.o.Breakers.Refusing(c.Key) &&
			(s.c.o.Throttles == nil || s.c.o.Throttles.Left(c.Key) <= 0) {
			return true
		}
	}
	if s.c.o.Stale == nil {
		return false
	}
	key, ok := s.sk.key, s.sk.known && s.sk.ok // worked out by sendAddressed
	if !ok {
		return false
	}
	st := s.c.o.Stale
	return st.Has(key.Ref) || (key.OwnHead && s.r.Client.Method == http.MethodHead && st.Has(key.Ref.HeadRef()))
}

// fireHedge runs when the hedge wait has passed, on the timer's goroutine,
// while the request's goroutine waits in the addressed attempt or for
// armed: the hedge is admitted, armed closed, and the hedge sent. When it
// serves before the addressed attempt came back, that attempt is given up.
func (s *search) fireHedge(rc *race) {
	h, call, env := s.admitHedge(rc)
	close(rc.armed)
	if h == nil {
		return
	}
	h.resp, h.err = call.run(s.fm, env)
	h.attempts = call.attempts
	for i := range h.attempts {
		h.attempts[i].Hedge = true
	}
	rc.load.give()
	serves := h.err == nil && h.resp.StatusCode < 400
	if serves && rc.state.CompareAndSwap(racePending, raceHedge) {
		rc.cancel(superseded(h.u.Key))
	}
	if !serves {
		rc.hedging.Store(false) // no longer somewhere to go (onOpen)
	}
	close(h.done)
}

// admitHedge asks the budget, then admits the candidates in order until
// one is (the skipped ones listed in rc.skips), and prepares the hedge's
// call; nil when no hedge is sent. It is the only part of the hedge that
// touches the search, before armed is closed.
func (s *search) admitHedge(rc *race) (*hedge, *candidateCall, format.Env) {
	key := s.r.HostKey
	if rc.state.Load() != racePending {
		return nil, nil, format.Env{}
	}
	if !rc.load.take(s.c.o.Sender.Answered(key) == rc.answers) {
		s.c.hedgesOverBudget.WithLabelValues(key).Inc()
		return nil, nil, format.Env{}
	}
	n0 := len(s.attempts)
	defer func() {
		rc.skips = slices.Clone(s.attempts[n0:])
		s.attempts = s.attempts[:n0]
	}()
	for i := 1; i <= len(s.r.Candidates) && s.mayGoOn(); i++ {
		rc.next = i + 1
		u := s.upstream(i)
		t, ok := s.admit(i, u)
		if !ok {
			continue
		}
		ctx, cancel := context.WithCancelCause(s.r.Client.Context())
		h := &hedge{u: u, cancel: cancel, done: make(chan struct{})}
		rc.hedge = h
		rc.hedging.Store(true)
		s.c.hedgesSent.WithLabelValues(key).Inc()
		return h, s.callFor(u, t, s.r.Client.WithContext(ctx), nil), s.env()
	}
	rc.load.give()
	return nil, nil, format.Env{}
}

// settle ends the race of an addressed attempt whose own answer has been
// judged (res, done): the candidates the hedge's admission considered are
// not considered again, an answer that ends the loop drops the hedge, and a
// failure waits for it and judges it as the next candidate.
func (s *search) settle(rc *race, res Result, done bool) (Result, bool) {
	if rc == nil {
		return res, done
	}
	s.next = max(s.next, rc.next)
	if rc.hedge == nil {
		s.attempts = append(s.attempts, rc.skips...)
		res.Attempts = s.attempts
		return res, done
	}
	if !done {
		return s.hedgeAnswer(rc)
	}
	h := rc.hedge
	h.cancel(superseded(s.r.HostKey))
	<-h.done
	if h.resp != nil {
		// A success unused is given up: closed before its body, neutral.
		// Any other answer was judged at its headers, as it stands.
		if n := len(h.attempts); n > 0 && h.resp.StatusCode < 400 {
			h.attempts[n-1] = givenUp(h.attempts[n-1], s.r.HostKey)
		}
		h.resp.Body.Close()
	}
	s.attempts = append(append(s.attempts, rc.skips...), h.attempts...)
	res.Attempts = s.attempts
	return res, true
}

// hedgeAnswer waits for the hedge and judges its answer as the loop would
// a candidate's.
func (s *search) hedgeAnswer(rc *race) (Result, bool) {
	h := rc.hedge
	<-h.done
	s.attempts = append(append(s.attempts, rc.skips...), h.attempts...)
	res, done := s.judgeCandidate(h.u, h.resp, h.err)
	if done {
		s.c.hedgesWon.WithLabelValues(s.r.HostKey).Inc()
	}
	return res, done
}

// givenUp is the record of an attempt that got an answer the loop did not
// use, because by's attempt served first: neutral, as its breaker heard.
func givenUp(a Attempt, by string) Attempt {
	a.Verdict, a.Pending = breakerstate.Neutral, false
	if a.Error == "" {
		a.Error = superseded(by).Error()
	}
	return a
}
