package fallback

// Identical GETs in flight share one decision (docs/behaviour.md §5.9):
// not just the first attempt but the whole loop — the addressed upstream,
// the candidates, a stale copy, the terminal answer — runs once for all of
// them, so a failure is one verdict for the breaker and one fallback
// attempt, however many clients wait. Package coalesce runs the decision
// and hands each client its own answer; this file says which requests are
// identical and what a client that joined counts for.

import (
	"context"
	"net/http"

	"github.com/nora-breaker/nora-breaker/answer"
	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/coalesce"
	"github.com/nora-breaker/nora-breaker/fallback/format"
)

// joinKey is r's identity among the requests that may share a decision:
// the key its stale copies are kept under (the format's, so docker's
// tokens stand for who obtained them), refined by coalesce.Key. ok is
// false for a request decided alone (coalescing off, a request the stale
// cache must not key, or one coalesce.Key refuses); sk is its stale key
// whenever it was worked out, and known is its stale key if already so.
func (c *Chain) joinKey(r Request, fm format.Format, known knownStaleKey) (key string, sk knownStaleKey, ok bool) {
	if c.joins == nil {
		return "", known, false
	}
	sk = known
	if !sk.known {
		sk = staleKeyOf(r, fm)
	}
	key, ok = c.sharedKey(r, sk)
	return key, sk, ok
}

// sharedKey is joinKey's key from r's stale key sk.
func (c *Chain) sharedKey(r Request, sk knownStaleKey) (string, bool) {
	if !sk.ok {
		return "", false
	}
	return coalesce.Key(sk.key.Ref.Key, r.Client, sk.key.Ref.Cred)
}

// serveJoined decides r together with the identical requests in flight.
// The addressed upstream stands for the configuration the request is
// decided under: after a reload, a request never shares a decision made
// under other upstreams and settings.
func (c *Chain) serveJoined(r Request, fm format.Format, sk knownStaleKey, key string) Result {
	call := coalesce.Call{Key: key, Scope: r.Addressed, Label: r.Addressed.Format, Ctx: r.Client.Context(),
		Header: r.Client.Header, Fresh: coalesce.Fresh(r.Client)}
	out, err := c.joins.Do(call, func(ctx context.Context) (*http.Response, Result) {
		// The decision runs under the fetch's context, which outlives
		// this client while others wait. The loop only reads the request,
		// which stays as it is while Do runs, so a shallow copy will do.
		// A silent attempt of the fetch counts once for each client
		// waiting on it (early opening, docs/behaviour.md §4).
		dr := r
		dr.Client = r.Client.WithContext(attempt.WithClients(ctx, func() int { return coalesce.Waiting(ctx) }))
		res := c.decide(dr, fm, sk)
		return res.Resp, res
	})
	if err != nil {
		// Gone before any answer came: nobody reads this one, but the
		// log line says what happened.
		return Result{Resp: answer.ForError(r.Client, r.Addressed.Format, r.HostKey, errClientGone), Kind: answer.Error}
	}
	res := out.Value
	res.Resp, res.Coalesced = out.Resp, out.Joined
	if out.Joined {
		c.countJoined(r, res)
	}
	return res
}

// countJoined counts a request that joined another's decision where every
// request counts: a fallback, a stale copy served. The series about the
// copies themselves (their age) describe the one decision.
func (c *Chain) countJoined(r Request, res Result) {
	switch res.Kind {
	case answer.Fallback:
		c.fallbacks.WithLabelValues(r.HostKey, res.ServedBy).Inc()
	case answer.Stale:
		c.staleServed.WithLabelValues(r.HostKey).Inc()
	}
}
