package fallback

import "github.com/nora-breaker/nora-breaker/fallback/format"

// refuseAlone decides r on its own, outside the decision identical
// requests share (coalesce.go), when that decision can only refuse it:
// every upstream the loop would consider refuses it (its breaker, a
// throttle, its parent proxy, its token realm), no stale copy would serve
// it, and no identical request is being decided for it to join. Sharing
// such a decision asks no upstream and gives every client the answer it
// would have made itself, yet it costs a flight, a spool and a copy of the
// answer per client: during an outage, that is most of a refusal's price
// (docs/behaviour.md §5.9). ok is false when r must be decided the usual
// way; nothing has been counted or taken then.
//
// The pass never takes a ticket, so it can never be the half-open probe:
// a breaker that would let the request through ends it. The flights are
// looked at after the breakers, which is what keeps the rule that
// identical requests wait for a probe's answer: a request that takes a
// probe made its flight before it asked the breaker, so a request that
// found the probe out finds that flight here and joins it.
//
// The pass is a loop of its own rather than decide's: it runs before every
// GET that may share a decision, healthy ones included, and a search that
// may ask an upstream escapes to the heap, while this one stays on the
// stack.
//
// The pass comes before r's keys are worked out (its stale key, the key
// identical requests share): a refusal needs the stale key only when there
// is a stale cache to look in, and the shared key only while some decision
// is in flight to join; during an outage with neither, a refused request
// spends nothing on either. *sk is r's stale key if the pass worked it out.
// A GET that can never share a decision (the stale cache must not key it)
// is refused here too: decided alone, it would get the same answer, with
// the same counts.
func (c *Chain) refuseAlone(r Request, fm format.Format, sk *knownStaleKey) (Result, bool) {
	s := &search{c: c, r: r, fm: fm, alone: true}
	for i := 0; i <= len(r.Candidates); i++ {
		if i > 0 && !s.mayGoOn() {
			break
		}
		if _, admitted := s.admit(i, s.upstream(i)); admitted || s.wouldAsk {
			return Result{}, false
		}
		if i == 0 && !fm.Substitutable(r.Client) {
			break
		}
	}
	if s.hasStaleCopy() || s.joinsAFlight() {
		*sk = s.sk
		return Result{}, false
	}
	for _, a := range s.attempts {
		if a.Skipped == SkipBreaker {
			c.o.Breakers.CountRefusal(a.Key)
		}
	}
	return s.terminal(), true
}

// joinsAFlight reports whether a decision is in flight that the request
// would join; its keys are worked out only while some decision is.
func (s *search) joinsAFlight() bool {
	if !s.c.joins.Busy() {
		return false
	}
	s.staleKey()
	key, ok := s.c.sharedKey(s.r, s.sk)
	return ok && s.c.joins.Deciding(s.r.Addressed, key)
}
