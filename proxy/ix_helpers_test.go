package proxy

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// Helpers of the integration tests (classify, transparent, intercept,
// tunnel, admin, hygiene, security, log). Names start with "ix" so they
// cannot collide with other test files of the package.

// ixMaven is a config with one maven upstream at base+"/maven2": breaker on
// (or off), threshold 3, reset 10 s, proxy_timeout 1 s. extra is appended and
// must start with its own table header.
func ixMaven(base string, enabled bool, extra string) string {
	return ixMavenWithin(base, enabled, 1, extra)
}

// ixMavenWithin is ixMaven with a proxy_timeout of its own, in seconds.
func ixMavenWithin(base string, enabled bool, proxyTimeout int, extra string) string {
	return fmt.Sprintf(`
[circuit_breaker]
enabled = %v
failure_threshold = 3
reset_timeout = 10
[registries]
enable = "maven"
[maven]
proxies = ["%s/maven2"]
proxy_timeout = %d
%s`, enabled, base, proxyTimeout, extra)
}

// ixKey is the breaker key of ixMaven's upstream.
func ixKey(base string) string { return "maven:" + base + "/maven2" }

// request sends one request (POST and PUT carry a small body) and returns
// the response with its body read.
func request(t testing.TB, c *http.Client, method, url string, hdr http.Header) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost || method == http.MethodPut {
		body = strings.NewReader("payload")
	}
	return doRequest(t, c, method, url, body, hdr)
}

// ixWant503 checks a synthesized breaker rejection.
func ixWant503(t testing.TB, resp *http.Response, key, state, retryAfter string) {
	t.Helper()
	h := resp.Header
	if resp.StatusCode != http.StatusServiceUnavailable || h.Get("Retry-After") != retryAfter ||
		h.Get("X-Nora-Breaker-Key") != key || h.Get("X-Nora-Breaker-State") != state {
		t.Fatalf("want 503 Retry-After %s key %s state %s, got %d %v", retryAfter, key, state, resp.StatusCode, h)
	}
}

// ixLogWatch is a log sink that lets a test wait for a line: a request's log
// line is written when its body is done, which can be just after the client
// has read the answer.
type ixLogWatch struct {
	mu      sync.Mutex
	buf     bytes.Buffer
	changed chan struct{} // closed and replaced on every write
}

func (w *ixLogWatch) Write(p []byte) (int, error) {
	w.mu.Lock()
	defer w.mu.Unlock()
	w.buf.Write(p)
	if w.changed != nil {
		close(w.changed)
	}
	w.changed = make(chan struct{})
	return len(p), nil
}

// waitFor blocks until the log contains substr and returns the whole log.
func (w *ixLogWatch) waitFor(t testing.TB, substr string) string {
	t.Helper()
	return w.waitForN(t, substr, 1)
}

// waitForN blocks until the log contains substr n times.
func (w *ixLogWatch) waitForN(t testing.TB, substr string, n int) string {
	t.Helper()
	timeout := time.After(5 * time.Second)
	for {
		w.mu.Lock()
		s := w.buf.String()
		if w.changed == nil {
			w.changed = make(chan struct{})
		}
		ch := w.changed
		w.mu.Unlock()
		if strings.Count(s, substr) >= n {
			return s
		}
		select {
		case <-ch:
		case <-timeout:
			t.Fatalf("log never contained %q %d times:\n%s", substr, n, s)
		}
	}
}

// ixStartProxy is startProxy with a log sink tests can wait on.
func ixStartProxy(t testing.TB, tomlText string) (*testProxy, *ixLogWatch) {
	t.Helper()
	logs, watch := &testkit.SyncBuffer{}, &ixLogWatch{}
	tp := ixServe(t, tomlText, zerolog.New(io.MultiWriter(logs, watch)).Level(zerolog.DebugLevel))
	tp.Logs = logs
	return tp, watch
}

// ixServe starts a proxy for tomlText with the given logger on loopback and
// stops it when the test ends. tp.Logs is left nil.
func ixServe(t testing.TB, tomlText string, log zerolog.Logger) *testProxy {
	t.Helper()
	return startProxyLogged(t, testkit.LoadConfig(t, tomlText, nil), log)
}
