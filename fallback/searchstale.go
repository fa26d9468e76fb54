package fallback

// The stale cache's part in the loop: which copy a request is kept and
// looked up under (the format decides), and what an answer teaches about
// later ones.

import (
	"net/http"
	"strings"

	"github.com/nora-breaker/nora-breaker/answer"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/fallback/format"
	"github.com/nora-breaker/nora-breaker/stale"
)

// staleCopy looks up a stale copy of the client's request.
func (s *search) staleCopy() (Result, bool) {
	st := s.c.o.Stale
	if st == nil {
		return Result{}, false
	}
	key, ok := s.staleKey()
	if !ok {
		return Result{}, false
	}
	e, ok := s.findStale(key)
	if !ok {
		return Result{}, false
	}
	now := s.c.o.Now()
	s.c.staleServed.WithLabelValues(s.r.HostKey).Inc()
	s.c.staleRuns.served(s.r.HostKey, now, e.StoredAt)
	resp := e.Response(s.r.Client, now)
	// A stale ping still names the realm, a stale token still stands for
	// its credentials: the rest of an outage pull depends on both.
	s.observe(s.r.Addressed, s.r.Client, resp)
	return s.result(resp, answer.Stale, ""), true
}

// hasStaleCopy reports whether the stale cache holds a copy staleCopy
// would look for, from its index alone: no body is opened, nothing is
// counted or moved up the cache's order.
func (s *search) hasStaleCopy() bool {
	if s.c.o.Stale == nil {
		return false
	}
	key, ok := s.staleKey()
	if !ok {
		return false
	}
	return (key.OwnHead && s.r.Client.Method == http.MethodHead && s.c.o.Stale.Has(key.Ref.HeadRef())) ||
		s.c.o.Stale.Has(key.Ref)
}

// findStale finds the copy for key; a HEAD that keeps its own answer takes
// it first, else the GET's headers.
func (s *search) findStale(key format.StaleKey) (*stale.Entry, bool) {
	if key.OwnHead && s.r.Client.Method == http.MethodHead {
		if e, ok := s.c.o.Stale.Find(key.Ref.HeadRef()); ok {
			return e, true
		}
	}
	return s.c.o.Stale.Find(key.Ref)
}

// keepStale stores a copy of a cacheable answer while it streams: a GET's,
// and a HEAD's that its format keeps on its own.
func (s *search) keepStale(resp *http.Response) {
	st, req := s.c.o.Stale, s.r.Client
	if st == nil || (req.Method != http.MethodGet && req.Method != http.MethodHead) {
		return
	}
	key, ok := s.staleKey()
	if !ok {
		return
	}
	ref := key.Ref
	if req.Method == http.MethodHead {
		if !key.OwnHead {
			return
		}
		ref = ref.HeadRef()
	}
	if st.StorableFor(ref, req, resp) {
		st.Store(ref, resp)
	}
}

// staleKey is the key the request's copies are kept and looked up under.
func (s *search) staleKey() (format.StaleKey, bool) {
	if !s.sk.known {
		s.sk = staleKeyOf(s.r, s.fm)
	}
	return s.sk.key, s.sk.ok
}

// knownStaleKey is a request's stale key once it has been worked out (a
// request is keyed once, though both coalescing and the loop need it).
type knownStaleKey struct {
	key       format.StaleKey
	ok, known bool
}

// staleKeyOf works out r's stale key under its format.
func staleKeyOf(r Request, fm format.Format) knownStaleKey {
	key, ok := fm.Stale(r.Addressed, r.Client, r.Settings.stalePolicy())
	return knownStaleKey{key: key, ok: ok, known: true}
}

// stalePolicy is how the request's copies are keyed under its settings;
// a format may refine it (docker names credentials by token).
func (s *search) stalePolicy() stale.Policy { return s.r.Settings.stalePolicy() }

// stalePolicy is how copies are keyed under these settings.
func (st Settings) stalePolicy() stale.Policy {
	return stale.Policy{Mode: st.StaleMode, CredentialHeaders: st.CredentialHeaders}
}

// env is what the request's settings lend its format.
func (s *search) env() format.Env {
	return format.Env{Transport: s.r.Settings.Transport, Routes: s.r.Settings.Routes, Stale: s.stalePolicy()}
}

// observe learns what an answer of u to req teaches, whoever gave it (the
// upstream, a candidate, the stale cache): where its redirect went, and
// whatever the format learns from it.
func (s *search) observe(u *config.Upstream, req *http.Request, resp *http.Response) {
	s.noteRedirect(u, resp)
	s.fm.Observe(format.Answer{Upstream: u, Request: req, Response: resp, Env: s.env()})
}

// noteRedirect tells OnRedirect of a redirect u answered to another host.
func (s *search) noteRedirect(u *config.Upstream, resp *http.Response) {
	if s.c.o.OnRedirect == nil || resp.StatusCode < 300 || resp.StatusCode > 399 {
		return
	}
	loc, err := resp.Location()
	if err != nil || resp.Request == nil || strings.EqualFold(loc.Host, resp.Request.URL.Host) {
		return
	}
	s.c.o.OnRedirect(u.Key, loc)
}
