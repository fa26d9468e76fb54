package proxy

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// Helpers of the integration tests (classify, transparent, intercept,
// tunnel, admin, hygiene, security, log). Names start with "ix" so they
// cannot collide with other test files of the package.

// ixMaven is a config with one maven upstream at base+"/maven2": breaker on
// (or off), threshold 3, reset 10 s, proxy_timeout 1 s. extra is appended and
// must start with its own table header.
func ixMaven(base string, enabled bool, extra string) string {
	return fmt.Sprintf(`
[circuit_breaker]
enabled = %v
failure_threshold = 3
reset_timeout = 10
[registries]
enable = "maven"
[maven]
proxies = ["%s/maven2"]
proxy_timeout = 1
%s`, enabled, base, extra)
}

// ixKey is the breaker key of ixMaven's upstream.
func ixKey(base string) string { return "maven:" + base + "/maven2" }

// ixDo sends one request and returns the response with its body read.
func ixDo(t testing.TB, c *http.Client, method, url string, hdr http.Header) (*http.Response, string) {
	t.Helper()
	var body io.Reader
	if method == http.MethodPost || method == http.MethodPut {
		body = strings.NewReader("payload")
	}
	req, err := http.NewRequest(method, url, body)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range hdr {
		req.Header[k] = v
	}
	resp, err := c.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("%s %s: reading body: %v", method, url, err)
	}
	return resp, string(b)
}

// ixState returns the state of key's breaker.
func ixState(t testing.TB, tp *testProxy, key string) breakerstate.Snapshot {
	t.Helper()
	for _, s := range tp.Breakers().Snapshot() {
		if s.Key == key {
			return s
		}
	}
	t.Fatalf("no breaker %q", key)
	return breakerstate.Snapshot{}
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
