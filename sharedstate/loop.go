package sharedstate

import (
	"context"
	"time"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// eventKind says what happened; one goroutine (loop) handles every event,
// so the per-key bookkeeping needs no lock.
type eventKind uint8

const (
	evTransition eventKind = iota // a local state change (tr)
	evForced                      // a local manual mode (key, mode)
	evRemote                      // a message from the channel (payload)
	evLeaseTry                    // time to try for key's probe lease (key, round)
	evLeaseEnd                    // key's lease ran out (key, round)
	evPing                        // Redis answered a ping or not (ok)
	evSubscribed                  // the subscription was confirmed or lost (ok)
	evFailure                     // a local failure counted while closed (key)
	evRecovery                    // a local success ended a run of failures (key)
)

type event struct {
	kind    eventKind
	ok      bool
	tr      breakerstate.Transition
	key     string
	mode    breakerstate.Mode
	round   uint64
	payload string
}

// keyState is the loop's bookkeeping for one key in an open period.
type keyState struct {
	// round changes with every new open period, close and disconnect, so a
	// timer armed for an earlier one is recognised and dropped.
	round   uint64
	due     time.Time // when this process's probe falls due
	reset   time.Duration
	timer   *time.Timer
	holding bool // this process holds the probe lease of this period
}

// loopState is owned by the loop goroutine.
type loopState struct {
	keys           map[string]*keyState
	pingOK, subbed bool
	up             bool
	lastRound      uint64
	// warned is set once "working alone" was logged, so that an outage
	// (or a Redis missing at start) is logged once, not once per ping.
	warned bool
}

// onTransition and onForced are the breakerstate hooks. They run on the
// request path right after a transition, so they never block: when the
// queue is full the event is dropped and a full resync is requested.
func (c *Client) onTransition(tr breakerstate.Transition) {
	c.enqueue(event{kind: evTransition, tr: tr, key: tr.Key})
}

func (c *Client) onForced(key string, m breakerstate.Mode) {
	c.enqueue(event{kind: evForced, key: key, mode: m})
}

func (c *Client) onFailure(key string)  { c.enqueue(event{kind: evFailure, key: key}) }
func (c *Client) onRecovery(key string) { c.enqueue(event{kind: evRecovery, key: key}) }

func (c *Client) enqueue(ev event) {
	select {
	case c.events <- ev:
	default:
		c.lost.Store(true)
	}
}

// loop applies events until ctx ends.
func (c *Client) loop(ctx context.Context) {
	ls := &loopState{keys: map[string]*keyState{}}
	defer ls.stopAll()
	for {
		select {
		case <-ctx.Done():
			return
		case ev := <-c.events:
			c.handle(ctx, ls, ev)
		}
		if ls.up && c.lost.Swap(false) {
			c.resync(ctx, ls)
		}
	}
}

func (c *Client) handle(ctx context.Context, ls *loopState, ev event) {
	switch ev.kind {
	case evPing:
		ls.pingOK = ev.ok
		if !ev.ok && !ls.up && !ls.warned {
			ls.warned = true
			c.log.Warn().Msg("shared state unavailable: this process keeps its breakers alone until Redis answers")
		}
		c.setUp(ctx, ls)
	case evSubscribed:
		ls.subbed = ev.ok
		if ev.ok && ls.up {
			// Resubscribed without the ping noticing a gap: messages may
			// still have been missed.
			c.resync(ctx, ls)
		}
		c.setUp(ctx, ls)
	case evTransition:
		c.localTransition(ctx, ls, ev.tr)
	case evForced:
		ls.end(ev.key)
		if ls.up {
			c.check(ls, c.st.force(ev.key, ev.mode))
		}
	case evFailure, evRecovery:
		// Counts are the fleet's only while it is reachable: a failure
		// missed meanwhile costs at most one more request per process.
		if ls.up {
			op := opFail
			if ev.kind == evRecovery {
				op = opOK
			}
			c.check(ls, c.st.publish(message{Op: op, Key: ev.key, Pod: c.st.pod}))
		}
	case evRemote:
		c.remote(ctx, ls, ev.payload)
	case evLeaseTry:
		c.leaseTry(ctx, ls, ev.key, ev.round)
	case evLeaseEnd:
		if ks := ls.keys[ev.key]; ks != nil && ks.round == ev.round && ks.holding {
			ks.holding = false
			_ = c.set.SetProbePermit(ev.key, false)
			c.leaseTry(ctx, ls, ev.key, ev.round)
		}
	}
}

// setUp recomputes whether the fleet is reachable and acts on a change:
// coming up resynchronises and turns the probe election on; going down
// turns it off, so that each process probes alone rather than never.
func (c *Client) setUp(ctx context.Context, ls *loopState) {
	up := ls.pingOK && ls.subbed
	if up == ls.up {
		return
	}
	ls.up = up
	if up {
		ls.warned = false
		c.log.Info().Msg("shared state connected: sharing breaker state with the fleet")
		c.resync(ctx, ls)
		if !ls.up { // the resync itself failed
			return
		}
		c.set.SetProbeGate(true)
		c.up.Store(true)
		c.gauge.Set(1)
		return
	}
	c.set.SetProbeGate(false)
	c.up.Store(false)
	c.gauge.Set(0)
	for key, ks := range ls.keys {
		if ks.holding {
			_ = c.set.SetProbePermit(key, false)
		}
	}
	ls.stopAll()
	if !ls.warned {
		ls.warned = true
		c.log.Warn().Msg("shared state unavailable: this process keeps its breakers alone until Redis answers")
	}
}

// check handles a failed Redis command: Redis is presumed down until the
// next successful ping, which triggers a full resync that redoes the work.
func (c *Client) check(ls *loopState, err error) bool {
	if err == nil {
		return true
	}
	c.log.Warn().Err(err).Msg("shared state command failed")
	ls.pingOK = false
	c.setUp(context.Background(), ls)
	return false
}

// localTransition shares a change this process decided.
func (c *Client) localTransition(ctx context.Context, ls *loopState, tr breakerstate.Transition) {
	switch tr.To {
	case breakerstate.Open:
		if tr.OpenUntil.IsZero() {
			return
		}
		c.shareOpen(ctx, ls, tr.Key, tr.OpenUntil, tr.FailedProbes)
	case breakerstate.Closed:
		ls.end(tr.Key)
		if ls.up {
			c.check(ls, c.st.close(tr.Key))
		}
	}
}

// shareOpen records a local open period, whose probe falls due at due (a
// reading of c.now), and schedules the lease attempt; if the fleet already
// knows a period that ends later, that one is adopted (bounded, by
// ApplyRemoteOpen). Only the time left goes to Redis, never due itself.
func (c *Client) shareOpen(ctx context.Context, ls *loopState, key string, due time.Time, probes int) {
	ls.end(key)
	if !ls.up {
		return
	}
	reset, err := c.set.ResetTimeout(key)
	if err != nil {
		return // the key left the configuration meanwhile
	}
	bound, _ := c.set.OpenBound(key)
	wait := due.Sub(c.now())
	fleet, err := c.st.open(key, wait, probes, bound, reset)
	if !c.check(ls, err) || fleet.forced {
		return
	}
	if fleet.wait > wait || fleet.probes > probes {
		if d, err := c.set.ApplyRemoteOpen(key, fleet.wait, fleet.probes); err == nil && !d.IsZero() {
			due = d
		}
	}
	c.schedule(ctx, ls, key, due, reset)
}

// remote applies a message from another process.
func (c *Client) remote(ctx context.Context, ls *loopState, payload string) {
	m, err := decodeMessage([]byte(payload))
	if err != nil {
		c.log.Debug().Err(err).Msg("shared state: ignored message")
		return
	}
	if m.Pod == c.st.pod {
		return
	}
	switch m.Op {
	case opOpen:
		wait, ok := m.wait(c.now())
		if !ok {
			c.log.Debug().Str("key", m.Key).Int64("until", m.Until).
				Msg("shared state: ignored an open whose time lies more than a day away")
			return
		}
		due, err := c.set.ApplyRemoteOpen(m.Key, wait, m.Probes)
		if err != nil || due.IsZero() {
			return // a key this process does not have, or one forced here
		}
		if reset, err := c.set.ResetTimeout(m.Key); err == nil {
			c.schedule(ctx, ls, m.Key, due, reset)
		}
	case opClose:
		ls.end(m.Key)
		_ = c.set.ApplyRemoteClose(m.Key)
	case opForce:
		ls.end(m.Key)
		mode, _ := breakerstate.ParseMode(m.Mode)
		_ = c.set.ApplyRemoteForce(m.Key, mode)
	case opFail:
		_ = c.set.ApplyRemoteFailure(m.Key)
	case opOK:
		_ = c.set.ApplyRemoteRecovery(m.Key)
	}
}
