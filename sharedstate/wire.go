package sharedstate

import (
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// Message operations published on the events channel.
const (
	opOpen  = "open"  // the key is open: its probe falls due In from now
	opClose = "close" // the fleet's probe succeeded (or a late success closed it)
	opForce = "force" // an operator set Mode through the admin API
	opFail  = "fail"  // a process counted a failure of the key while closed
	opOK    = "ok"    // a process's success ended a run of failures of the key
)

// Stored modes of a key's state record.
const (
	modeOpen         = "open"
	modeForcedOpen   = "forced_open"
	modeForcedClosed = "forced_closed"
)

// maxKeyLen bounds the breaker keys accepted from the wire; configured keys
// are a format and a URL, far below it.
const maxKeyLen = 2048

// maxRemoteWait is the farthest from now a time from the wire may lie: a
// wait, an open_until or a clock further off than a day is absurd (a broken
// clock or a forged message) and the message or record is ignored. Nearer
// values are still cut to this process's own longest open period by
// breakerstate.Set.ApplyRemoteOpen.
const maxRemoteWait = 24 * time.Hour

// maxProbes bounds the failed-probe count accepted from the wire; the
// breakers cap what they keep far lower.
const maxProbes = 1 << 16

// errBadMessage is wrapped by every decoding error.
var errBadMessage = errors.New("bad shared-state message")

// message is one published transition. Pod identifies the sender so that a
// process ignores its own messages.
//
// An open carries the time left until the sender's probe falls due (In,
// milliseconds), so that no reader has to trust a wall clock. Until is kept
// for the processes of a rolling upgrade that predate In: it is open_until
// on Redis's clock (the script that publishes computes it), and a message
// from such an older process carries only an Until on its own clock, which
// is read against this process's wall clock and bounded.
type message struct {
	Op     string `json:"op"`
	Key    string `json:"key"`
	In     *int64 `json:"in,omitempty"`     // ms until the probe (op open)
	Probes int    `json:"probes,omitempty"` // failed probes of the outage (op open)
	Until  int64  `json:"until,omitempty"`  // open_until, Unix ms (op open; older readers)
	Mode   string `json:"mode,omitempty"`   // "open", "closed" or "auto" (op force)
	Pod    string `json:"pod"`
}

// record is the value stored at <prefix>:state:<key>. No record means the
// fleet considers the key closed and automatic. Until is open_until on
// Redis's clock, which a reader compares with Redis's TIME, never with its
// own clock; older processes wrote their own clock's value, which the same
// reading bounds.
type record struct {
	Mode   string `json:"mode"`
	Until  int64  `json:"until,omitempty"`  // Unix milliseconds (mode open)
	Probes int    `json:"probes,omitempty"` // failed probes (mode open)
	Pod    string `json:"pod,omitempty"`
}

// decodeMessage parses and checks a published payload. Payloads come from
// whoever can publish on the channel, so nothing in them is trusted.
func decodeMessage(payload []byte) (message, error) {
	var m message
	if err := json.Unmarshal(payload, &m); err != nil {
		return message{}, fmt.Errorf("%w: %v", errBadMessage, err)
	}
	if m.Key == "" || len(m.Key) > maxKeyLen {
		return message{}, fmt.Errorf("%w: key length %d", errBadMessage, len(m.Key))
	}
	switch m.Op {
	case opOpen:
		switch {
		case m.In == nil && m.Until <= 0:
			return message{}, fmt.Errorf("%w: open without in or until", errBadMessage)
		case m.In != nil && (*m.In < 0 || *m.In > maxRemoteWait.Milliseconds()):
			return message{}, fmt.Errorf("%w: open in %d ms", errBadMessage, *m.In)
		case m.Probes < 0 || m.Probes > maxProbes:
			return message{}, fmt.Errorf("%w: %d failed probes", errBadMessage, m.Probes)
		}
	case opClose, opFail, opOK:
	case opForce:
		if _, err := breakerstate.ParseMode(m.Mode); err != nil {
			return message{}, fmt.Errorf("%w: %v", errBadMessage, err)
		}
	default:
		return message{}, fmt.Errorf("%w: op %q", errBadMessage, m.Op)
	}
	return m, nil
}

// decodeRecord parses a stored state record.
func decodeRecord(data []byte) (record, error) {
	var r record
	if err := json.Unmarshal(data, &r); err != nil {
		return record{}, fmt.Errorf("%w: %v", errBadMessage, err)
	}
	switch r.Mode {
	case modeOpen:
		if r.Until <= 0 || r.Probes < 0 || r.Probes > maxProbes {
			return record{}, fmt.Errorf("%w: open record with until %d, %d failed probes", errBadMessage, r.Until, r.Probes)
		}
	case modeForcedOpen, modeForcedClosed:
	default:
		return record{}, fmt.Errorf("%w: mode %q", errBadMessage, r.Mode)
	}
	return r, nil
}

// encode marshals a message or record; both are plain structs, so it
// cannot fail.
func encode(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

// wait is how long after now the sender's probe falls due: In when the
// message has it, else its Until read against now (the wall clock of this
// process, for an older sender). ok is false when that lies further than
// maxRemoteWait from now either way.
func (m message) wait(now time.Time) (time.Duration, bool) {
	if m.In != nil {
		return time.Duration(*m.In) * time.Millisecond, true
	}
	return untilFrom(m.Until, now)
}

// untilFrom is how long after now the Unix-millisecond time until lies,
// and whether that is within maxRemoteWait either way. now must be a
// wall-clock reading of the same clock until was written on (Redis's TIME
// for a record); the subtraction is then on wall-clock values, which is
// what comparing two clocks' readings means.
func untilFrom(until int64, now time.Time) (time.Duration, bool) {
	d := time.UnixMilli(until).Sub(now)
	return d, d.Abs() <= maxRemoteWait
}

// forcedRecord is the record of a manual mode; ModeAuto has none.
func forcedRecord(m breakerstate.Mode, pod string) (record, bool) {
	switch m {
	case breakerstate.ModeOpen:
		return record{Mode: modeForcedOpen, Pod: pod}, true
	case breakerstate.ModeClosed:
		return record{Mode: modeForcedClosed, Pod: pod}, true
	}
	return record{}, false
}
