package cli

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

func probe(t *testing.T, opts ProbeOptions) (int, string) {
	t.Helper()
	if opts.Timeout == 0 {
		opts.Timeout = 5 * time.Second
	}
	if opts.Wait == 0 {
		opts.Wait = 5 * time.Millisecond
	}
	var out, errOut bytes.Buffer
	code := Probe(context.Background(), opts, &out, &errOut)
	return code, out.String() + errOut.String()
}

// TestProbeWaitsForReady: a /ready that answers 503 at first is asked again
// until it answers 200; one that never does fails the probe, naming it.
func TestProbeWaitsForReady(t *testing.T) {
	var calls atomic.Int32
	ready := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) < 3 {
			w.WriteHeader(http.StatusServiceUnavailable)
		}
	}))
	t.Cleanup(ready.Close)
	if code, out := probe(t, ProbeOptions{Ready: []string{ready.URL + "/ready"}}); code != ExitOK || calls.Load() != 3 {
		t.Fatalf("exit %d after %d calls: %s", code, calls.Load(), out)
	}
	never := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.WriteHeader(http.StatusServiceUnavailable)
	}))
	t.Cleanup(never.Close)
	code, out := probe(t, ProbeOptions{Ready: []string{never.URL + "/ready"}, Timeout: 100 * time.Millisecond})
	if code != ExitRuntime || !strings.Contains(out, never.URL+"/ready: not ready: status 503") {
		t.Fatalf("exit %d: %s", code, out)
	}
}

// TestProbeWantsTheProxysOwnAnswer: the request through the proxy carries
// the loop marker and only nora-breaker's 508 passes; any other answer on
// that address (another proxy, a web server) fails the probe.
func TestProbeWantsTheProxysOwnAnswer(t *testing.T) {
	fake := func(status int, body string) string {
		srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			if r.URL.String() != probeTarget || r.Header.Get("Via") != probeVia {
				http.Error(w, "unexpected request "+r.URL.String(), http.StatusBadRequest)
				return
			}
			w.WriteHeader(status)
			w.Write([]byte(body))
		}))
		t.Cleanup(srv.Close)
		return srv.URL
	}
	if code, out := probe(t, ProbeOptions{Proxy: fake(http.StatusLoopDetected, "nora-breaker: request loop detected\n")}); code != ExitOK {
		t.Fatalf("nora-breaker's answer refused: %s", out)
	}
	for _, tc := range []struct {
		status int
		body   string
	}{
		{http.StatusOK, "hello"},
		{http.StatusLoopDetected, "loop detected by squid"},
		{http.StatusForbidden, "nora-breaker: host is not an upstream"},
	} {
		if code, out := probe(t, ProbeOptions{Proxy: fake(tc.status, tc.body)}); code != ExitRuntime ||
			!strings.Contains(out, "want nora-breaker's own 508") {
			t.Errorf("%d %q: exit %d: %s", tc.status, tc.body, code, out)
		}
	}
}

// TestProbeSaysTheLastAnswerNotTheDeadline: when the deadline cuts a try
// short, the probe reports the answer before it (a 503), which is what an
// operator needs, not that time ran out (on a busy CI machine the 100 ms
// deadline of the test above ended inside a try).
func TestProbeSaysTheLastAnswerNotTheDeadline(t *testing.T) {
	var calls atomic.Int32
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if calls.Add(1) == 1 {
			w.WriteHeader(http.StatusServiceUnavailable)
			return
		}
		<-r.Context().Done() // every later try is cut by the deadline
	}))
	t.Cleanup(srv.Close)
	code, out := probe(t, ProbeOptions{Ready: []string{srv.URL + "/ready"}, Timeout: 300 * time.Millisecond})
	if code != ExitRuntime || !strings.Contains(out, srv.URL+"/ready: not ready: status 503") {
		t.Fatalf("exit %d: %s", code, out)
	}
}
