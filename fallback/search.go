package fallback

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/nora-breaker/nora-breaker/answer"
	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/destination"
	"github.com/nora-breaker/nora-breaker/fallback/format"
	"github.com/nora-breaker/nora-breaker/stale"
	"github.com/nora-breaker/nora-breaker/throttle"
)

// maxFailureBody bounds how much of an addressed upstream's 5xx body is kept
// to replay to the client when no candidate serves.
const maxFailureBody = 64 << 10

// errClientGone answers a request whose client left before any upstream
// answered; nobody reads the answer, but the log line says what happened.
var errClientGone = errors.New("client went away")

// search is one request's pass through the loop: what it has learned so far
// and what the terminal answer will be built from.
type search struct {
	c  *Chain
	r  Request
	fm format.Format // the addressed upstream's format, which its candidates share
	sk knownStaleKey // the request's stale key, once worked out

	attempts Attempts
	// skipped lists the keys whose breaker refused an attempt (addressed
	// first when it was refused), for the 503's Retry-After.
	skipped []string
	// saw404 records that a candidate said 404 or 410.
	saw404 bool
	// cause and replay are the addressed upstream's failure: its transport
	// error, or its 5xx answer kept to be replayed.
	cause  error
	replay func(*http.Request) *http.Response
	// deadline bounds the candidates' header waits; set when the first
	// candidate is considered, so the addressed attempt's own proxy_timeout
	// does not eat into it.
	deadline time.Time
	// throttled records that the addressed host is throttled (it was, or
	// it just answered 429): the terminal answer is then a 429.
	throttled bool
	// parentRefused is the key of the parent proxy whose breaker refused
	// for the addressed upstream: the synthesized 503 names it, since the
	// upstream's own breaker was never asked.
	parentRefused string
	// next is the index of the first upstream the loop has not
	// considered yet when a hedge's admission went past some (0: none).
	next int
	// alone marks the pass of a request decided on its own because it can
	// only be refused (refusal.go); wouldAsk, that a breaker of that pass
	// would have let it through.
	alone, wouldAsk bool
}

// upstream is the i-th upstream of the loop's order: the addressed
// upstream, then the candidates as the request lists them.
func (s *search) upstream(i int) *config.Upstream {
	if i == 0 {
		return s.r.Addressed
	}
	return s.r.Candidates[i-1]
}

// mayGoOn reports whether the loop may ask another upstream: only for a GET
// or HEAD, while the client waits and the search's deadline has not passed.
func (s *search) mayGoOn() bool {
	if !s.fm.Substitutable(s.r.Client) || s.r.Client.Context().Err() != nil {
		return false
	}
	now := s.c.o.Now()
	if s.deadline.IsZero() {
		s.deadline = now.Add(s.c.o.Deadline)
	}
	return now.Before(s.deadline)
}

// admit asks whether u, the i-th upstream of the loop, may be asked: a
// candidate the format says may not answer the request is not, nor a
// throttled host, nor one whose parent proxy's breaker refuses; then the
// breaker of the host the attempt goes to decides (the addressed request's
// own host, a candidate's URL host).
func (s *search) admit(i int, u *config.Upstream) (breakerstate.Ticket, bool) {
	key := s.keyOf(i, u)
	if i > 0 && !s.fm.MayAnswer(s.r.Client, u) {
		// Not a refusal: no breaker was asked, and its Retry-After is
		// no wait for this request.
		s.attempts = append(s.attempts, Attempt{Key: key, Skipped: SkipNotServing})
		return breakerstate.Ticket{}, false
	}
	if s.c.o.Throttles != nil && s.fm.Substitutable(s.r.Client) && s.c.o.Throttles.Left(key) > 0 {
		// It asked to be left alone: not asked, and no refusal counted.
		s.throttled = s.throttled || i == 0
		s.attempts = append(s.attempts, Attempt{Key: key, Skipped: SkipThrottled})
		return breakerstate.Ticket{}, false
	}
	if pk := s.parentKey(i, u); pk != "" && s.c.o.Breakers.Refusing(pk) {
		// The way to the upstream is down, not the upstream: its own
		// breaker is not asked, so nothing of it moves.
		s.skipped = append(s.skipped, pk)
		s.attempts = append(s.attempts, Attempt{Key: key, Skipped: SkipParent, Realm: pk})
		if i == 0 {
			s.parentRefused = pk
		}
		return breakerstate.Ticket{}, false
	}
	if rk := s.fm.Realm(u); s.toRegistry(i, key, u) && rk != "" && s.c.o.Breakers.Refusing(rk) {
		// Its clients cannot get a token: treat the registry as refused.
		s.skipped = append(s.skipped, rk)
		s.attempts = append(s.attempts, Attempt{Key: key, Skipped: SkipRealm, Realm: rk})
		return breakerstate.Ticket{}, false
	}
	if s.alone {
		// A request decided alone (refusal.go) never takes a ticket: a
		// breaker that would let it through ends that pass, and a refusal
		// is counted once the whole pass has refused.
		if !s.c.o.Breakers.Refuses(key) {
			s.wouldAsk = true
			return breakerstate.Ticket{}, false
		}
	} else if t, err := s.c.o.Breakers.Admit(key); err == nil {
		return t, true
	}
	s.skipped = append(s.skipped, key)
	s.attempts = append(s.attempts, Attempt{Key: key, Skipped: SkipBreaker})
	return breakerstate.Ticket{}, false
}

// parentKey is the breaker key of the parent proxy the i-th attempt goes
// through (the client's URL for the addressed upstream, a candidate's
// URL), or "".
func (s *search) parentKey(i int, u *config.Upstream) string {
	if s.r.Settings.ParentKey == nil {
		return ""
	}
	if i == 0 {
		return s.r.Settings.ParentKey(s.r.Client.URL)
	}
	return s.r.Settings.ParentKey(u.URL)
}

// toRegistry reports whether the i-th attempt, admitted by key, goes to
// u's registry itself: its URL host, or for the addressed upstream an
// equivalent host; not to one of its other hosts (a CDN, the token realm).
func (s *search) toRegistry(i int, key string, u *config.Upstream) bool {
	return key == u.Key || (i == 0 && s.r.Equivalent)
}

// keyOf is the breaker key the i-th attempt is admitted and measured by.
func (s *search) keyOf(i int, u *config.Upstream) string {
	if i == 0 {
		return s.r.HostKey
	}
	return u.Key
}

// ask makes the attempt at u, the i-th upstream of the loop, and reports
// whether its answer ends the loop.
func (s *search) ask(i int, u *config.Upstream, t breakerstate.Ticket) (Result, bool) {
	if i == 0 {
		return s.askAddressed(u, t)
	}
	return s.askCandidate(u, t)
}

// askAddressed sends the client's request as it is. Whatever the upstream
// answers is the client's answer, except that a GET or HEAD that failed
// (transport error, 5xx) goes on to the candidates. While it waits, a hedge
// may be sent and serve first, or the host's breaker may open and the
// request go on at once (sendAddressed, hedge.go).
func (s *search) askAddressed(u *config.Upstream, t breakerstate.Ticket) (Result, bool) {
	resp, rc, err := s.sendAddressed(u, t)
	switch rc.ended() {
	case raceHedge:
		s.attempts = append(s.attempts, givenUp(judged(s.r.HostKey, s.r.Client, resp, err), rc.hedge.u.Key))
		closeBody(resp)
		return s.hedgeAnswer(rc)
	case raceHandedOn:
		// An answer that came as the attempt was given up is unreadable.
		closeBody(resp)
		resp, err = nil, fmt.Errorf("upstream %s: %w", s.r.HostKey, errHandedOn)
	}
	res, done := s.judgeAddressed(u, resp, err)
	return s.settle(rc, res, done)
}

// judgeAddressed decides what the addressed upstream's answer means for
// the request: the client's answer (done), or a failure of a GET or HEAD,
// kept for the terminal answer, after which the loop goes on.
func (s *search) judgeAddressed(u *config.Upstream, resp *http.Response, err error) (Result, bool) {
	req, key := s.r.Client, s.r.HostKey
	s.attempts = append(s.attempts, judged(key, req, resp, err))
	switch {
	case err != nil && req.Context().Err() != nil:
		return s.result(answer.ForError(req, u.Format, key, errClientGone), answer.Error, ""), true
	case errors.Is(err, errHandedOn):
		// Its breaker opened while it waited: refused from now on, and
		// the terminal 503 says so.
		s.skipped = append(s.skipped, key)
		return Result{}, false
	case errors.Is(err, attempt.ErrClientRequest):
		return s.result(answer.ForError(req, u.Format, key, err), answer.BadRequest, ""), true
	case errors.Is(err, destination.ErrForbidden):
		return s.result(answer.ForError(req, u.Format, key, err), answer.Denied, ""), true
	case err != nil && !s.fm.Substitutable(req):
		return s.result(answer.ForError(req, u.Format, key, err), answer.Error, ""), true
	case err != nil:
		s.cause = err
		return Result{}, false
	case resp.StatusCode >= 500 && s.fm.Substitutable(req):
		s.replay = keepFailure(resp)
		return Result{}, false
	case resp.StatusCode == http.StatusTooManyRequests && s.fm.Substitutable(req) && s.c.o.Throttles != nil:
		s.throttle(key, resp)
		s.throttled = true
		return Result{}, false
	}
	s.observe(u, req, resp)
	s.keepStale(resp)
	s.c.staleRuns.fresh(s.r.HostKey)
	return s.result(resp, answer.Forwarded, key), true
}

// askCandidate sends the request rewritten for candidate u and judges
// what it got.
func (s *search) askCandidate(u *config.Upstream, t breakerstate.Ticket) (Result, bool) {
	resp, err := s.sendCandidate(u, t)
	return s.judgeCandidate(u, resp, err)
}

// judgeCandidate decides what candidate u's answer means for the request:
// the first success (2xx, 3xx) is served; a 404 or 410 is remembered;
// anything else moves on.
func (s *search) judgeCandidate(u *config.Upstream, resp *http.Response, err error) (Result, bool) {
	if err != nil {
		s.c.o.Logger.Debug().Str("key", u.Key).Err(err).Msg("fallback candidate failed")
		return Result{}, false
	}
	switch {
	case resp.StatusCode < 400:
		s.c.fallbacks.WithLabelValues(s.r.HostKey, u.Key).Inc()
		resp, storable := s.present(u, resp)
		s.observe(u, s.r.Client, resp)
		// The client addressed this URL: the next outage of the whole chain
		// should still find the artifact under it, unless the format could
		// not make the answer right for it (then a copy kept earlier stays).
		if storable {
			s.keepStale(resp)
		}
		s.c.staleRuns.fresh(s.r.HostKey)
		return s.result(resp, answer.Fallback, u.Key), true
	case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
		s.saw404 = true
		format.DrainClose(resp.Body)
	case resp.StatusCode == http.StatusTooManyRequests && s.c.o.Throttles != nil:
		s.throttle(u.Key, resp)
	default:
		format.DrainClose(resp.Body)
	}
	return Result{}, false
}

// throttle marks key's host throttled for as long as its 429 asks (capped),
// and discards the answer.
func (s *search) throttle(key string, resp *http.Response) {
	now := s.c.o.Now()
	wait := throttle.Wait(resp.Header, now, s.r.Settings.ThrottleDefault)
	s.c.o.Throttles.Mark(key, now.Add(wait))
	s.c.o.Logger.Info().Str("key", key).Dur("for", wait).Msg("upstream rate limiting: host throttled")
	format.DrainClose(resp.Body)
}

// exhausted builds the answer when no upstream served: a stale copy, else
// another upstream's 404 where that is the truth, else the addressed
// upstream's own failure, else the proxy's 503.
func (s *search) exhausted() Result {
	if res, ok := s.staleCopy(); ok {
		return res
	}
	return s.terminal()
}

// terminal is the answer of a search that ends without an upstream's
// answer or a stale copy to serve.
func (s *search) terminal() Result {
	req, dialect, key := s.r.Client, s.r.Addressed.Format, s.r.HostKey
	switch {
	case s.throttled:
		return s.result(answer.TooManyRequests(req, dialect, key, s.c.o.Throttles.Left(key),
			s.r.Settings.RetryAfterMax[dialect]), answer.Throttled, "")
	case s.saw404 && s.fm.NotFoundIsFinal():
		return s.result(answer.NotFound(req, dialect, key), answer.Synthesized404, "")
	case s.replay != nil:
		return s.result(s.replay(req), answer.Forwarded, key)
	case s.cause != nil:
		return s.result(answer.ForError(req, dialect, key, s.cause), answer.Error, "")
	}
	return s.result(s.unavailable(), answer.Synthesized503, "")
}

// unavailable builds the synthesized 503: the state of the first breaker
// that refused, and Retry-After = the smallest remaining open time of the
// breakers that refused. It names the addressed host's key, or the parent
// proxy's when that refused for it.
func (s *search) unavailable() *http.Response {
	state, wait := breakerstate.Closed, time.Duration(0)
	for i, k := range s.skipped {
		st, d, ok := s.c.o.Breakers.RetryAfter(k)
		switch {
		case !ok:
		case i == 0:
			state, wait = st, d
		case d < wait:
			wait = d
		}
	}
	key := s.r.HostKey
	if s.parentRefused != "" {
		key = s.parentRefused
	}
	return answer.Unavailable(s.r.Client, s.r.Addressed.Format, key, state.String(), wait,
		s.r.Settings.RetryAfterMax[s.r.Addressed.Format])
}

// credentialHeaders are the headers a candidate must never see besides
// Authorization and Cookie (substitute): the configured ones, else the
// default list.
func credentialHeaders(configured []string) []string {
	if configured != nil {
		return configured
	}
	return stale.DefaultCredentialHeaders()
}

func (s *search) result(resp *http.Response, kind answer.Result, servedBy string) Result {
	return Result{Resp: resp, Kind: kind, ServedBy: servedBy, Attempts: s.attempts}
}

// targetOf is u's attempt target at its own URL host.
func targetOf(u *config.Upstream) attempt.Target {
	return attempt.Target{Key: u.Key, HeaderTimeout: u.ProxyTimeout, ReadTimeout: u.ReadTimeout,
		SuspectAfter: u.SuspectAfter}
}

// closeBody closes resp's body, if there is a resp.
func closeBody(resp *http.Response) {
	if resp != nil {
		resp.Body.Close()
	}
}

// keepFailure buffers a 5xx answer's body, up to 64 KiB, so it can be
// replayed if no candidate serves. A body larger than that, or one the
// upstream broke off, is replayed as none, without its Content-Encoding:
// a cut body with a Content-Length to match would pass for a whole one
// (docs/behaviour.md §5.4).
func keepFailure(resp *http.Response) func(*http.Request) *http.Response {
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxFailureBody+1))
	resp.Body.Close()
	whole := err == nil && len(body) <= maxFailureBody
	if !whole {
		body = nil
	}
	return func(req *http.Request) *http.Response {
		cp := *resp
		cp.Header = resp.Header.Clone()
		cp.Request = req
		cp.Body = format.NewBytesBody(body)
		cp.ContentLength = int64(len(body))
		cp.Header.Del("Content-Length")
		if !whole {
			cp.Header.Del("Content-Encoding")
		}
		cp.TransferEncoding = nil
		if req.Method == http.MethodHead {
			cp.Body = http.NoBody
		}
		return &cp
	}
}
