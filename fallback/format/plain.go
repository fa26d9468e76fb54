package format

import (
	"net/http"

	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/stale"
)

// Plain is the Format of a format that adds nothing to the loop: one
// attempt per candidate, no realm, nothing learned, answers passed on as
// they are, copies keyed by stale.Policy.For. Embed it to override only
// what a format changes.
type Plain struct {
	// FinalNotFound is NotFoundIsFinal's answer (maven's is true).
	FinalNotFound bool
}

// Set is the Format of each format that has one, by format name.
type Set map[string]Format

// Of is name's Format, Plain when it has none of its own.
func (s Set) Of(name string) Format {
	if f, ok := s[name]; ok {
		return f
	}
	return Plain{}
}

// Send makes the one attempt.
func (Plain) Send(c Candidate) (*http.Response, error) { return c.Call.Send(c.Call.Request()) }

// Realm is none.
func (Plain) Realm(*config.Upstream) string { return "" }

// Observe learns nothing.
func (Plain) Observe(Answer) {}

// Present changes nothing: the answer is right as it is.
func (Plain) Present(*http.Request, *http.Response) Presented { return Presented{} }

// Stale keys req as any request of u's format.
func (Plain) Stale(u *config.Upstream, req *http.Request, p stale.Policy) (StaleKey, bool) {
	ref, ok := p.For(req, u.Format)
	return StaleKey{Ref: ref}, ok
}

// NotFoundIsFinal is FinalNotFound.
func (p Plain) NotFoundIsFinal() bool { return p.FinalNotFound }
