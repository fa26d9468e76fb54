package breakerstate

import (
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// ErrOpen is returned by Allow when the breaker rejects the request: it is
// open, forced open, or half-open with its single probe already out.
var ErrOpen = errors.New("circuit breaker open")

// ErrUnknownKey is returned for a key that is not (or no longer) configured.
// Allow returns it too: a caller that raced a reload should forward the
// request without a breaker rather than reject it.
var ErrUnknownKey = errors.New("unknown breaker key")

// ErrDisabled is returned by Force while the circuit breaker is disabled:
// a disabled breaker never rejects, so a manual mode would mean nothing.
var ErrDisabled = errors.New("circuit breaker disabled")

// KeySettings is the resolved configuration of one breaker key.
type KeySettings struct {
	Key    string // breaker key, e.g. "pypi:https://pypi.org/simple" or "cargo"
	Format string // the key's format, e.g. "pypi"
	// FailureThreshold is the number of consecutive failures that opens the
	// breaker; must be >= 1.
	FailureThreshold int
	// ResetTimeout is how long the breaker stays open after the last failure
	// before one probe is let through; must be >= 0.
	ResetTimeout time.Duration
	// ResetTimeoutMax bounds the open time as each failed probe doubles it;
	// a value below ResetTimeout (the zero value among them) keeps the open
	// time fixed at ResetTimeout, as NORA's is.
	ResetTimeoutMax time.Duration
	// Jitter is the share, in [0, 0.5], by which each open period and each
	// Retry-After is moved at random up or down; 0 moves nothing.
	Jitter float64
	// ThresholdSource and ResetTimeoutSource say where each value came from
	// (e.g. `override "pypi"`, "global"); carried only for the admin API.
	ThresholdSource, ResetTimeoutSource string
}

// Transition describes one state change, for logs.
type Transition struct {
	Key          string
	From, To     State
	At           time.Time
	FailureCount int // the count after the change
	// OpenUntil is, when To is Open and the mode is automatic, when the next
	// probe becomes due, and OpenTime the length of the open period that
	// ends then (the open time, grown and jittered); zero otherwise. Both
	// are readings of the set's clock: the fleet-sharing layer sends the
	// time left (OpenUntil minus its now), never the wall-clock value.
	OpenUntil time.Time
	OpenTime  time.Duration
	// FailedProbes is how many probes of this outage failed in a row after
	// the change (0 once closed): the growth of the open time, which the
	// fleet shares.
	FailedProbes int
	// Remote is true when the change was applied from the fleet's shared
	// state (ApplyRemote*) rather than decided by this process. An opening
	// this process decides because the fleet's count of failures reached
	// its threshold (ApplyRemoteFailure) is its own decision: Remote is
	// false and Fleet true.
	Remote bool
	Fleet  bool
	// Silent is true for an opening this process decided because
	// failure_threshold attempts waited past their suspect wait with no
	// answer from the host (silent.go), before any of them timed out.
	Silent bool
	// Manual is true when the change comes from a forced mode (Force or
	// ApplyRemoteForce) rather than from the state machine.
	Manual bool
}

// Why names the reason for the transition in an operator's words (the
// "why" of its log line and of the admin listener's history).
// Manual and fleet changes are told apart first: they can take any path
// through the state machine.
func (t Transition) Why() string {
	switch {
	case t.Manual:
		return "forced"
	case t.Remote:
		return "fleet"
	}
	switch [2]State{t.From, t.To} {
	case [2]State{Closed, Open}:
		if t.Silent {
			return "no headers within suspect_after"
		}
		if t.Fleet {
			return "fleet threshold reached"
		}
		return "threshold reached"
	case [2]State{HalfOpen, Open}:
		return "probe failed"
	case [2]State{HalfOpen, Closed}:
		return "probe succeeded"
	case [2]State{Open, HalfOpen}:
		return "probe due"
	case [2]State{Open, Closed}:
		// A request admitted while still closed came back with a success
		// after the breaker had opened; NORA's semantics close it.
		return "success of a request admitted before the opening"
	}
	return t.From.String() + " → " + t.To.String()
}

// Options configures New. Zero values are noted per field.
type Options struct {
	// Enabled turns the breakers on. When false, Allow never rejects, reports
	// are ignored, snapshots say closed and no state gauge is exported.
	Enabled bool
	// Keys lists every breaker key, in config order (Snapshot keeps it).
	Keys []KeySettings
	// Now is the clock; nil means time.Now. Every time the set keeps is a
	// reading of it and is only ever compared with another (Sub, Before),
	// so with time.Now open periods follow Go's monotonic clock and a
	// wall-clock step moves none of them.
	Now func() time.Time
	// Rand returns numbers uniform in [0, 1) for the jitter of open periods
	// and Retry-After; it must be safe for concurrent use. nil gives each
	// key a generator of its own seeded from the operating system, so that
	// no two processes draw alike (tests inject a fixed sequence).
	Rand func() float64
	// Registerer receives the breaker metrics; required (tests pass
	// prometheus.NewRegistry()).
	Registerer prometheus.Registerer
	// OnTransition, if not nil, is called after each state change, outside
	// the breaker's lock. Calls for one key may arrive out of order when
	// transitions race; the At and state fields tell the true order.
	OnTransition func(Transition)
}

// Set holds the breakers of every configured key.
type Set struct {
	now          func() time.Time
	rand         func() float64 // nil: each key's own generator
	onTransition func(Transition)
	metrics      *metrics
	// share is the fleet-sharing layer's hooks (nil when alone) and gated
	// whether a half-open probe needs the fleet's lease; see remote.go.
	share atomic.Pointer[Share]
	gated atomic.Bool

	// table is immutable once published and swapped whole by Reconfigure,
	// so the request path looks keys up without any set-wide lock.
	table atomic.Pointer[table]
	// reconfMu serialises Reconfigure calls; the request path never takes it.
	reconfMu sync.Mutex
}

// table is one published configuration: the key index and the config order.
type table struct {
	enabled bool
	byKey   map[string]*breaker
	order   []*breaker
}

// Ticket is a request's admission by a breaker; the request reports its
// outcome with Done. It is a small value so that admission allocates nothing.
type Ticket struct {
	b    *breaker
	gen  uint64
	kind ticketKind
}

// Done reports the outcome of the admitted request. Call it once per
// ticket, from any goroutine. The zero Ticket's Done does nothing.
func (t Ticket) Done(o Outcome) {
	if t.b == nil || t.kind == kindNone {
		return
	}
	t.b.done(t, o)
}

// Probe reports whether this request is the half-open probe, whose outcome
// alone decides whether the breaker closes.
func (t Ticket) Probe() bool { return t.kind == kindProbe }

// New builds the breakers and registers their metrics. It fails on a
// missing Registerer, a registration conflict, or invalid key settings.
func New(opts Options) (*Set, error) {
	if err := validateKeys(opts.Keys); err != nil {
		return nil, err
	}
	m, err := newMetrics(opts.Registerer)
	if err != nil {
		return nil, err
	}
	s := &Set{now: opts.Now, rand: opts.Rand, onTransition: opts.OnTransition, metrics: m}
	if s.now == nil {
		s.now = time.Now
	}
	s.table.Store(s.buildTable(opts.Enabled, opts.Keys, nil))
	return s, nil
}

// validateKeys rejects what config validation should already have refused.
func validateKeys(keys []KeySettings) error {
	var errs []error
	seen := make(map[string]bool, len(keys))
	for i, k := range keys {
		switch {
		case k.Key == "":
			errs = append(errs, fmt.Errorf("breakerstate: key #%d: empty key", i))
		case seen[k.Key]:
			errs = append(errs, fmt.Errorf("breakerstate: key %q: listed twice", k.Key))
		case k.FailureThreshold < 1:
			errs = append(errs, fmt.Errorf("breakerstate: key %q: failure_threshold %d < 1", k.Key, k.FailureThreshold))
		case k.ResetTimeout < 0:
			errs = append(errs, fmt.Errorf("breakerstate: key %q: reset_timeout %s < 0", k.Key, k.ResetTimeout))
		case k.ResetTimeoutMax < 0:
			errs = append(errs, fmt.Errorf("breakerstate: key %q: reset_timeout_max %s < 0", k.Key, k.ResetTimeoutMax))
		case !(k.Jitter >= 0 && k.Jitter <= maxJitter): // also refuses NaN
			errs = append(errs, fmt.Errorf("breakerstate: key %q: jitter %v outside [0, %v]", k.Key, k.Jitter, maxJitter))
		}
		seen[k.Key] = true
	}
	return errors.Join(errs...)
}

// Enabled reports whether the breakers may reject requests.
func (s *Set) Enabled() bool { return s.table.Load().enabled }

// Allow asks key's breaker to admit one request. On success the caller must
// report the outcome with Ticket.Done. ErrOpen means rejected (counted as a
// rejection); ErrUnknownKey means the key is not configured.
func (s *Set) Allow(key string) (Ticket, error) {
	b := s.table.Load().byKey[key]
	if b == nil {
		return Ticket{}, ErrUnknownKey
	}
	return b.allow()
}

// Admit is Allow for the request path. A key that is not configured is
// admitted without a breaker (the zero Ticket): it can only mean that a
// reload removed the key between the request's classification and now, and
// such a request is better forwarded than refused.
func (s *Set) Admit(key string) (Ticket, error) {
	t, err := s.Allow(key)
	if errors.Is(err, ErrUnknownKey) {
		return Ticket{}, nil
	}
	return t, err
}

// Refuses reports whether Admit would refuse key now, without counting a
// refusal or taking the probe: Refusing with the fleet's probe gate. What it
// says holds only for the moment it was asked; a caller that acts on it
// counts the refusal with CountRefusal. An unknown key, a disabled set, or
// a breaker that would admit (closed, or its probe due) is not refused.
func (s *Set) Refuses(key string) bool {
	b := s.table.Load().byKey[key]
	if b == nil || b.fast.Load()&(fastOff|fastAdmit) != 0 {
		return false
	}
	refuses := false
	b.look(func() { refuses, _ = b.refuses(true) })
	return refuses
}

// CountRefusal counts one request refused by key's breaker on the word of
// Refuses, as Admit counts the requests it refuses.
func (s *Set) CountRefusal(key string) {
	b := s.table.Load().byKey[key]
	if b == nil {
		return
	}
	b.write(func() pending {
		b.reject()
		return pending{}
	})
}

// Force sets key's manual mode (docs/behaviour.md §4): ModeOpen keeps it open until
// released, ModeClosed keeps it closed while still counting failures, and
// ModeAuto returns it to automatic operation, closed with a count of 0.
func (s *Set) Force(key string, m Mode) error {
	if m > ModeClosed {
		return fmt.Errorf("force %q: mode %d: %w", key, uint8(m), ErrInvalidMode)
	}
	b := s.table.Load().byKey[key]
	if b == nil {
		return fmt.Errorf("force %q: %w", key, ErrUnknownKey)
	}
	if err := b.force(m, false); err != nil {
		return fmt.Errorf("force %q: %w", key, err)
	}
	return nil
}
