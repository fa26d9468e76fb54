package sharedstate

import (
	"errors"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

func TestDecodeMessage(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    message
		wantErr bool
	}{
		{in: `{"op":"open","key":"docker:https://r","until":1700000000000,"pod":"a"}`,
			want: message{Op: opOpen, Key: "docker:https://r", Until: 1700000000000, Pod: "a"}},
		{in: `{"op":"close","key":"cargo","pod":"b"}`, want: message{Op: opClose, Key: "cargo", Pod: "b"}},
		{in: `{"op":"force","key":"cargo","mode":"auto","pod":"b"}`, want: message{Op: opForce, Key: "cargo", Mode: "auto", Pod: "b"}},
		{in: `{"op":"open","key":"cargo","pod":"a"}`, wantErr: true},                     // no until
		{in: `{"op":"open","key":"cargo","until":-5}`, wantErr: true},                    // negative until
		{in: `{"op":"force","key":"cargo","mode":"sideways"}`, wantErr: true},            // bad mode
		{in: `{"op":"explode","key":"cargo"}`, wantErr: true},                            // bad op
		{in: `{"op":"close","key":""}`, wantErr: true},                                   // no key
		{in: `{"op":"close","key":"cargo"`, wantErr: true},                               // truncated
		{in: `["op","close"]`, wantErr: true},                                            // not an object
		{in: `{"op":"open","key":"cargo","until":"soon"}`, wantErr: true},                // wrong type
		{in: `{"op":"close","key":"x","extra":1}`, want: message{Op: opClose, Key: "x"}}, // unknown fields ignored
	} {
		got, err := decodeMessage([]byte(c.in))
		if c.wantErr {
			if !errors.Is(err, errBadMessage) {
				t.Errorf("decodeMessage(%s) err = %v, want errBadMessage", c.in, err)
			}
			continue
		}
		if err != nil || got != c.want {
			t.Errorf("decodeMessage(%s) = %+v, %v; want %+v", c.in, got, err, c.want)
		}
	}
}

func TestDecodeRecord(t *testing.T) {
	for _, c := range []struct {
		in      string
		want    record
		wantErr bool
	}{
		{in: `{"mode":"open","until":5,"pod":"a"}`, want: record{Mode: modeOpen, Until: 5, Pod: "a"}},
		{in: `{"mode":"forced_open"}`, want: record{Mode: modeForcedOpen}},
		{in: `{"mode":"forced_closed","pod":"x"}`, want: record{Mode: modeForcedClosed, Pod: "x"}},
		{in: `{"mode":"open"}`, wantErr: true},
		{in: `{"mode":"closed"}`, wantErr: true},
		{in: `garbage`, wantErr: true},
	} {
		got, err := decodeRecord([]byte(c.in))
		if (err != nil) != c.wantErr || (!c.wantErr && got != c.want) {
			t.Errorf("decodeRecord(%s) = %+v, %v", c.in, got, err)
		}
	}
}

// What encode writes, decode reads back.
func TestEncodeRoundTrip(t *testing.T) {
	until := time.UnixMilli(1700000000123)
	m := message{Op: opOpen, Key: "pypi:https://pypi.org/simple", Until: millis(until), Pod: "p"}
	got, err := decodeMessage([]byte(encode(m)))
	if err != nil || got != m || !fromMillis(got.Until).Equal(until) {
		t.Fatalf("round trip: %+v, %v", got, err)
	}
	for _, mode := range []breakerstate.Mode{breakerstate.ModeOpen, breakerstate.ModeClosed} {
		rec, ok := forcedRecord(mode, "p")
		back, err := decodeRecord([]byte(encode(rec)))
		if !ok || err != nil || back != rec {
			t.Fatalf("forced record %v: %+v %v", mode, back, err)
		}
	}
	if _, ok := forcedRecord(breakerstate.ModeAuto, "p"); ok {
		t.Fatal("auto has a record")
	}
}

// FuzzDecodeMessage: anyone who can publish on the channel controls the
// payload; decoding must never panic and must only accept valid messages.
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{
		`{"op":"open","key":"docker:https://r","until":1700000000000,"pod":"a"}`,
		`{"op":"close","key":"cargo","pod":"b"}`,
		`{"op":"force","key":"cargo","mode":"open","pod":"b"}`,
		`{"mode":"forced_open"}`, `{}`, `null`, `[`, `{"op":"open","until":1e400}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeMessage(data)
		if err == nil {
			if m.Key == "" || len(m.Key) > maxKeyLen || (m.Op == opOpen && m.Until <= 0) {
				t.Fatalf("accepted invalid message %+v", m)
			}
			if _, err := decodeMessage([]byte(encode(m))); err != nil {
				t.Fatalf("re-encoded message rejected: %v", err)
			}
		}
		_, _ = decodeRecord(data)
	})
}
