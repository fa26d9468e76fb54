package fallback

// A candidate's attempts: the format sends them through a candidateCall,
// which rewrites the request for the candidate, admits each attempt after
// the first by the candidate's breaker, bounds its header wait by what is
// left of the search, and lists it in the Result.

import (
	"fmt"
	"net/http"
	"time"

	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/fallback/format"
)

// errSearchBound gives up a candidate's attempt when the search's own bound
// on the wait for headers (Options.Deadline) runs out before the
// candidate's proxy_timeout does: the proxy stopped waiting, the candidate
// did not fail to answer.
var errSearchBound = fmt.Errorf("%w: the search for an upstream that answers ran out of time", attempt.ErrCancelled)

// sendCandidate lets the format make its attempts at cand, the first one
// under the loop's admission t.
func (s *search) sendCandidate(cand *config.Upstream, t breakerstate.Ticket) (*http.Response, error) {
	call := s.callFor(cand, t, s.r.Client, s.attempts)
	resp, err := call.run(s.fm, s.env())
	s.attempts = call.attempts
	return resp, err
}

// callFor prepares the attempts at cand under the loop's admission t, for
// client (the client's request, or a copy with a context of its own: a
// hedge's), listing them after attempts.
func (s *search) callFor(cand *config.Upstream, t breakerstate.Ticket, client *http.Request,
	attempts Attempts) *candidateCall {
	return &candidateCall{c: s.c, client: client, cand: cand, rel: s.r.Rel, creds: s.r.Settings.CredentialHeaders,
		rt: s.r.Settings.Transport, deadline: s.deadline, ticket: t, admitted: true, attempts: attempts}
}

// run lets the format fm make the call's attempts.
func (cc *candidateCall) run(fm format.Format, env format.Env) (*http.Response, error) {
	resp, err := fm.Send(format.Candidate{Upstream: cc.cand, Client: cc.client, Rel: cc.rel, Env: env, Call: cc})
	if cc.admitted {
		// The format sent nothing: the admission is given back unused.
		cc.ticket.Done(breakerstate.Neutral)
	}
	return resp, err
}

// candidateCall is format.Call for one candidate. It holds copies of what
// it needs rather than the search, which would otherwise have to live on
// the heap for every request, the ones that never reach a candidate too.
type candidateCall struct {
	c        *Chain
	client   *http.Request
	cand     *config.Upstream
	rel      string
	creds    []string // as configured: nil is stale.DefaultCredentialHeaders
	rt       http.RoundTripper
	deadline time.Time
	// ticket is the loop's admission, unused while admitted is true.
	ticket   breakerstate.Ticket
	admitted bool
	attempts Attempts
}

// Request substitutes the client's request for the candidate.
func (cc *candidateCall) Request() *http.Request {
	return substitute(cc.client, cc.cand, cc.rel, credentialHeaders(cc.creds))
}

// Send makes one attempt at the candidate: the first under the loop's
// admission, a later one (docker's retry with a token) only if the
// candidate's breaker admits it again.
func (cc *candidateCall) Send(out *http.Request) (*http.Response, error) {
	t := cc.ticket
	if !cc.admitted {
		var err error
		if t, err = cc.c.o.Breakers.Admit(cc.cand.Key); err != nil {
			cc.attempts = append(cc.attempts, Attempt{Key: cc.cand.Key, Skipped: SkipBreaker})
			return nil, err
		}
	}
	cc.admitted = false
	resp, err := cc.c.o.Sender.Send(cc.rt, out, cc.target(), t)
	cc.attempts = append(cc.attempts, judged(cc.cand.Key, out, resp, err))
	return resp, err
}

// target is the candidate's attempt target, its header wait bounded by
// what is left of the search's deadline when that is shorter than its
// proxy_timeout. The bound is the proxy's, not the candidate's: running
// out of it gives the attempt up (errSearchBound), neutral, while a
// proxy_timeout that ends first is still the candidate's failure
// (docs/behaviour.md §5.1, §5.4).
func (cc *candidateCall) target() attempt.Target {
	t := targetOf(cc.cand)
	left := cc.deadline.Sub(cc.c.o.Now())
	if left < t.HeaderTimeout {
		t.Bound = attempt.Bound{After: max(left, time.Millisecond), Cause: errSearchBound}
	}
	return t
}
