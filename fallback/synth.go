package fallback

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Synthesized answers speak the client's dialect (SPEC §5.4): docker clients
// parse OCI error JSON, npm prints the "error" field, everyone else gets one
// line of text naming the breaker key.

// Unavailable builds the proxy's own 503: Retry-After in whole seconds (at
// least 1), the breaker key and state of the addressed upstream, and a body
// in format's dialect.
func Unavailable(req *http.Request, format, key, state string, retryAfter time.Duration) *http.Response {
	msg := fmt.Sprintf("upstream %s is unavailable (circuit breaker %s); retry later", key, state)
	resp := dialectResponse(req, format, http.StatusServiceUnavailable, "UNAVAILABLE", msg)
	resp.Header.Set("Retry-After", strconv.Itoa(RetryAfterSeconds(retryAfter)))
	resp.Header.Set("X-Nora-Breaker-Key", key)
	resp.Header.Set("X-Nora-Breaker-State", state)
	return resp
}

// NotFound builds the 404 given when the addressed upstream could not be
// asked and another upstream of the chain said the artifact is not there.
func NotFound(req *http.Request, format, key string) *http.Response {
	code := "MANIFEST_UNKNOWN"
	if strings.Contains(req.URL.Path, "/blobs/") {
		code = "BLOB_UNKNOWN"
	}
	msg := fmt.Sprintf("not found: upstream %s is unavailable and the next upstream does not have it", key)
	resp := dialectResponse(req, format, http.StatusNotFound, code, msg)
	resp.Header.Set("X-Nora-Breaker-Key", key)
	return resp
}

// GatewayError builds the 502 (transport failure) or 504 (header timeout)
// that answers a failed attempt when nothing better is available.
func GatewayError(req *http.Request, format, key string, status int, cause error) *http.Response {
	// cause already names the key when it came from the Sender.
	msg := fmt.Sprintf("nora-breaker: %v", cause)
	if status == http.StatusGatewayTimeout {
		msg = fmt.Sprintf("upstream %s sent no response headers in time", key)
	}
	resp := dialectResponse(req, format, status, "UNAVAILABLE", msg)
	resp.Header.Set("X-Nora-Breaker-Key", key)
	return resp
}

// RetryAfterSeconds rounds d up to whole seconds, at least 1.
func RetryAfterSeconds(d time.Duration) int {
	s := int(math.Ceil(d.Seconds()))
	if s < 1 {
		return 1
	}
	return s
}

func dialectResponse(req *http.Request, format string, status int, code, msg string) *http.Response {
	var body, ctype string
	switch format {
	case "docker":
		b, _ := json.Marshal(map[string]any{"errors": []map[string]string{{"code": code, "message": msg}}})
		body, ctype = string(b)+"\n", "application/json"
	case "npm":
		b, _ := json.Marshal(map[string]string{"error": msg})
		body, ctype = string(b)+"\n", "application/json"
	default:
		body, ctype = msg+"\n", "text/plain; charset=utf-8"
	}
	return TextResponse(req, status, ctype, body)
}

// TextResponse builds a complete response with a known length. For HEAD
// requests the body is empty but Content-Length still describes it.
func TextResponse(req *http.Request, status int, contentType, body string) *http.Response {
	resp := &http.Response{
		Status:        fmt.Sprintf("%d %s", status, http.StatusText(status)),
		StatusCode:    status,
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        make(http.Header),
		Request:       req,
		ContentLength: int64(len(body)),
	}
	resp.Header.Set("Content-Type", contentType)
	resp.Header.Set("Content-Length", strconv.Itoa(len(body)))
	if req != nil && req.Method == http.MethodHead {
		resp.Body = http.NoBody
	} else {
		resp.Body = newStringBody(body)
	}
	return resp
}
