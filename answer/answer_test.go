package answer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/attempt"
)

func TestSynthRetryAfterSeconds(t *testing.T) {
	tests := []struct {
		d    time.Duration
		want int
	}{
		{0, 1}, {-time.Second, 1}, {time.Millisecond, 1}, {time.Second, 1},
		{time.Second + time.Nanosecond, 2}, {19500 * time.Millisecond, 20}, {30 * time.Second, 30},
	}
	for _, tc := range tests {
		if got := RetryAfter(tc.d, 0); got != tc.want {
			t.Errorf("RetryAfter(%v, no limit) = %d, want %d", tc.d, got, tc.want)
		}
	}
}

// TestRetryAfterMax: a wait longer than the format's limit is said as 1 s
// (issue 22, point 2: pip slept a 120 s Retry-After five times per page), a
// shorter one as it is; the body keeps the true wait.
func TestRetryAfterMax(t *testing.T) {
	for _, tc := range []struct {
		wait, max time.Duration
		want      int
	}{
		{120 * time.Second, time.Second, 1},
		{120 * time.Second, 5 * time.Second, 1},
		{4 * time.Second, 5 * time.Second, 4},
		{5 * time.Second, 5 * time.Second, 5},
		{1500 * time.Millisecond, time.Second, 1},
		{120 * time.Second, 0, 120},
	} {
		if got := RetryAfter(tc.wait, tc.max); got != tc.want {
			t.Errorf("RetryAfter(%v, %v) = %d, want %d", tc.wait, tc.max, got, tc.want)
		}
	}
	req := httptest.NewRequest(http.MethodGet, "https://pypi.org/simple/requests/", nil)
	resp := Unavailable(req, "pypi", "pypi:https://pypi.org/simple", "open", 120*time.Second, time.Second)
	if body := readBody(t, resp); resp.Header.Get("Retry-After") != "1" || !strings.Contains(body, "120 s") {
		t.Errorf("503: Retry-After %q, body %q; want 1 and the true 120 s in the body", resp.Header.Get("Retry-After"), body)
	}
	throttled := TooManyRequests(req, "maven", "maven:https://repo1", 90*time.Second, 0)
	if throttled.StatusCode != http.StatusServiceUnavailable || throttled.Header.Get("Retry-After") != "90" {
		t.Errorf("maven's throttled answer: %d Retry-After %q, want 503 (mvn backs a 429 off for minutes) and 90",
			throttled.StatusCode, throttled.Header.Get("Retry-After"))
	}
	if tm := TooManyRequests(req, "pypi", "pypi:https://pypi.org/simple", 90*time.Second, time.Second); tm.StatusCode != 429 ||
		tm.Header.Get("Retry-After") != "1" {
		t.Errorf("pypi's throttled answer: %d Retry-After %q, want 429 and 1", tm.StatusCode, tm.Header.Get("Retry-After"))
	}
}

func readBody(t *testing.T, resp *http.Response) string {
	t.Helper()
	b, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	if err != nil {
		t.Fatal(err)
	}
	if resp.ContentLength != int64(len(b)) && resp.Request.Method != http.MethodHead {
		t.Errorf("ContentLength %d, body %d bytes", resp.ContentLength, len(b))
	}
	return string(b)
}

func TestSynthUnavailableDialects(t *testing.T) {
	tests := []struct {
		format    string
		wantCType string
		check     func(t *testing.T, body string)
	}{
		{"docker", "application/json", func(t *testing.T, body string) {
			var v struct {
				Errors []struct{ Code, Message string } `json:"errors"`
			}
			if err := json.Unmarshal([]byte(body), &v); err != nil || len(v.Errors) != 1 ||
				v.Errors[0].Code != "UNAVAILABLE" || !strings.Contains(v.Errors[0].Message, "docker:https://hub") {
				t.Errorf("OCI body %q (%v)", body, err)
			}
		}},
		{"npm", "application/json", func(t *testing.T, body string) {
			var v map[string]string
			if err := json.Unmarshal([]byte(body), &v); err != nil || !strings.Contains(v["error"], "npm:https://hub") {
				t.Errorf("npm body %q (%v)", body, err)
			}
		}},
		{"pypi", "text/plain; charset=utf-8", func(t *testing.T, body string) {
			if strings.Count(body, "\n") != 1 || !strings.Contains(body, "pypi:https://hub") {
				t.Errorf("text body %q", body)
			}
		}},
	}
	for _, tc := range tests {
		t.Run(tc.format, func(t *testing.T) {
			req := httptest.NewRequest(http.MethodGet, "http://hub/x", nil)
			key := tc.format + ":https://hub"
			resp := Unavailable(req, tc.format, key, "open", 19500*time.Millisecond, 0)
			if resp.StatusCode != 503 || resp.Header.Get("Retry-After") != "20" ||
				resp.Header.Get("X-Nora-Breaker-Key") != key || resp.Header.Get("X-Nora-Breaker-State") != "open" {
				t.Fatalf("status %d headers %v", resp.StatusCode, resp.Header)
			}
			if ct := resp.Header.Get("Content-Type"); ct != tc.wantCType {
				t.Errorf("Content-Type %q", ct)
			}
			tc.check(t, readBody(t, resp))
		})
	}
}

func TestSynthHeadHasNoBody(t *testing.T) {
	req := httptest.NewRequest(http.MethodHead, "http://hub/x", nil)
	resp := Unavailable(req, "maven", "maven:https://hub", "half_open", 0, 0)
	if resp.Body != http.NoBody || resp.Header.Get("Retry-After") != "1" {
		t.Fatalf("body %v retry %q", resp.Body, resp.Header.Get("Retry-After"))
	}
	if n, _ := strconv.Atoi(resp.Header.Get("Content-Length")); n == 0 || int64(n) != resp.ContentLength {
		t.Fatalf("HEAD Content-Length %q / %d should describe the GET body", resp.Header.Get("Content-Length"), resp.ContentLength)
	}
}

func TestSynthNotFoundCodes(t *testing.T) {
	for path, code := range map[string]string{
		"/v2/library/alpine/manifests/3":     "MANIFEST_UNKNOWN",
		"/v2/library/alpine/blobs/sha256:ab": "BLOB_UNKNOWN",
	} {
		resp := NotFound(httptest.NewRequest(http.MethodGet, "http://hub"+path, nil), "docker", "docker:https://hub")
		body := readBody(t, resp)
		if resp.StatusCode != 404 || !strings.Contains(body, `"code":"`+code+`"`) {
			t.Errorf("%s: %d %s", path, resp.StatusCode, body)
		}
	}
	resp := NotFound(httptest.NewRequest(http.MethodGet, "http://hub/g/a.jar", nil), "maven", "maven:https://hub")
	if body := readBody(t, resp); resp.StatusCode != 404 || !strings.Contains(body, "maven:https://hub") {
		t.Errorf("maven: %d %s", resp.StatusCode, body)
	}
}

func TestSynthForError(t *testing.T) {
	req := httptest.NewRequest(http.MethodGet, "http://hub/x", nil)
	resp := ForError(req, "go", "go", attempt.ErrHeaderTimeout)
	if body := readBody(t, resp); resp.StatusCode != 504 || !strings.Contains(body, "upstream go") {
		t.Errorf("504: %d %q", resp.StatusCode, body)
	}
	resp = ForError(req, "go", "go", errors.New("upstream go: dial tcp: refused"))
	if body := readBody(t, resp); resp.StatusCode != 502 || !strings.Contains(body, "refused") ||
		resp.Header.Get("X-Nora-Breaker-Key") != "go" {
		t.Errorf("502: %d %q", resp.StatusCode, body)
	}
	// The answer names the host the client asked for, never the address it
	// resolved to (issue 22, point 5).
	dial := fmt.Errorf("upstream go: %w", &net.OpError{Op: "dial", Net: "tcp",
		Addr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: 36439}, Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)})
	resp = ForError(req, "go", "proxy.golang.org", dial)
	if body := readBody(t, resp); resp.StatusCode != 502 || strings.Contains(body, "127.0.0.1") ||
		!strings.Contains(body, "proxy.golang.org") || !strings.Contains(body, "connection refused") {
		t.Errorf("502 of a refused dial: %d %q", resp.StatusCode, body)
	}
}

// TestSynthForLocalFault: a 502 caused by the proxy's own machine (out of
// file descriptors, a name server nothing answers at) says so, so the
// operator reading it looks at the node, not the registry
// (docs/behaviour.md §5.1).
func TestSynthForLocalFault(t *testing.T) {
	req := httptest.NewRequest(http.MethodGet, "http://hub/x", nil)
	for _, err := range []error{
		fmt.Errorf("upstream go: dial tcp: %w", os.NewSyscallError("socket", syscall.EMFILE)),
		fmt.Errorf("lookup proxy.golang.org: %w", attempt.ErrNameServer),
	} {
		resp := ForError(req, "go", "go", err)
		if body := readBody(t, resp); resp.StatusCode != 502 || !strings.Contains(body, "this machine") {
			t.Errorf("%v: %d %q, want a 502 that names the proxy's own machine", err, resp.StatusCode, body)
		}
	}
	resp := ForError(req, "go", "go", errors.New("upstream go: dial tcp: refused"))
	if body := readBody(t, resp); strings.Contains(body, "this machine") {
		t.Errorf("an upstream's refusal is called the machine's: %q", body)
	}
}
