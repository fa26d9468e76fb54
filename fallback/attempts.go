package fallback

import (
	"net/http"

	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// Attempt is one step of the loop at one upstream, as the request's log
// line shows it: the upstream was asked, or skipped and why. A docker
// token retry is an attempt of its own: its breaker admits and judges it
// apart from the first.
type Attempt struct {
	// Key is the breaker key the attempt was admitted (or refused) by.
	Key string
	// Skipped says why the upstream was not asked; "" when it was.
	Skipped Skip
	// Realm, for SkipRealm and SkipParent, is the breaker key that
	// refused on the upstream's behalf (docker: its token realm's; the
	// parent proxy's).
	Realm string
	// Verdict is what the attempt meant for the upstream's breaker
	// (attempt.Decide). When Pending, it is the headers' success: the
	// body's end decides, after the loop has returned, and a body that
	// ends short or stalls is reported to the breaker as a failure, one
	// the client leaves as neutral; this record keeps the headers' word.
	Verdict breakerstate.Outcome
	Pending bool
	// Status is the answer's status; 0 when the attempt got none, and
	// Error then says why (a transport error, a timeout, the client gone,
	// the proxy giving it up).
	Status int
	Error  string
	// Hedge marks an attempt made while the addressed upstream was still
	// waited on (docs/behaviour.md §5.10).
	Hedge bool
}

// Skip is why the loop did not ask an upstream.
type Skip string

const (
	// SkipBreaker: the upstream's breaker refused the attempt.
	SkipBreaker Skip = "breaker"
	// SkipThrottled: the host asked to be left alone (429).
	SkipThrottled Skip = "throttled"
	// SkipRealm: a host the upstream needs refused (docker: its token
	// realm's breaker).
	SkipRealm Skip = "realm"
	// SkipParent: the breaker of the parent proxy the upstream is
	// reached through refused; the upstream's own was not asked.
	SkipParent Skip = "parent"
	// SkipNotServing: the format says the candidate does not serve what
	// the request names (docker: the registry in ?ns=), so its answer
	// would be another artifact under the same name.
	SkipNotServing Skip = "not_serving"
)

// Attempts are a request's attempts in the order the loop made them.
type Attempts []Attempt

// judged records the attempt that sent out at key and got resp or err.
func judged(key string, out *http.Request, resp *http.Response, err error) Attempt {
	a := Attempt{Key: key, Verdict: attempt.Decide(resp, err, out.Context())}
	if err != nil {
		a.Error = err.Error()
		return a
	}
	a.Status, a.Pending = resp.StatusCode, attempt.BodyDecides(out, resp)
	return a
}

// MarshalZerologArray writes the attempts as a JSON array of objects.
// Each goes through zerolog.Dict, whose events come from zerolog's pool:
// Array.Object would allocate a writer for every object of every line.
func (as *Attempts) MarshalZerologArray(arr *zerolog.Array) {
	for i := range *as {
		d := zerolog.Dict()
		(*as)[i].MarshalZerologObject(d)
		arr.Dict(d)
	}
}

// MarshalZerologObject writes one attempt: its key, then why it was
// skipped, or its verdict and status or error.
func (a *Attempt) MarshalZerologObject(e *zerolog.Event) {
	e.Str("key", a.Key)
	if a.Skipped != "" {
		e.Str("skipped", string(a.Skipped))
		switch {
		case a.Realm != "" && a.Skipped == SkipParent:
			e.Str("parent", a.Realm)
		case a.Realm != "":
			e.Str("realm", a.Realm)
		}
		return
	}
	e.Str("verdict", a.Verdict.String())
	if a.Hedge {
		e.Bool("hedge", true)
	}
	if a.Pending {
		e.Bool("pending", true)
	}
	if a.Error != "" {
		e.Str("error", a.Error)
		return
	}
	e.Int("status", a.Status)
}
