package breakerstate

import (
	"errors"
	"fmt"
)

// State is a breaker's state. The numeric values are the values exported by
// the nora_circuit_breaker_state gauge, so they must not be renumbered.
type State uint8

const (
	// Closed lets every request through and counts consecutive failures.
	Closed State = 0
	// Open rejects every request until its open time (reset_timeout,
	// grown by failed probes and jittered) has passed since the last
	// failure.
	Open State = 1
	// HalfOpen lets exactly one probe through; its outcome decides between
	// Closed and Open.
	HalfOpen State = 2
)

// numStates sizes per-state arrays (transition counters).
const numStates = 3

// String returns the name used in metrics labels, logs and the admin API.
func (s State) String() string {
	switch s {
	case Closed:
		return "closed"
	case Open:
		return "open"
	case HalfOpen:
		return "half_open"
	}
	return fmt.Sprintf("State(%d)", uint8(s))
}

// Outcome is what one attempt at an upstream meant for its breaker (docs/behaviour.md §5.1).
type Outcome uint8

const (
	// Success is a 2xx or 3xx answer: the upstream works.
	Success Outcome = iota
	// Failure is a connection, TLS or timeout error, a 5xx, or a broken body.
	Failure
	// Alive is any 4xx: the upstream answered, so it is up, but a 4xx says
	// nothing about whether earlier failures are over (it does not reset the
	// count), except for a probe, where any answer proves the upstream is back.
	Alive
	// Neutral means the client went away before the upstream answered; it
	// tells nothing about the upstream.
	Neutral
)

// String returns a lower-case name for logs.
func (o Outcome) String() string {
	switch o {
	case Success:
		return "success"
	case Failure:
		return "failure"
	case Alive:
		return "alive"
	case Neutral:
		return "neutral"
	}
	return fmt.Sprintf("Outcome(%d)", uint8(o))
}

// Mode is the manual control of one breaker (docs/behaviour.md §4, /breakers/force).
type Mode uint8

const (
	// ModeAuto is normal operation: the state machine decides.
	ModeAuto Mode = iota
	// ModeOpen keeps the breaker open (every request rejected) until the
	// operator releases it.
	ModeOpen
	// ModeClosed keeps the breaker closed: failures are still counted, so an
	// operator can see them, but they never open it.
	ModeClosed
)

// ErrInvalidMode is returned by ParseMode and Force for a mode that is not
// "open", "closed" or "auto".
var ErrInvalidMode = errors.New("invalid breaker mode (want open, closed or auto)")

// String returns the name accepted by ParseMode.
func (m Mode) String() string {
	switch m {
	case ModeAuto:
		return "auto"
	case ModeOpen:
		return "open"
	case ModeClosed:
		return "closed"
	}
	return fmt.Sprintf("Mode(%d)", uint8(m))
}

// ParseMode turns the admin API's state parameter into a Mode.
func ParseMode(s string) (Mode, error) {
	switch s {
	case "auto":
		return ModeAuto, nil
	case "open":
		return ModeOpen, nil
	case "closed":
		return ModeClosed, nil
	}
	return 0, fmt.Errorf("breaker mode %q: %w", s, ErrInvalidMode)
}

// forcedName is the Snapshot.Forced value of a mode: "" when automatic.
func forcedName(m Mode) string {
	if m == ModeAuto {
		return ""
	}
	return m.String()
}
