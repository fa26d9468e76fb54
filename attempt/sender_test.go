package attempt

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// rig is a Sender with real breakers on a fake clock and a loopback-only
// transport.
type rig struct {
	clock  *fakeClock
	set    *breakerstate.Set
	sender *Sender
	rt     http.RoundTripper
	reg    *prometheus.Registry
}

func newRig(t testing.TB, rt http.RoundTripper, keys ...string) *rig {
	t.Helper()
	r := &rig{clock: newFakeClock(), reg: prometheus.NewRegistry()}
	if rt == nil {
		tr := &http.Transport{Proxy: nil, DisableCompression: true}
		t.Cleanup(tr.CloseIdleConnections)
		rt = tr
	}
	r.rt = rt
	var ks []breakerstate.KeySettings
	for _, k := range keys {
		format, _, _ := strings.Cut(k, ":")
		ks = append(ks, breakerstate.KeySettings{Key: k, Format: format, FailureThreshold: 3,
			ResetTimeout: 30 * time.Second})
	}
	var err error
	r.set, err = breakerstate.New(breakerstate.Options{Enabled: true, Keys: ks, Now: r.clock.Now, Registerer: r.reg})
	if err != nil {
		t.Fatal(err)
	}
	if r.sender, err = NewSender(r.clock.Now, r.reg); err != nil {
		t.Fatal(err)
	}
	return r
}

// send makes one attempt at u through the rig's transport.
func (r *rig) send(req *http.Request, u *config.Upstream, t breakerstate.Ticket) (*http.Response, error) {
	return r.sender.Send(r.rt, req, Target{Key: u.Key, HeaderTimeout: u.ProxyTimeout, ReadTimeout: u.ReadTimeout}, t)
}

func (r *rig) snap(t testing.TB, key string) breakerstate.Snapshot {
	t.Helper()
	for _, s := range r.set.Snapshot() {
		if s.Key == key {
			return s
		}
	}
	t.Fatalf("no breaker %q", key)
	return breakerstate.Snapshot{}
}

func (r *rig) admit(t testing.TB, key string) breakerstate.Ticket {
	t.Helper()
	tk, err := r.set.Allow(key)
	if err != nil {
		t.Fatalf("Allow(%s): %v", key, err)
	}
	return tk
}

// preloadFailure records one failure so that a later Success (which resets
// the count) can be told apart from a Neutral (which leaves it).
func (r *rig) preloadFailure(t testing.TB, key string) {
	t.Helper()
	r.admit(t, key).Done(breakerstate.Failure)
	if n := r.snap(t, key).FailureCount; n != 1 {
		t.Fatalf("preload: count %d", n)
	}
}

// gate blocks handlers until the test releases it (or ends), so a server can
// be made to stall at a chosen point without sleeping.
type gate chan struct{}

func newGate() gate {
	return make(gate)
}

// release opens g when the test ends. Register it after the server's own
// cleanup, so it runs first and srv.Close does not wait on a handler that
// is still parked on the gate.
func (g gate) releaseAtEnd(t testing.TB) { t.Cleanup(func() { close(g) }) }

func newServer(t testing.TB, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(h)
	t.Cleanup(s.Close)
	return s
}

// newGatedServer is newServer whose handlers may park on g.
func newGatedServer(t testing.TB, g gate, h http.HandlerFunc) *httptest.Server {
	t.Helper()
	s := newServer(t, h)
	g.releaseAtEnd(t)
	return s
}

// shortBodyRT answers with a Content-Length larger than the body it gives.
type shortBodyRT struct{}

func (shortBodyRT) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: 200, Header: http.Header{}, ContentLength: 100, Request: req,
		Body: io.NopCloser(strings.NewReader("only ten b"))}, nil
}

func TestSenderShortBodyIsFailure(t *testing.T) {
	t.Run("ends before Content-Length", func(t *testing.T) {
		r := newRig(t, shortBodyRT{}, "maven:http://a.test")
		u := testkit.ConfigUpstream(t, "maven", "http://a.test")
		req := httptest.NewRequest(http.MethodGet, "http://a.test/x.jar", nil)
		resp, err := r.send(req, u, r.admit(t, u.Key))
		if err != nil {
			t.Fatal(err)
		}
		if n := r.snap(t, u.Key).FailureCount; n != 0 {
			t.Fatalf("reported before the body ended: count %d", n)
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if !errors.Is(err, errShortBody) {
			t.Fatalf("read error = %v, want errShortBody", err)
		}
		if n := r.snap(t, u.Key).FailureCount; n != 1 {
			t.Fatalf("failure count %d, want 1", n)
		}
	})
	t.Run("connection closed mid-body", func(t *testing.T) {
		srv := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
			w.Header().Set("Content-Length", "1000")
			io.WriteString(w, strings.Repeat("x", 100))
			w.(http.Flusher).Flush()
			conn, _, err := http.NewResponseController(w).Hijack()
			if err == nil {
				conn.Close()
			}
		})
		u := testkit.ConfigUpstream(t, "maven", srv.URL)
		r := newRig(t, nil, u.Key)
		req := httptest.NewRequest(http.MethodGet, srv.URL+"/x.jar", nil)
		resp, err := r.send(req, u, r.admit(t, u.Key))
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.ReadAll(resp.Body)
		resp.Body.Close()
		if err == nil {
			t.Fatal("short body read without error")
		}
		if n := r.snap(t, u.Key).FailureCount; n != 1 {
			t.Fatalf("failure count %d, want 1", n)
		}
	})
}

func TestSenderStalledBodyIsFailure(t *testing.T) {
	g := newGate()
	srv := newGatedServer(t, g, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Length", "1000")
		io.WriteString(w, "first bytes")
		w.(http.Flusher).Flush()
		select {
		case <-g:
		case <-r.Context().Done():
		}
	})
	u := testkit.ConfigUpstream(t, "docker", srv.URL)
	u.ReadTimeout = 50 * time.Millisecond
	r := newRig(t, nil, u.Key)
	resp, err := r.send(httptest.NewRequest(http.MethodGet, srv.URL+"/v2/a/blobs/sha256:1", nil), u,
		r.admit(t, u.Key))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if !errors.Is(err, errBodyStalled) {
		t.Fatalf("read error = %v, want errBodyStalled", err)
	}
	if string(body) != "first bytes" {
		t.Fatalf("body %q", body)
	}
	if n := r.snap(t, u.Key).FailureCount; n != 1 {
		t.Fatalf("failure count %d, want 1", n)
	}
}

func TestSenderClientCancelMidBodyIsNeutral(t *testing.T) {
	g := newGate()
	srv := newGatedServer(t, g, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "chunk one")
		w.(http.Flusher).Flush()
		select {
		case <-g:
		case <-r.Context().Done():
		}
	})
	u := testkit.ConfigUpstream(t, "maven", srv.URL)
	r := newRig(t, nil, u.Key)
	r.preloadFailure(t, u.Key)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req := httptest.NewRequest(http.MethodGet, srv.URL+"/x.jar", nil).WithContext(ctx)
	resp, err := r.send(req, u, r.admit(t, u.Key))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	buf := make([]byte, len("chunk one"))
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	cancel()
	if _, err := io.ReadAll(resp.Body); err == nil {
		t.Fatal("read after cancel succeeded")
	}
	// Neutral leaves the count alone; a success would have reset it and a
	// failure raised it.
	if n := r.snap(t, u.Key).FailureCount; n != 1 {
		t.Fatalf("failure count %d, want 1 (neutral)", n)
	}
}

func TestSenderSuccessReportedOnlyAtEOF(t *testing.T) {
	g := newGate()
	srv := newGatedServer(t, g, func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, "part one;")
		w.(http.Flusher).Flush()
		select {
		case <-g:
			io.WriteString(w, "part two")
		case <-r.Context().Done():
		}
	})
	u := testkit.ConfigUpstream(t, "maven", srv.URL)
	r := newRig(t, nil, u.Key)
	r.preloadFailure(t, u.Key)
	resp, err := r.send(httptest.NewRequest(http.MethodGet, srv.URL+"/x.jar", nil), u, r.admit(t, u.Key))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if n := r.snap(t, u.Key).FailureCount; n != 1 {
		t.Fatalf("after headers: count %d, want 1", n)
	}
	buf := make([]byte, len("part one;"))
	if _, err := io.ReadFull(resp.Body, buf); err != nil {
		t.Fatal(err)
	}
	if n := r.snap(t, u.Key).FailureCount; n != 1 {
		t.Fatalf("mid-body: count %d, want 1", n)
	}
	g <- struct{}{}
	rest, err := io.ReadAll(resp.Body)
	if err != nil || string(rest) != "part two" {
		t.Fatalf("rest %q, %v", rest, err)
	}
	if n := r.snap(t, u.Key).FailureCount; n != 0 {
		t.Fatalf("after EOF: count %d, want 0 (success)", n)
	}
}

// TestSenderHeaderTimeOutcomes covers answers whose outcome is known from the
// headers alone, and the header timeout.
func TestSenderHeaderTimeOutcomes(t *testing.T) {
	tests := []struct {
		name      string
		method    string
		status    int
		wantCount int // after one preloaded failure
		wantErr   error
	}{
		{"503 counts at once", http.MethodGet, 503, 2, nil},
		{"404 is alive", http.MethodGet, 404, 1, nil},
		{"429 is alive", http.MethodGet, 429, 1, nil},
		{"HEAD 200 succeeds at once", http.MethodHead, 200, 0, nil},
		{"304 succeeds at once", http.MethodGet, 304, 0, nil},
		{"204 succeeds at once", http.MethodGet, 204, 0, nil},
		{"no headers in time", http.MethodGet, 0, 2, ErrHeaderTimeout},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := newGate()
			srv := newGatedServer(t, g, func(w http.ResponseWriter, r *http.Request) {
				if tc.status == 0 {
					select {
					case <-g:
					case <-r.Context().Done():
					}
					return
				}
				w.Header().Set("Content-Length", "5")
				w.WriteHeader(tc.status)
				io.WriteString(w, "hello")
			})
			u := testkit.ConfigUpstream(t, "maven", srv.URL)
			u.ProxyTimeout = 50 * time.Millisecond
			r := newRig(t, nil, u.Key)
			r.preloadFailure(t, u.Key)
			resp, err := r.send(httptest.NewRequest(tc.method, srv.URL+"/x", nil), u, r.admit(t, u.Key))
			if tc.wantErr != nil {
				if !errors.Is(err, tc.wantErr) {
					t.Fatalf("err = %v, want %v", err, tc.wantErr)
				}
			} else if err != nil {
				t.Fatal(err)
			} else {
				defer resp.Body.Close()
			}
			if n := r.snap(t, u.Key).FailureCount; n != tc.wantCount {
				t.Fatalf("count %d, want %d (before reading any body)", n, tc.wantCount)
			}
		})
	}
}

func TestSenderCloseBeforeEOFIsNeutral(t *testing.T) {
	srv := newServer(t, func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, strings.Repeat("y", 64<<10))
	})
	u := testkit.ConfigUpstream(t, "maven", srv.URL)
	r := newRig(t, nil, u.Key)
	r.preloadFailure(t, u.Key)
	resp, err := r.send(httptest.NewRequest(http.MethodGet, srv.URL+"/x", nil), u, r.admit(t, u.Key))
	if err != nil {
		t.Fatal(err)
	}
	io.CopyN(io.Discard, resp.Body, 10)
	resp.Body.Close()
	if n := r.snap(t, u.Key).FailureCount; n != 1 {
		t.Fatalf("count %d, want 1 (neutral)", n)
	}
	// A second Close or a late Read must not report again.
	resp.Body.Close()
	if n := r.snap(t, u.Key).FailureCount; n != 1 {
		t.Fatalf("count %d after second close", n)
	}
}

// fakeClock is the injected clock: tests move time instead of sleeping.
type fakeClock = testkit.Clock

func newFakeClock() *fakeClock {
	return testkit.NewClockAt(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
}
