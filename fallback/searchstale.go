package fallback

// The stale cache's part in the loop: which copy a request is kept and
// looked up under, and what an answer teaches about later ones.

import (
	"net/http"

	"github.com/nora-breaker/nora-breaker/answer"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/stale"
)

// staleCopy looks up a stale copy of the client's request.
func (s *search) staleCopy() (Result, bool) {
	st := s.c.o.Stale
	if st == nil {
		return Result{}, false
	}
	ref, ok := s.staleRef()
	if !ok {
		return Result{}, false
	}
	e, ok := s.findStale(ref)
	if !ok {
		return Result{}, false
	}
	s.c.staleServed.WithLabelValues(s.r.HostKey).Inc()
	resp := e.Response(s.r.Client, s.c.o.Now())
	// A stale ping still names the realm, a stale token still stands for
	// its credentials: the rest of an outage pull depends on both.
	s.observe(s.r.Addressed, s.r.Client, resp)
	return s.result(resp, answer.Stale, ""), true
}

// findStale finds the copy for ref; a HEAD takes its own kept answer
// first, else the GET's headers.
func (s *search) findStale(ref stale.Ref) (*stale.Entry, bool) {
	if s.keepsHead() {
		if e, ok := s.c.o.Stale.Find(ref.HeadRef()); ok {
			return e, true
		}
	}
	return s.c.o.Stale.Find(ref)
}

// keepsHead reports a request whose HEAD answer is kept on its own: a
// docker manifest's, which containerd only ever asks for with HEAD.
func (s *search) keepsHead() bool {
	req := s.r.Client
	return req.Method == http.MethodHead && s.r.Addressed.Format == "docker" && stale.DockerManifest(req.URL.Path)
}

// keepStale stores a copy of a cacheable answer while it streams.
func (s *search) keepStale(resp *http.Response) {
	st, req := s.c.o.Stale, s.r.Client
	if st == nil || (req.Method != http.MethodGet && !s.keepsHead()) {
		return
	}
	ref, ok := s.staleRef()
	if !ok {
		return
	}
	if s.keepsHead() {
		ref = ref.HeadRef()
	}
	if st.StorableFor(ref, req, resp) {
		st.Store(ref, resp)
	}
}

// stalePolicy is how the request's copies are keyed under its settings.
func (s *search) stalePolicy() stale.Policy {
	p := stale.Policy{Mode: s.r.Settings.StaleMode, CredentialHeaders: s.r.Settings.CredentialHeaders}
	if s.r.Addressed.Format == "docker" {
		p.Credential = s.c.tokens.credential
	}
	return p
}

// staleRef is the Ref the request's copies are kept and looked up under.
func (s *search) staleRef() (stale.Ref, bool) {
	p := s.stalePolicy()
	if s.r.Addressed.Format == "docker" {
		return s.c.dockerRef(p, s.r.Client)
	}
	return p.For(s.r.Client, s.r.Addressed.Format)
}

// observe learns what an answer of u to req teaches, whoever gave it (the
// upstream, a candidate, the stale cache): where its redirect went, and,
// for docker, where its token realm is, who a token stands for, and where a
// blob's bytes live.
func (s *search) observe(u *config.Upstream, req *http.Request, resp *http.Response) {
	s.noteRedirect(u, resp)
	if u.Format != "docker" {
		return
	}
	switch {
	case resp.StatusCode == http.StatusUnauthorized:
		if ch, ok := bearerChallenge(resp.Header); ok {
			s.c.realms.learn(u, ch.Realm, s.r.Settings.KeyOf)
		}
	case isTokenRequest(req):
		s.c.tokens.learnToken(resp, s.stalePolicy().CredentialOf(req))
	default:
		s.c.noteBlobRedirect(s.stalePolicy(), req, resp)
	}
}
