// Package answer builds the answers nora-breaker gives in its own name (an
// open breaker's 503, a 404 another upstream vouched for, a throttled host's
// 429, a failed attempt's 502 or 504, a refusal), each in the client's
// dialect, and names how every request was answered (docs/behaviour.md,
// "Answers in the proxy's own name").
package answer

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/destination"
)

// Unavailable builds the proxy's own 503: Retry-After (see RetryAfter:
// wait, or 1 s when wait is longer than max), the breaker key and state of
// the addressed upstream, and a body in format's dialect that gives the
// true wait.
func Unavailable(req *http.Request, format, key, state string, wait, max time.Duration) *http.Response {
	// Concatenated rather than formatted: this is every refusal's message.
	msg := "upstream " + key + " is unavailable (circuit breaker " + state + "); it is tried again in " +
		strconv.Itoa(ceilSeconds(wait)) + " s"
	resp := dialect(req, format, http.StatusServiceUnavailable, "UNAVAILABLE", msg)
	resp.Header["Retry-After"] = []string{strconv.Itoa(RetryAfter(wait, max))}
	resp.Header["X-Nora-Breaker-Key"] = []string{key}
	resp.Header["X-Nora-Breaker-State"] = []string{state}
	return resp
}

// TooManyRequests builds the proxy's answer for a request whose upstream
// asked to be left alone and that nothing else could serve: Retry-After
// (RetryAfter of the time left and max), X-Nora-Breaker-Key, the body in
// format's dialect giving the true wait, and the status that gets the
// client to an answer soonest (throttledStatus).
func TooManyRequests(req *http.Request, format, key string, wait, max time.Duration) *http.Response {
	status := throttledStatus(req, format)
	msg := fmt.Sprintf("upstream %s is rate limiting requests; it is asked again in %d s", key, ceilSeconds(wait))
	resp := dialect(req, format, status, "TOOMANYREQUESTS", msg)
	resp.Header.Set("Retry-After", strconv.Itoa(RetryAfter(wait, max)))
	resp.Header.Set("X-Nora-Breaker-Key", key)
	if status != http.StatusTooManyRequests {
		resp.Header.Set("X-Nora-Breaker-State", "throttled")
	}
	return resp
}

// throttledStatus is 429 for a throttled host's clients, except where a 503
// gets them to an answer sooner (measured, README "What each client does"):
// Maven's wagon backs a 429 off for minutes whatever it says (5 s doubling
// to 160 s) and fails a 503 at once; skopeo, podman and CRI-O sleep a 429's
// Retry-After four times per URL and fail a 503 at once; NORA itself takes
// a 429 for "not found" and would tell its own clients 404. yarn 1, the
// other way round, retries a 503 for 12 s and fails a 429 at once, so npm
// keeps the 429, as does every format whose clients treat the two alike.
func throttledStatus(req *http.Request, format string) int {
	if format == "maven" || format == "docker" || (req != nil && strings.HasPrefix(req.Header.Get("User-Agent"), "nora/")) {
		return http.StatusServiceUnavailable
	}
	return http.StatusTooManyRequests
}

// RetryAfter is the Retry-After the proxy's own answers carry for a wait
// of wait (docs/behaviour.md §5.7): the wait in whole seconds, at least 1,
// while it is at most max (0: no limit); 1 when it is longer. The clients
// that read Retry-After sleep it several times over before they give up
// (pip five times, uncapped), so a long one only makes a dead registry take
// minutes to fail; a retry 1 s later gets the same answer at once, and the
// true wait is in the body, /breakers and the status page.
func RetryAfter(wait, max time.Duration) int {
	if max > 0 && wait > max {
		return 1
	}
	return ceilSeconds(wait)
}

// NotFound builds the 404 given when the addressed upstream could not be
// asked and another upstream of the chain said the artifact is not there.
func NotFound(req *http.Request, format, key string) *http.Response {
	code := "MANIFEST_UNKNOWN"
	if strings.Contains(req.URL.Path, "/blobs/") {
		code = "BLOB_UNKNOWN"
	}
	msg := fmt.Sprintf("not found: upstream %s is unavailable and the next upstream does not have it", key)
	resp := dialect(req, format, http.StatusNotFound, code, msg)
	resp.Header.Set("X-Nora-Breaker-Key", key)
	return resp
}

// ForError answers a request whose attempt at upstream key failed with err
// and that nothing better could serve: 400 when the client's own request
// could not be read, 403 for a destination the policy refuses, 504 when the
// upstream sent no headers in time, 502 otherwise.
func ForError(req *http.Request, format, key string, err error) *http.Response {
	switch {
	case errors.Is(err, attempt.ErrClientRequest):
		return Refused(req, http.StatusBadRequest, "the request body could not be read")
	case errors.Is(err, destination.ErrForbidden):
		return Refused(req, http.StatusForbidden, "destination address is not allowed")
	}
	status, msg := http.StatusBadGateway, fmt.Sprintf("nora-breaker: %s could not be reached: %s", key, cause(err))
	if attempt.LocalFault(err) {
		// Nobody's fault but this machine's (docs/behaviour.md §5.1): the
		// answer says where to look.
		msg = fmt.Sprintf("nora-breaker: %s could not be reached because of this machine, not the upstream: %s", key, cause(err))
	}
	if errors.Is(err, attempt.ErrHeaderTimeout) {
		status, msg = http.StatusGatewayTimeout, fmt.Sprintf("upstream %s sent no response headers in time", key)
	}
	resp := dialect(req, format, status, "UNAVAILABLE", msg)
	resp.Header.Set("X-Nora-Breaker-Key", key)
	return resp
}

// Refused answers a request the proxy will not carry (policy, a malformed
// request, a loop) with status and one line saying why.
func Refused(req *http.Request, status int, why string) *http.Response {
	return Text(req, status, "nora-breaker: "+why+"\n")
}

// ceilSeconds rounds d up to whole seconds, at least 1: Retry-After is an
// integer, and 0 would invite an immediate retry storm.
func ceilSeconds(d time.Duration) int {
	s := int(math.Ceil(d.Seconds()))
	if s < 1 {
		return 1
	}
	return s
}

// dockerErrors is the Docker registry API's error body, npmError npm's.
type (
	dockerErrors struct {
		Errors []dockerError `json:"errors"`
	}
	dockerError struct {
		Code    string `json:"code"`
		Message string `json:"message"`
	}
	npmError struct {
		Error string `json:"error"`
	}
)

// dialect builds a complete answer whose body the client's tooling can show:
// docker clients parse OCI error JSON, npm prints the "error" field, and
// everyone else gets one line of text.
func dialect(req *http.Request, format string, status int, code, msg string) *http.Response {
	switch format {
	case "docker":
		b, _ := json.Marshal(dockerErrors{Errors: []dockerError{{Code: code, Message: msg}}})
		return withType(req, status, "application/json", string(b)+"\n")
	case "npm":
		b, _ := json.Marshal(npmError{Error: msg})
		return withType(req, status, "application/json", string(b)+"\n")
	}
	return Text(req, status, msg+"\n")
}

// Text builds a complete plain-text answer with a known length.
func Text(req *http.Request, status int, body string) *http.Response {
	return withType(req, status, "text/plain; charset=utf-8", body)
}

// withType builds a complete answer with a known length. For HEAD requests
// the body is empty but Content-Length still describes it.
func withType(req *http.Request, status int, contentType, body string) *http.Response {
	// The header is written with its keys in canonical form, as Set would
	// store them: an answer made per refused request should not pay for
	// canonicalising constants.
	resp := &http.Response{
		Status:        strconv.Itoa(status) + " " + http.StatusText(status),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        make(http.Header, 6),
		Request:       req,
		ContentLength: int64(len(body)),
	}
	resp.Header["Content-Type"] = []string{contentType}
	resp.Header["Content-Length"] = []string{strconv.Itoa(len(body))}
	if req != nil && req.Method == http.MethodHead {
		resp.Body = http.NoBody
	} else {
		resp.Body = io.NopCloser(strings.NewReader(body))
	}
	return resp
}

// cause is what went wrong in words the client can use, without what only
// this machine knows: a dial error names the address the host resolved to
// (or [sidecar.resolve] sent it to), which is not the host the client asked
// for, so only the innermost reason is kept ("connect: connection
// refused", "no such host", a TLS failure).
func cause(err error) string {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return "no such host"
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Err != nil {
		return opErr.Err.Error()
	}
	var ue *url.Error
	if errors.As(err, &ue) && ue.Err != nil {
		return cause(ue.Err)
	}
	msg := err.Error()
	// Errors wrapped on the way ("upstream <key>: …") say the key again.
	for {
		rest, ok := strings.CutPrefix(msg, "upstream ")
		if !ok {
			return msg
		}
		_, after, found := strings.Cut(rest, ": ")
		if !found {
			return msg
		}
		msg = after
	}
}
