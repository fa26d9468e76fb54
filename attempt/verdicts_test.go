package attempt

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// errReader fails the client's request body, as a malformed chunked body
// or a reset HTTP/2 stream does.
type errReader struct{}

func (errReader) Read([]byte) (int, error) { return 0, errors.New("invalid byte in chunk length") }

// TestSenderVerdictPerInputClass names every kind of attempt the proxy
// meets and the verdict it must lead to, through the whole Sender (headers,
// body, reader): whatever the client caused is neutral, an answer without a
// body is complete at its headers, only the upstream's own faults fail.
func TestSenderVerdictPerInputClass(t *testing.T) {
	const (
		unchanged = 1 // the preloaded failure stays: neutral or alive
		failed    = 2 // one more failure
		succeeded = 0 // count reset
	)
	body := strings.Repeat("b", 1000)
	tests := []struct {
		name    string
		class   string // upstream error, client error, cancellation, body-less, ...
		method  string
		reqBody io.Reader
		handler http.HandlerFunc
		// read consumes the answer as the client would; nil reads it all.
		read      func(t *testing.T, resp *http.Response, cancel context.CancelFunc)
		cancelNow bool // cancel the client before sending
		want      int
	}{
		{name: "2xx with its whole body", class: "upstream success", handler: serve(200, body), want: succeeded},
		{name: "3xx", class: "upstream success", handler: serve(302, ""), want: succeeded},
		{name: "5xx", class: "upstream error", handler: serve(503, "down"), want: failed},
		{name: "501 not implemented", class: "request problem", handler: serve(501, ""), want: unchanged},
		{name: "505 version not supported", class: "request problem", handler: serve(505, ""), want: unchanged},
		{name: "4xx", class: "request problem", handler: serve(404, ""), want: unchanged},
		{name: "429", class: "request problem (throttled)", handler: serve(429, ""), want: unchanged},
		{name: "HEAD answered with the GET's Content-Length", class: "body-less", method: http.MethodHead,
			handler: withLength(200, 1234), want: succeeded},
		{name: "304 with a Content-Length", class: "body-less", handler: withLength(304, 1234), want: succeeded},
		{name: "204", class: "body-less", handler: serve(204, ""), want: succeeded},
		{name: "body ends short of Content-Length", class: "upstream error", handler: shortBody, want: failed},
		{name: "upstream stalls mid-body", class: "upstream error", handler: stallingBody, want: failed},
		{name: "client pauses longer than the read timeout", class: "slow client", handler: serve(200, body),
			read: func(t *testing.T, resp *http.Response, _ context.CancelFunc) {
				readN(t, resp.Body, 10)
				time.Sleep(300 * time.Millisecond) // the client's pause, three read timeouts long
				if _, err := io.ReadAll(resp.Body); err != nil {
					t.Fatalf("after the pause: %v", err)
				}
			}, want: succeeded},
		{name: "client closes before the end", class: "client gone", handler: serve(200, body),
			read: func(t *testing.T, resp *http.Response, _ context.CancelFunc) { readN(t, resp.Body, 10) },
			want: unchanged},
		{name: "client cancels mid-body", class: "cancellation", handler: stallingBody,
			read: func(t *testing.T, resp *http.Response, cancel context.CancelFunc) {
				readN(t, resp.Body, 5)
				cancel()
				io.ReadAll(resp.Body)
			}, want: unchanged},
		{name: "client cancelled before the answer", class: "cancellation", handler: serve(200, body),
			cancelNow: true, want: unchanged},
		{name: "client's request body unreadable", class: "client error", method: http.MethodPost,
			reqBody: errReader{}, handler: func(w http.ResponseWriter, r *http.Request) {
				io.Copy(io.Discard, r.Body)
			}, want: unchanged},
	}
	for _, tc := range tests {
		t.Run(tc.class+": "+tc.name, func(t *testing.T) {
			srv := httptest.NewServer(tc.handler)
			t.Cleanup(srv.Close)
			u := testkit.ConfigUpstream(t, "maven", srv.URL)
			u.ReadTimeout = 100 * time.Millisecond
			r := newRig(t, nil, u.Key)
			r.preloadFailure(t, u.Key)
			method := tc.method
			if method == "" {
				method = http.MethodGet
			}
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			if tc.cancelNow {
				cancel()
			}
			req := httptest.NewRequest(method, srv.URL+"/x", tc.reqBody).WithContext(ctx)
			req.RequestURI = ""
			resp, err := r.send(req, u, r.admit(t, u.Key))
			if err == nil {
				if tc.read != nil {
					tc.read(t, resp, cancel)
				} else {
					io.ReadAll(resp.Body)
				}
				resp.Body.Close()
			}
			if n := r.snap(t, u.Key).FailureCount; n != tc.want {
				t.Fatalf("failure count %d, want %d (err %v)", n, tc.want, err)
			}
		})
	}
}

func serve(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// withLength answers status with a Content-Length and no body.
func withLength(status int, n int) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Length", strconv.Itoa(n))
		w.WriteHeader(status)
	}
}

func shortBody(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Length", "1000")
	io.WriteString(w, "only this")
	w.(http.Flusher).Flush()
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		conn.Close()
	}
}

func stallingBody(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Length", "1000")
	io.WriteString(w, "first bytes")
	w.(http.Flusher).Flush()
	<-r.Context().Done()
}

func readN(t *testing.T, r io.Reader, n int) {
	t.Helper()
	if _, err := io.ReadFull(r, make([]byte, n)); err != nil {
		t.Fatalf("reading %d bytes: %v", n, err)
	}
}
