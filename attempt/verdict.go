package attempt

import (
	"context"
	"errors"
	"net/http"
	"syscall"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/destination"
)

// ErrHeaderTimeout is the cause recorded when an upstream sends no response
// headers within its format's proxy_timeout.
var ErrHeaderTimeout = errors.New("no response headers within proxy_timeout")

// errBodyStalled is the cause recorded when an upstream stops sending a body
// for longer than the idle read timeout.
var errBodyStalled = errors.New("response body stalled past the read timeout")

// errShortBody is reported when a body ends before its Content-Length.
var errShortBody = errors.New("response body ended before its Content-Length")

// ErrCancelled is what an attempt the proxy gave up on is cancelled with,
// wrapped with the reason: a hedge whose race another attempt won, an
// attempt at a host whose breaker opened while it waited (the request went
// on elsewhere). It says nothing about the upstream, and is no sign of the
// client leaving either.
var ErrCancelled = errors.New("attempt given up by the proxy")

// ErrClientRequest is the cause recorded when the client's own request could
// not be read (a malformed chunked body, a body shorter than announced, a
// reset stream): the client's fault, neutral for the upstream.
var ErrClientRequest = errors.New("the client's request could not be read")

// ErrParent is wrapped by every error of the parent proxy itself (package
// dial): it could not be reached, its TLS failed, it refused the proxy's
// credentials, refused the tunnel, or named its own fault, or its breaker
// is open. None of that says anything about the upstream the attempt was
// for, so it is neutral for that upstream; the parent's own breaker judges
// it (docs/behaviour.md §5.8).
var ErrParent = errors.New("parent proxy")

// ErrNameServer is in the chain of a lookup that failed because no name
// server could be reached (nothing answers at its address, no route to
// it), as opposed to one that answered (no such name, its own failure) or
// stayed silent. Package dial puts it there. The upstream whose name was
// asked was never reached, and every upstream of the proxy fails the same
// way at once, so it is this machine's fault (LocalFault).
var ErrNameServer = errors.New("no name server could be reached")

// Decide classifies one attempt at an upstream from what the transport
// returned and whether the client is still there (docs/behaviour.md §5.1).
// It is the only place that maps responses and errors to breaker outcomes.
// Every verdict is a claim about the upstream's health, so whatever the
// client caused is neutral:
//
//   - neutral: the client cancelled before the upstream answered, the
//     proxy gave the attempt up (ErrCancelled: it lost a hedge's race, or
//     its request went on when its breaker opened), the
//     client's own request could not be read, policy refused the
//     destination, the parent proxy failed on its own (ErrParent), or
//     this machine failed on its own (LocalFault: out of file
//     descriptors, buffers, memory or local ports, or no name server
//     reachable);
//   - failure: any other transport error (DNS, dial, TLS, header timeout)
//     or a 5xx other than 501 and 505;
//   - alive:   any 4xx, and 501 and 505 (the upstream answered; the
//     request was the problem);
//   - success: 1xx, 2xx and 3xx.
//
// What a body means (short, stalled, or none at all) is decided by the
// Sender when it ends.
func Decide(resp *http.Response, err error, clientCtx context.Context) breakerstate.Outcome {
	if err != nil {
		if errors.Is(err, ErrCancelled) || errors.Is(err, destination.ErrForbidden) || errors.Is(err, ErrClientRequest) ||
			errors.Is(err, ErrParent) || LocalFault(err) {
			return breakerstate.Neutral
		}
		if clientCtx != nil && clientCtx.Err() != nil && !errors.Is(err, ErrHeaderTimeout) {
			return breakerstate.Neutral
		}
		return breakerstate.Failure
	}
	switch {
	case resp.StatusCode == http.StatusNotImplemented || resp.StatusCode == http.StatusHTTPVersionNotSupported:
		return breakerstate.Alive
	case resp.StatusCode >= 500:
		return breakerstate.Failure
	case resp.StatusCode >= 400:
		return breakerstate.Alive
	default:
		return breakerstate.Success
	}
}

// statusClass is the status label of nora_upstream_request_duration_seconds:
// 2xx 3xx 4xx 5xx timeout error cancelled.
func statusClass(resp *http.Response, err error) string {
	if errors.Is(err, ErrCancelled) {
		return "cancelled"
	}
	if err != nil {
		if errors.Is(err, ErrHeaderTimeout) || errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
			return "timeout"
		}
		return "error"
	}
	switch {
	case resp.StatusCode >= 500:
		return "5xx"
	case resp.StatusCode >= 400:
		return "4xx"
	case resp.StatusCode >= 300:
		return "3xx"
	default:
		return "2xx"
	}
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}

// LocalFault reports an error of this machine rather than of the upstream
// it was talking to: the process out of file descriptors (EMFILE), the
// system out of them (ENFILE), of socket buffers (ENOBUFS), of memory
// (ENOMEM), or of local ports and addresses (EADDRNOTAVAIL), or a lookup
// that reached no name server (ErrNameServer). Such an error
// says nothing about the upstream's health, so it is nobody's
// (docs/behaviour.md §5.1); counting it would open every healthy upstream
// of a proxy under load, and through shared_state the fleet's too.
func LocalFault(err error) bool {
	if errors.Is(err, ErrNameServer) {
		return true
	}
	for _, errno := range []syscall.Errno{syscall.EMFILE, syscall.ENFILE, syscall.ENOBUFS, syscall.ENOMEM,
		syscall.EADDRNOTAVAIL} {
		if errors.Is(err, errno) {
			return true
		}
	}
	return false
}
