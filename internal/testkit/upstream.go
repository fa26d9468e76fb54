package testkit

import (
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"sync/atomic"
	"testing"
)

// Upstream is a fake upstream: it answers the n-th request it sees with the
// n-th answer of its script (the last one repeats) and counts the requests.
// Serve it over loopback with Start, or in memory through Transport, which
// a testing/synctest bubble needs: a goroutine waiting on a socket is not
// durably blocked, so the bubble's clock would never move.
type Upstream struct {
	hits atomic.Int64
	mu   sync.Mutex
	// script is what the requests after the base-th get; replaced whole
	// by Script.
	script []http.HandlerFunc
	base   int64
}

// NewUpstream returns an upstream answering with script (none: 200 and an
// empty body).
func NewUpstream(script ...http.HandlerFunc) *Upstream {
	u := &Upstream{}
	u.Script(script...)
	return u
}

// Script replaces what the upstream answers from the next request on; the
// first request after it gets script[0].
func (u *Upstream) Script(script ...http.HandlerFunc) {
	u.mu.Lock()
	u.script, u.base = script, u.hits.Load()
	u.mu.Unlock()
}

// Hits is how many requests the upstream has seen.
func (u *Upstream) Hits() int64 { return u.hits.Load() }

// ServeHTTP answers r with the script's next answer.
func (u *Upstream) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	u.mu.Lock()
	n := u.hits.Add(1) - u.base
	script := u.script
	u.mu.Unlock()
	switch {
	case len(script) == 0:
		w.WriteHeader(http.StatusOK)
	case n <= int64(len(script)):
		script[n-1](w, r)
	default:
		script[len(script)-1](w, r)
	}
}

// Start serves the upstream on a loopback port of its own, closed when the
// test ends.
func (u *Upstream) Start(t testing.TB) *httptest.Server {
	t.Helper()
	s := httptest.NewServer(u)
	t.Cleanup(s.Close)
	return s
}

// Status answers with status and body.
func Status(status int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.WriteHeader(status)
		io.WriteString(w, body)
	}
}

// Hang sends nothing until the request is given up (its context ends).
func Hang(_ http.ResponseWriter, r *http.Request) { <-r.Context().Done() }

// HangUp drops the connection without an answer: the client sees a
// transport error. net/http's server aborts the connection on this panic
// without logging it, and Transport treats it the same way.
func HangUp(http.ResponseWriter, *http.Request) { panic(http.ErrAbortHandler) }
