package attempt

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"syscall"
	"testing"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/destination"
)

// TestOutcomeDecideAndStatusClass walks every kind of attempt: what one attempt
// means for the breaker, and the status label it is measured under.
func TestOutcomeDecideAndStatusClass(t *testing.T) {
	live := context.Background()
	gone, cancel := context.WithCancel(context.Background())
	cancel()
	dnsErr := &net.DNSError{Err: "no such host", Name: "repo.invalid", IsNotFound: true}
	dialErr := &net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.ECONNREFUSED)}
	tlsErr := &tls.CertificateVerificationError{Err: x509.UnknownAuthorityError{}}
	netTimeout := &net.OpError{Op: "read", Net: "tcp", Err: os.ErrDeadlineExceeded}
	wrap := func(err error) error { return fmt.Errorf("upstream maven: %w", err) }

	tests := []struct {
		name      string
		status    int // 0 = transport error
		err       error
		client    context.Context
		want      breakerstate.Outcome
		wantClass string
	}{
		{"dns error", 0, wrap(dnsErr), live, breakerstate.Failure, "error"},
		{"dial refused", 0, wrap(dialErr), live, breakerstate.Failure, "error"},
		{"tls unknown authority", 0, wrap(tlsErr), live, breakerstate.Failure, "error"},
		{"tls record header", 0, wrap(tls.RecordHeaderError{Msg: "not tls"}), live, breakerstate.Failure, "error"},
		{"header timeout", 0, wrap(ErrHeaderTimeout), live, breakerstate.Failure, "timeout"},
		{"header timeout while client gone", 0, wrap(ErrHeaderTimeout), gone, breakerstate.Failure, "timeout"},
		{"net timeout", 0, wrap(netTimeout), live, breakerstate.Failure, "timeout"},
		{"deadline exceeded", 0, wrap(context.DeadlineExceeded), live, breakerstate.Failure, "timeout"},
		{"client cancelled", 0, wrap(context.Canceled), gone, breakerstate.Neutral, "error"},
		{"client cancelled during dial", 0, wrap(dialErr), gone, breakerstate.Neutral, "error"},
		// Given up by the proxy (a hedge that lost, a request handed on):
		// neither the upstream's fault nor the client leaving, although
		// the attempt's context has ended.
		{"given up by the proxy", 0, wrap(fmt.Errorf("%w: a hedge answered first", ErrCancelled)), gone, breakerstate.Neutral, "cancelled"},
		{"given up, context alive", 0, wrap(ErrCancelled), live, breakerstate.Neutral, "cancelled"},
		{"destination refused by policy", 0, wrap(destination.ErrForbidden), live, breakerstate.Neutral, "error"},
		{"client's request body unreadable", 0, wrap(fmt.Errorf("%w: invalid chunk", ErrClientRequest)), live, breakerstate.Neutral, "error"},
		// This machine's own faults are nobody's (docs/behaviour.md §5.1).
		{"out of file descriptors", 0, wrap(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.EMFILE)}), live, breakerstate.Neutral, "error"},
		{"system out of file descriptors", 0, wrap(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("socket", syscall.ENFILE)}), live, breakerstate.Neutral, "error"},
		{"out of socket buffers", 0, wrap(&net.OpError{Op: "write", Net: "tcp", Err: os.NewSyscallError("write", syscall.ENOBUFS)}), live, breakerstate.Neutral, "error"},
		{"out of local ports", 0, wrap(&net.OpError{Op: "dial", Net: "tcp", Err: os.NewSyscallError("connect", syscall.EADDRNOTAVAIL)}), live, breakerstate.Neutral, "error"},
		{"no name server reachable", 0, wrap(fmt.Errorf("lookup registry.example: %w", ErrNameServer)), live, breakerstate.Neutral, "error"},
		{"a 101 nobody asked for", 0, wrap(ErrUnaskedSwitch), live, breakerstate.Failure, "error"},
		// The parent proxy's own failures are the parent's breaker's, never
		// the upstream's (docs/behaviour.md §5.8); package dial wraps them.
		{"parent proxy refused the connection", 0, wrap(fmt.Errorf("%w unreachable: %w", ErrParent, dialErr)), live, breakerstate.Neutral, "error"},
		{"parent proxy not dialled within the header wait", 0, wrap(fmt.Errorf("%w unreachable: %w", ErrParent, context.Canceled)), live, breakerstate.Neutral, "error"},
		{"500", 500, nil, live, breakerstate.Failure, "5xx"},
		{"502", 502, nil, live, breakerstate.Failure, "5xx"},
		{"503", 503, nil, live, breakerstate.Failure, "5xx"},
		{"504", 504, nil, live, breakerstate.Failure, "5xx"},
		{"501 not implemented", 501, nil, live, breakerstate.Alive, "5xx"},
		{"505 version not supported", 505, nil, live, breakerstate.Alive, "5xx"},
		{"400", 400, nil, live, breakerstate.Alive, "4xx"},
		{"401", 401, nil, live, breakerstate.Alive, "4xx"},
		{"403", 403, nil, live, breakerstate.Alive, "4xx"},
		{"404", 404, nil, live, breakerstate.Alive, "4xx"},
		{"410", 410, nil, live, breakerstate.Alive, "4xx"},
		{"429", 429, nil, live, breakerstate.Alive, "4xx"},
		{"200", 200, nil, live, breakerstate.Success, "2xx"},
		{"204", 204, nil, live, breakerstate.Success, "2xx"},
		{"206", 206, nil, live, breakerstate.Success, "2xx"},
		{"301", 301, nil, live, breakerstate.Success, "3xx"},
		{"302", 302, nil, live, breakerstate.Success, "3xx"},
		{"304", 304, nil, live, breakerstate.Success, "3xx"},
		{"307", 307, nil, live, breakerstate.Success, "3xx"},
		// An answer that arrived is judged on its own, even if the client
		// has gone since: the upstream did answer.
		{"500 after client gone", 500, nil, gone, breakerstate.Failure, "5xx"},
		{"nil client context", 0, wrap(dialErr), nil, breakerstate.Failure, "error"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			var resp *http.Response
			if tc.status != 0 {
				resp = &http.Response{StatusCode: tc.status}
			}
			if got := Decide(resp, tc.err, tc.client); got != tc.want {
				t.Errorf("Decide = %v, want %v", got, tc.want)
			}
			if got := statusClass(resp, tc.err); got != tc.wantClass {
				t.Errorf("statusClass = %q, want %q", got, tc.wantClass)
			}
		})
	}
}

// TestOutcomeTimeoutIsNotMistakenForCancel pins the reason ErrHeaderTimeout is
// checked with errors.Is: the Sender wraps it with the upstream key.
func TestOutcomeTimeoutIsNotMistakenForCancel(t *testing.T) {
	err := fmt.Errorf("upstream x: %w", ErrHeaderTimeout)
	if !errors.Is(err, ErrHeaderTimeout) {
		t.Fatal("wrapping lost the sentinel")
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if got := Decide(nil, err, ctx); got != breakerstate.Failure {
		t.Fatalf("Decide = %v, want failure", got)
	}
}
