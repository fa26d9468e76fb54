package format

import (
	"net/http"

	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/stale"
)

// Plain is the Format of a format that adds nothing to the loop: every
// candidate may answer, one attempt per candidate, no realm, nothing learned, answers passed on as
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

// MayAnswer admits every candidate: the upstreams of one chain hold the
// same artifacts.
func (Plain) MayAnswer(*http.Request, *config.Upstream) bool { return true }

// Substitutable is SafeMethod.
func (Plain) Substitutable(req *http.Request) bool { return SafeMethod(req.Method) }

// Hedgeable is always.
func (Plain) Hedgeable(*http.Request) bool { return true }

// SafeMethod reports a method that may be sent to another upstream, or go
// on down the chain after the addressed upstream failed: GET and HEAD,
// which are safe to repeat.
func SafeMethod(method string) bool {
	return method == http.MethodGet || method == http.MethodHead
}

// Realm is none.
func (Plain) Realm(*config.Upstream) string { return "" }

// Observe learns nothing.
func (Plain) Observe(Answer) {}

// Present changes nothing, and the answer may be kept.
func (Plain) Present(*http.Request, *http.Response, string) bool { return true }

// Stale keys req as any request of u's format.
func (Plain) Stale(u *config.Upstream, req *http.Request, p stale.Policy) (StaleKey, bool) {
	ref, ok := p.For(req, u.Format)
	return StaleKey{Ref: ref}, ok
}

// NotFoundIsFinal is FinalNotFound.
func (p Plain) NotFoundIsFinal() bool { return p.FinalNotFound }
