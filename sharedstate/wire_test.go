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
		// Since issue 21: the wait instead of a wall-clock time, the growth,
		// and the fleet's counts.
		{in: `{"op":"open","key":"cargo","in":30000,"probes":2,"until":1700000000000,"pod":"a"}`,
			want: message{Op: opOpen, Key: "cargo", In: ms(30000), Probes: 2, Until: 1700000000000, Pod: "a"}},
		{in: `{"op":"open","key":"cargo","in":0,"pod":"a"}`, want: message{Op: opOpen, Key: "cargo", In: ms(0), Pod: "a"}},
		{in: `{"op":"fail","key":"cargo","pod":"a"}`, want: message{Op: opFail, Key: "cargo", Pod: "a"}},
		{in: `{"op":"ok","key":"cargo","pod":"a"}`, want: message{Op: opOK, Key: "cargo", Pod: "a"}},
		{in: `{"op":"open","key":"cargo","in":-1,"pod":"a"}`, wantErr: true},             // negative wait
		{in: `{"op":"open","key":"cargo","in":86400001,"pod":"a"}`, wantErr: true},       // more than a day
		{in: `{"op":"open","key":"cargo","in":5,"probes":-1,"pod":"a"}`, wantErr: true},  // negative growth
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
		if err != nil || !sameMessage(got, c.want) {
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
		{in: `{"mode":"open","until":5,"probes":3,"pod":"a"}`, want: record{Mode: modeOpen, Until: 5, Probes: 3, Pod: "a"}},
		{in: `{"mode":"open","until":5,"probes":-3}`, wantErr: true},
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
	m := message{Op: opOpen, Key: "pypi:https://pypi.org/simple", In: ms(29500), Probes: 3, Until: 1700000000123, Pod: "p"}
	got, err := decodeMessage([]byte(encode(m)))
	if err != nil || !sameMessage(got, m) {
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

// A message's wait: In when it has one; else its Until against the
// reader's clock, refused more than a day away either way.
func TestMessageWait(t *testing.T) {
	now := time.UnixMilli(1700000000000)
	for _, c := range []struct {
		m    message
		want time.Duration
		ok   bool
	}{
		{message{In: ms(30000), Until: now.Add(time.Hour).UnixMilli()}, 30 * time.Second, true},
		{message{Until: now.Add(3630 * time.Second).UnixMilli()}, 3630 * time.Second, true}, // bounded later
		{message{Until: now.Add(-time.Second).UnixMilli()}, -time.Second, true},
		{message{Until: now.Add(25 * time.Hour).UnixMilli()}, 25 * time.Hour, false},
		{message{Until: now.Add(-25 * time.Hour).UnixMilli()}, -25 * time.Hour, false},
	} {
		if got, ok := c.m.wait(now); got != c.want || ok != c.ok {
			t.Errorf("%+v: wait %v %v, want %v %v", c.m, got, ok, c.want, c.ok)
		}
	}
}

func ms(v int64) *int64 { return &v }

// sameMessage compares messages by value, In included.
func sameMessage(a, b message) bool {
	ai, bi := a.In, b.In
	a.In, b.In = nil, nil
	return a == b && (ai == nil) == (bi == nil) && (ai == nil || *ai == *bi)
}

// FuzzDecodeMessage: anyone who can publish on the channel controls the
// payload; decoding must never panic and must only accept valid messages.
func FuzzDecodeMessage(f *testing.F) {
	for _, s := range []string{
		`{"op":"open","key":"docker:https://r","until":1700000000000,"pod":"a"}`,
		`{"op":"close","key":"cargo","pod":"b"}`,
		`{"op":"force","key":"cargo","mode":"open","pod":"b"}`,
		`{"op":"open","key":"cargo","in":30000,"probes":2,"until":1700000000000,"pod":"a"}`,
		`{"op":"fail","key":"cargo","pod":"a"}`,
		`{"mode":"forced_open"}`, `{}`, `null`, `[`, `{"op":"open","until":1e400}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := decodeMessage(data)
		if err == nil {
			if m.Key == "" || len(m.Key) > maxKeyLen || (m.Op == opOpen && m.In == nil && m.Until <= 0) ||
				(m.In != nil && (*m.In < 0 || *m.In > maxRemoteWait.Milliseconds())) {
				t.Fatalf("accepted invalid message %+v", m)
			}
			if _, err := decodeMessage([]byte(encode(m))); err != nil {
				t.Fatalf("re-encoded message rejected: %v", err)
			}
		}
		_, _ = decodeRecord(data)
	})
}
