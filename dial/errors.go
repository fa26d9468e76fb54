package dial

import (
	"fmt"

	"github.com/nora-breaker/nora-breaker/attempt"
)

// Fault names what went wrong with a parent proxy itself.
type Fault string

const (
	// FaultUnreachable: the parent could not be dialled (its name, a
	// refused or timed-out connection), or was still being dialled when
	// the attempt's header wait ran out.
	FaultUnreachable Fault = "unreachable"
	// FaultTLS: the TLS handshake with an https:// parent failed.
	FaultTLS Fault = "tls"
	// FaultConfig: the parent refused the proxy's credentials (407), or
	// named its own configuration or a loop (Proxy-Status
	// proxy_configuration_error, proxy_loop_detected). An operator's to
	// fix: logged, counted for nobody.
	FaultConfig Fault = "config"
	// FaultRefused: the parent answered a CONNECT with a status that is
	// neither a tunnel nor an error about the upstream (a 403 of its
	// policy): alive, and the upstream was never asked.
	FaultRefused Fault = "refused"
	// FaultInternal: the parent said the fault is its own (Proxy-Status
	// proxy_internal_error).
	FaultInternal Fault = "internal"
	// FaultOpen: the parent's breaker refused the connection.
	FaultOpen Fault = "open"
)

// ParentError is a failure of a parent proxy itself. It wraps
// attempt.ErrParent, so it is neutral for the upstream the attempt was for,
// and the error that caused it (breakerstate.ErrOpen for FaultOpen). Its
// text names the parent by its breaker key, never by its credentials.
type ParentError struct {
	Key   string // the parent's breaker key
	Fault Fault
	// Status is the parent's answer, for FaultConfig, FaultRefused and
	// FaultInternal; 0 otherwise.
	Status int
	Err    error
}

func (e *ParentError) Error() string {
	what := string(e.Fault)
	switch e.Fault {
	case FaultConfig:
		what = "configuration error"
	case FaultOpen:
		what = "breaker open"
	}
	if e.Status != 0 {
		return fmt.Sprintf("parent proxy %s: %s: answered %d: %v", e.Key, what, e.Status, e.Err)
	}
	return fmt.Sprintf("parent proxy %s: %s: %v", e.Key, what, e.Err)
}

// Unwrap lets errors.Is find attempt.ErrParent and the cause.
func (e *ParentError) Unwrap() []error { return []error{attempt.ErrParent, e.Err} }

// UpstreamError is a parent proxy's answer about the upstream a CONNECT
// asked for: 502, 503 or 504, with what its Proxy-Status header named, if
// anything. It is the upstream's failure, as the dial error would be
// without a parent (docs/behaviour.md §5.8).
type UpstreamError struct {
	Parent string // the parent's breaker key
	Target string // the CONNECT's host:port
	Status int
	// ProxyStatus is the error type the parent named (RFC 9209), or "".
	ProxyStatus string
}

func (e *UpstreamError) Error() string {
	msg := fmt.Sprintf("parent proxy %s answered CONNECT %s with %d", e.Parent, e.Target, e.Status)
	if e.ProxyStatus != "" {
		msg += " (Proxy-Status error=" + e.ProxyStatus + ")"
	}
	return msg
}
