package sharedstate

import (
	"context"
	"time"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// minRetry spaces lease attempts when Redis gives no useful wait (the
// lease vanished between SET NX and PTTL).
const minRetry = 10 * time.Millisecond

// leadTime is how long before the probe is due the lease is tried, so that the
// holder knows it may probe when the first request after open_until
// arrives: the request path never waits for Redis.
func leadTime(reset time.Duration) time.Duration {
	return min(reset/4, 250*time.Millisecond)
}

// schedule starts a new open period for key: the lease is tried shortly
// before due, when this process's probe falls due.
func (c *Client) schedule(ctx context.Context, ls *loopState, key string, due time.Time, reset time.Duration) {
	ls.end(key)
	ls.lastRound++
	ks := &keyState{round: ls.lastRound, due: due, reset: reset}
	ls.keys[key] = ks
	c.arm(ctx, ks, key, evLeaseTry, due.Sub(c.now())-leadTime(reset))
}

// arm fires ev for key's current round after d.
func (c *Client) arm(ctx context.Context, ks *keyState, key string, kind eventKind, d time.Duration) {
	if ks.timer != nil {
		ks.timer.Stop()
	}
	round := ks.round
	ks.timer = time.AfterFunc(max(d, 0), func() { c.send(ctx, event{kind: kind, key: key, round: round}) })
}

// leaseTry asks Redis for key's probe lease. The holder gets the probe
// permit until the lease runs out; the others try again when it does, which
// covers a holder that died or never saw a request.
func (c *Client) leaseTry(ctx context.Context, ls *loopState, key string, round uint64) {
	ks := ls.keys[key]
	if ks == nil || ks.round != round || !ls.up {
		return
	}
	if st, _, ok := c.set.RetryAfter(key); !ok || st == breakerstate.Closed {
		ls.end(key)
		return
	}
	ttl := ks.reset + leadTime(ks.reset)
	got, left, err := c.st.lease(key, ttl)
	if !c.check(ls, err) {
		return
	}
	if got {
		ks.holding = true
		_ = c.set.SetProbePermit(key, true)
		c.arm(ctx, ks, key, evLeaseEnd, ttl)
		return
	}
	if left <= 0 {
		left = minRetry
	}
	c.arm(ctx, ks, key, evLeaseTry, left)
}

// end forgets key's open period and stops its timer.
func (ls *loopState) end(key string) {
	if ks := ls.keys[key]; ks != nil {
		if ks.timer != nil {
			ks.timer.Stop()
		}
		delete(ls.keys, key)
	}
}

// stopAll forgets every open period.
func (ls *loopState) stopAll() {
	for key := range ls.keys {
		ls.end(key)
	}
}

// resync makes local and fleet state agree after a gap (start, reconnect,
// dropped events). The fleet's record wins where there is one; a key the
// fleet has no record of but this process holds open is published, since
// this process saw failures the fleet may not know about. A forced mode with
// no fleet record is released: an operator's later release may be what
// this process missed, and a forced open that nobody can see is the worse
// mistake. A record whose open_until lies more than a day from Redis's
// clock is absurd and counts as none.
func (c *Client) resync(ctx context.Context, ls *loopState) {
	statuses := c.set.Statuses()
	keys := make([]string, len(statuses))
	for i, s := range statuses {
		keys[i] = s.Key
	}
	recs, redisNow, err := c.st.records(keys)
	if !c.check(ls, err) {
		return
	}
	for _, s := range statuses {
		if !ls.up {
			return
		}
		rec, has := recs[s.Key]
		var wait time.Duration
		if has && rec.Mode == modeOpen {
			wait, has = untilFrom(rec.Until, redisNow)
		}
		switch {
		case has && rec.Mode != modeOpen:
			ls.end(s.Key)
			want := breakerstate.ModeOpen
			if rec.Mode == modeForcedClosed {
				want = breakerstate.ModeClosed
			}
			if s.Forced != want {
				_ = c.set.ApplyRemoteForce(s.Key, want)
			}
		case s.Forced != breakerstate.ModeAuto:
			ls.end(s.Key)
			_ = c.set.ApplyRemoteForce(s.Key, breakerstate.ModeAuto)
			if has {
				c.adopt(ctx, ls, s, wait, rec.Probes)
			}
		case has:
			c.adopt(ctx, ls, s, wait, rec.Probes)
		case s.State != breakerstate.Closed:
			c.shareOpen(ctx, ls, s.Key, s.OpenUntil, s.FailedProbes)
		}
	}
}

// adopt applies the fleet's open period (its probe due in wait, bounded by
// ApplyRemoteOpen), or publishes this process's own when it ends later.
func (c *Client) adopt(ctx context.Context, ls *loopState, s breakerstate.Status, wait time.Duration, probes int) {
	if s.State != breakerstate.Closed && s.Forced == breakerstate.ModeAuto && s.OpenUntil.Sub(c.now()) > wait {
		c.shareOpen(ctx, ls, s.Key, s.OpenUntil, s.FailedProbes)
		return
	}
	due, err := c.set.ApplyRemoteOpen(s.Key, wait, probes)
	if err != nil || due.IsZero() {
		return
	}
	c.schedule(ctx, ls, s.Key, due, s.ResetTimeout)
}
