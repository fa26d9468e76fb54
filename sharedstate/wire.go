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
	opOpen  = "open"  // the key is open until Until
	opClose = "close" // the fleet's probe succeeded (or a late success closed it)
	opForce = "force" // an operator set Mode through the admin API
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

// errBadMessage is wrapped by every decoding error.
var errBadMessage = errors.New("bad shared-state message")

// message is one published transition. Pod identifies the sender so that a
// process ignores its own messages.
type message struct {
	Op    string `json:"op"`
	Key   string `json:"key"`
	Until int64  `json:"until,omitempty"` // open_until, Unix milliseconds (op open)
	Mode  string `json:"mode,omitempty"`  // "open", "closed" or "auto" (op force)
	Pod   string `json:"pod"`
}

// record is the value stored at <prefix>:state:<key>. No record means the
// fleet considers the key closed and automatic.
type record struct {
	Mode  string `json:"mode"`
	Until int64  `json:"until,omitempty"` // Unix milliseconds (mode open)
	Pod   string `json:"pod,omitempty"`
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
		if m.Until <= 0 {
			return message{}, fmt.Errorf("%w: open without until", errBadMessage)
		}
	case opClose:
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
		if r.Until <= 0 {
			return record{}, fmt.Errorf("%w: open record without until", errBadMessage)
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

// millis and fromMillis convert open_until to and from the wire.
func millis(t time.Time) int64 { return t.UnixMilli() }

func fromMillis(ms int64) time.Time { return time.UnixMilli(ms) }

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
