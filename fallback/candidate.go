package fallback

// A candidate's request: rewritten for it, with a docker bearer token when
// it wants one, its header wait cut to what is left of the search.

import (
	"net/http"
	"time"

	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/config"
)

// sendCandidate sends the substituted request to cand. A docker candidate
// gets the cached token for its scope on the first try; one that answers
// 401 with a Bearer challenge gets a token negotiated once, and a retry.
func (s *search) sendCandidate(cand *config.Upstream, t breakerstate.Ticket) (*http.Response, error) {
	rt := s.r.Settings.Transport
	out := substitute(s.r.Client, cand, s.r.Rel, s.credentialHeaders())
	docker := cand.Format == "docker" && s.c.o.Tokens != nil
	sentCached := docker && s.withCachedToken(out, cand)
	resp, err := s.c.o.Sender.Send(rt, out, s.candidateTarget(cand), t)
	if err != nil || resp.StatusCode != http.StatusUnauthorized || !docker {
		return resp, err
	}
	ch, ok := bearerChallenge(resp.Header)
	if !ok {
		return resp, nil
	}
	s.c.realms.learn(cand, ch.Realm, s.r.Settings.KeyOf)
	s.c.challenges.Store(cand.Key, Challenge{Scheme: ch.Scheme, Realm: ch.Realm, Service: ch.Service})
	if len(ch.Scopes) == 0 {
		ch.Scopes = dockerScope(s.r.Rel)
	}
	if sentCached {
		// The registry refused a token we still thought fresh (revoked, or
		// its clock disagrees): forget it and fetch anew.
		s.c.o.Tokens.Invalidate(cand.Key, ch)
	}
	token, terr := s.c.o.Tokens.Token(s.r.Client.Context(), rt, cand.Key, cand.Auth, ch, s.c.realms.of(cand))
	if terr != nil {
		return resp, nil // the 401 stands; the loop moves on
	}
	drainClose(resp.Body)
	t2, err := s.c.o.Breakers.Admit(cand.Key)
	if err != nil {
		return nil, err
	}
	retry := substitute(s.r.Client, cand, s.r.Rel, s.credentialHeaders())
	retry.Header.Set("Authorization", "Bearer "+token)
	resp, err = s.c.o.Sender.Send(rt, retry, s.candidateTarget(cand), t2)
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		s.c.o.Tokens.Invalidate(cand.Key, ch)
	}
	return resp, err
}

// withCachedToken puts the cached token for out's scope on out, when the
// candidate's realm is known and a fresh token is cached; it reports
// whether it did.
func (s *search) withCachedToken(out *http.Request, cand *config.Upstream) bool {
	v, ok := s.c.challenges.Load(cand.Key)
	if !ok {
		return false
	}
	ch := v.(Challenge)
	ch.Scopes = dockerScope(s.r.Rel)
	if len(ch.Scopes) == 0 {
		return false
	}
	token, ok := s.c.o.Tokens.cached(cand.Key, cand.Auth, ch)
	if ok {
		out.Header.Set("Authorization", "Bearer "+token)
	}
	return ok
}

// candidateTarget is cand's attempt target with its header timeout cut to
// what is left of the search's deadline.
func (s *search) candidateTarget(cand *config.Upstream) attempt.Target {
	t := targetOf(cand)
	left := s.deadline.Sub(s.c.o.Now())
	if left < t.HeaderTimeout {
		t.HeaderTimeout = max(left, time.Millisecond)
	}
	return t
}
