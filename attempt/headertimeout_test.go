package attempt

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// pacedBody is a client sending its body in pieces, pause apart.
type pacedBody struct {
	pieces int
	pause  time.Duration
}

func (b *pacedBody) Read(p []byte) (int, error) {
	if b.pieces == 0 {
		return 0, io.EOF
	}
	time.Sleep(b.pause)
	b.pieces--
	return copy(p, "0123456789"), nil
}

func (b *pacedBody) Close() error { return nil }

// upstream reads the whole body (each piece as it comes), then answers
// after answerIn, or fails when its context ends first.
func upstream(answerIn time.Duration) roundTripFunc {
	return func(r *http.Request) (*http.Response, error) {
		if r.Body != nil {
			if _, err := io.Copy(io.Discard, r.Body); err != nil {
				return nil, err
			}
		}
		select {
		case <-time.After(answerIn):
			return &http.Response{StatusCode: 200, Header: http.Header{}, Body: http.NoBody}, nil
		case <-r.Context().Done():
			return nil, r.Context().Err()
		}
	}
}

// TestHeaderWaitCountsOnlyTheUpstream: a client that takes 5 s to send its
// body never runs down a 1 s header wait (issue 20, point 2: a slow upload
// was charged to the upstream), while an upstream that sits on a fully sent
// request for longer than the wait does.
func TestHeaderWaitCountsOnlyTheUpstream(t *testing.T) {
	cases := []struct {
		name     string
		body     io.ReadCloser
		answerIn time.Duration
		timeout  bool
	}{
		{"slow upload, prompt answer", &pacedBody{pieces: 10, pause: 500 * time.Millisecond}, 200 * time.Millisecond, false},
		{"slow upload, slow answer", &pacedBody{pieces: 10, pause: 500 * time.Millisecond}, 2 * time.Second, true},
		{"no body, slow answer", nil, 2 * time.Second, true},
		{"no body, prompt answer", nil, 900 * time.Millisecond, false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				req, _ := http.NewRequest(http.MethodPut, "http://up.test/x", nil)
				if tc.body != nil {
					req.Body = tc.body
				}
				resp, _, release, err := RoundTripWithin(upstream(tc.answerIn), req, time.Second)
				if tc.timeout {
					if !errors.Is(err, ErrHeaderTimeout) {
						t.Fatalf("err = %v, want the header timeout", err)
					}
					return
				}
				if err != nil {
					t.Fatalf("err = %v after the upstream answered within its second", err)
				}
				resp.Body.Close()
				release(nil)
			})
		})
	}
}

// TestBoundIsTheProxys: a bound of the proxy's own on the header wait
// (Target.Bound: the fallback search's) that runs out first gives the
// attempt up with its cause, neutral for the upstream's breaker; a
// proxy_timeout that runs out first is still the upstream's failure.
func TestBoundIsTheProxys(t *testing.T) {
	const key = "maven:http://up.test"
	given := fmt.Errorf("%w: the test's bound", ErrCancelled)
	cases := []struct {
		name     string
		header   time.Duration
		bound    time.Duration
		answerIn time.Duration
		wantErr  error // nil: the answer
		want     breakerstate.Outcome
	}{
		{"bound first", 5 * time.Second, time.Second, 2 * time.Second, given, breakerstate.Neutral},
		{"answer within the bound", 5 * time.Second, time.Second, 500 * time.Millisecond, nil, breakerstate.Success},
		{"proxy_timeout first", time.Second, 0, 2 * time.Second, ErrHeaderTimeout, breakerstate.Failure},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				r := newRig(t, nil, key)
				req, _ := http.NewRequest(http.MethodGet, "http://up.test/x", nil)
				target := Target{Key: key, HeaderTimeout: tc.header, Bound: Bound{After: tc.bound, Cause: given}}
				resp, err := r.sender.Send(upstream(tc.answerIn), req, target, r.admit(t, key))
				if tc.wantErr == nil {
					if err != nil {
						t.Fatalf("err = %v, want the answer", err)
					}
					resp.Body.Close()
				} else if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
				if got := Decide(resp, err, req.Context()); got != tc.want {
					t.Errorf("verdict %s, want %s", got, tc.want)
				}
				want := 0
				if tc.want == breakerstate.Failure {
					want = 1
				}
				if n := r.snap(t, key).FailureCount; n != want {
					t.Errorf("failure count %d, want %d", n, want)
				}
			})
		})
	}
}

// TestUnaskedSwitchIsABrokenAnswer: a 101 is accepted only as the answer to
// a request that asked to switch to that protocol (issue 20, point 1).
func TestUnaskedSwitchIsABrokenAnswer(t *testing.T) {
	switchTo := func(proto string) roundTripFunc {
		return func(r *http.Request) (*http.Response, error) {
			return &http.Response{StatusCode: http.StatusSwitchingProtocols,
				Header: http.Header{"Upgrade": {proto}, "Connection": {"Upgrade"}},
				Body:   io.NopCloser(strings.NewReader(""))}, nil
		}
	}
	cases := []struct {
		name       string
		connection string
		upgrade    string
		answer     string
		ok         bool
	}{
		{"plain GET", "", "", "websocket", false},
		{"upgrade offered without Connection: upgrade", "", "websocket", "websocket", false},
		{"another protocol than offered", "Upgrade", "websocket", "h2c", false},
		{"websocket asked for", "keep-alive, Upgrade", "websocket", "WebSocket", true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			req, _ := http.NewRequest(http.MethodGet, "http://up.test/ws", nil)
			if tc.connection != "" {
				req.Header.Set("Connection", tc.connection)
			}
			if tc.upgrade != "" {
				req.Header.Set("Upgrade", tc.upgrade)
			}
			resp, _, release, err := RoundTripWithin(switchTo(tc.answer), req, time.Second)
			if !tc.ok {
				if !errors.Is(err, ErrUnaskedSwitch) {
					t.Fatalf("err = %v, want ErrUnaskedSwitch", err)
				}
				if Decide(nil, err, context.Background()) != breakerstate.Failure {
					t.Fatal("an unasked switch is not counted as the upstream's failure")
				}
				return
			}
			if err != nil || resp.StatusCode != 101 {
				t.Fatalf("asked-for switch: %v %v", resp, err)
			}
			release(nil)
		})
	}
}

// TestUpstreamCannotSpeakForTheProxy: an upstream's headers in the
// proxy's own namespace are dropped (issue 20, point 6).
func TestUpstreamCannotSpeakForTheProxy(t *testing.T) {
	rt := roundTripFunc(func(r *http.Request) (*http.Response, error) {
		return &http.Response{StatusCode: 200, Body: http.NoBody, Header: http.Header{
			"X-Nora-Stale": {"true"}, "X-Nora-Upstream": {"maven:https://evil"}, "X-Nora-Breaker-State": {"open"},
			"X-Norabc": {"kept"}, "Etag": {`"1"`}}, Trailer: http.Header{"X-Nora-Stale": {"true"}}}, nil
	})
	req, _ := http.NewRequest(http.MethodGet, "http://up.test/x", nil)
	resp, _, release, err := RoundTripWithin(rt, req, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer release(nil)
	for k := range resp.Header {
		if strings.HasPrefix(strings.ToLower(k), "x-nora-") {
			t.Errorf("%s reached the client from an upstream", k)
		}
	}
	if resp.Header.Get("Etag") == "" || resp.Header.Get("X-Norabc") == "" || len(resp.Trailer) != 0 {
		t.Errorf("headers after stripping: %v, trailer %v", resp.Header, resp.Trailer)
	}
}
