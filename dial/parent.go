package dial

import (
	"bufio"
	"context"
	"crypto/tls"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"
	"time"

	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// connectTimeout bounds the wait for a parent's answer to a CONNECT, as
// net/http bounds its own: the parent answers once it has reached the
// upstream, so the wait is the upstream's, and the attempt's header wait
// has usually given up long before.
const connectTimeout = time.Minute

// maxConnectAnswer bounds the head of a parent's answer to a CONNECT.
const maxConnectAnswer = 64 << 10

// parentHop is one parent proxy as the proxy reaches it: the dial (and the
// TLS handshake with an https:// parent), the CONNECT handshake, and the
// parent's breaker, which admits every connection made to the parent and
// learns how it went (docs/behaviour.md §5.8). Connections that transports
// keep and reuse are not asked about again: each new one is.
type parentHop struct {
	key        string
	addr       string // host:port
	https      bool
	tlsConf    *tls.Config // https:// parents
	tlsTimeout time.Duration
	auth       string // the Proxy-Authorization value; "" for none. Never log it.
	dialer     *Dialer
	breakers   *breakerstate.Set // nil: no breaker (a snapshot built alone)
	warn       *warner
}

// basicAuth is the Proxy-Authorization value for user and password, the
// one net/http sends on absolute-form requests; "" when there is neither.
func basicAuth(user, password string) string {
	if user == "" && password == "" {
		return ""
	}
	return "Basic " + base64.StdEncoding.EncodeToString([]byte(user+":"+password))
}

// hopTrace is what one request's round trip learns from the parent dials
// made on its behalf: whether one was still reaching the parent. A request
// whose header wait runs out then was waiting on the parent, not the
// upstream.
type hopTrace struct{ reaching atomic.Int32 }

type traceKey struct{}

// traceOf is the trace a round trip put in ctx, or nil. net/http dials
// with the values of the request that asked for the connection (though not
// its cancellation), so the dial finds its request's trace.
func traceOf(ctx context.Context) *hopTrace {
	tr, _ := ctx.Value(traceKey{}).(*hopTrace)
	return tr
}

// admit asks the parent's breaker for a connection. A key the set does not
// know (a reload raced this dial) goes on without a breaker.
func (h *parentHop) admit() (breakerstate.Ticket, error) {
	if h.breakers == nil {
		return breakerstate.Ticket{}, nil
	}
	t, err := h.breakers.Admit(h.key)
	if errors.Is(err, breakerstate.ErrOpen) {
		return t, &ParentError{Key: h.key, Fault: FaultOpen, Err: err}
	}
	return t, nil
}

// reach opens a connection to the parent: the dial and, for an https://
// parent, the TLS handshake. Its failures are the parent's.
func (h *parentHop) reach(ctx context.Context) (net.Conn, error) {
	if tr := traceOf(ctx); tr != nil {
		tr.reaching.Add(1)
		defer tr.reaching.Add(-1)
	}
	conn, err := h.dialer.DialContext(ctx, "tcp", h.addr)
	if err != nil {
		return nil, &ParentError{Key: h.key, Fault: FaultUnreachable, Err: err}
	}
	if !h.https {
		return conn, nil
	}
	hctx := ctx
	if h.tlsTimeout > 0 {
		var cancel context.CancelFunc
		hctx, cancel = context.WithTimeout(ctx, h.tlsTimeout)
		defer cancel()
	}
	tc := tls.Client(conn, h.tlsConf)
	if err := tc.HandshakeContext(hctx); err != nil {
		conn.Close()
		return nil, &ParentError{Key: h.key, Fault: FaultTLS, Err: err}
	}
	return tc, nil
}

// dialForward is the forward transport's dial: a connection to the parent,
// admitted and judged by its breaker. addr is the parent's own.
func (h *parentHop) dialForward(ctx context.Context, _, _ string) (net.Conn, error) {
	t, err := h.admit()
	if err != nil {
		return nil, err
	}
	conn, err := h.reach(ctx)
	t.Done(verdict(ctx, err))
	return conn, err
}

// dialTunnel is the tunnel transport's dial: a CONNECT tunnel through the
// parent to addr, the upstream's host:port.
func (h *parentHop) dialTunnel(ctx context.Context, _, addr string) (net.Conn, error) {
	return h.connect(ctx, addr)
}

// connect opens a tunnel through the parent to target ("host:port"),
// admitted and judged by the parent's breaker: the parent's own failures
// are its (ParentError), its 502, 503 or 504 is the upstream's
// (UpstreamError), and a CONNECT it left unanswered in time says nothing
// about it.
func (h *parentHop) connect(ctx context.Context, target string) (net.Conn, error) {
	t, err := h.admit()
	if err != nil {
		return nil, err
	}
	conn, err := h.reach(ctx)
	if err == nil {
		conn, err = h.handshake(ctx, conn, target)
	}
	t.Done(verdict(ctx, err))
	return conn, err
}

// handshake sends the CONNECT for target on conn and reads the parent's
// answer: a 2xx opens the tunnel, anything else closes conn.
func (h *parentHop) handshake(ctx context.Context, conn net.Conn, target string) (net.Conn, error) {
	req := &http.Request{Method: http.MethodConnect, URL: &url.URL{Opaque: target}, Host: target,
		Header: http.Header{}, ProtoMajor: 1, ProtoMinor: 1}
	if h.auth != "" {
		req.Header.Set("Proxy-Authorization", h.auth)
	}
	// Socket deadlines are on the real clock, whatever clock the process
	// was given (a test's is frozen).
	deadline := time.Now().Add(connectTimeout)
	if d, ok := ctx.Deadline(); ok && d.Before(deadline) {
		deadline = d
	}
	_ = conn.SetDeadline(deadline)
	// A request that is cancelled (a blind tunnel's client leaving) stops
	// the wait at once.
	stop := context.AfterFunc(ctx, func() { _ = conn.SetDeadline(time.Unix(1, 0)) })
	br := bufio.NewReader(io.LimitReader(conn, maxConnectAnswer))
	err := req.Write(conn)
	var resp *http.Response
	if err == nil {
		resp, err = http.ReadResponse(br, req)
	}
	if !stop() && err == nil {
		// Cancelled just as the answer came: the deadline set on conn
		// would break the tunnel, and nobody waits for it any more.
		err = ctx.Err()
	}
	if err != nil {
		conn.Close()
		return nil, h.unanswered(ctx, target, err)
	}
	if resp.StatusCode/100 != 2 {
		conn.Close()
		return nil, h.refusal(target, resp)
	}
	_ = conn.SetDeadline(time.Time{})
	if n := br.Buffered(); n > 0 {
		// Bytes the upstream sent right after the parent's answer (TLS
		// servers wait to be spoken to, but a tunnel need not be TLS).
		head, _ := br.Peek(n)
		return &prefixedConn{Conn: conn, head: append([]byte(nil), head...)}, nil
	}
	return conn, nil
}

// unanswered is the error of a CONNECT that got no answer: the request was
// cancelled (nobody's), the wait ran out (the parent was reaching the
// upstream: the upstream's, as a dial timeout would be), or the parent
// closed or broke the connection without answering (the parent's).
func (h *parentHop) unanswered(ctx context.Context, target string, err error) error {
	if ctx.Err() != nil {
		return ctx.Err()
	}
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return fmt.Errorf("parent proxy %s did not answer CONNECT %s in time: %w", h.key, target, err)
	}
	return &ParentError{Key: h.key, Fault: FaultUnreachable,
		Err: fmt.Errorf("the connection broke before an answer to CONNECT %s: %w", target, err)}
}

// refusal is the error of a CONNECT the parent answered without opening
// the tunnel: its 407, or a Proxy-Status naming its own fault, is the
// parent's; its 502, 503 or 504 about the upstream is the upstream's; any
// other answer is the parent refusing (its policy), about nobody's health.
func (h *parentHop) refusal(target string, resp *http.Response) error {
	errType := proxyStatusError(resp.Header)
	if fault, ok := parentsOwn(errType); ok {
		return h.parentsFault(fault, resp.StatusCode, fmt.Errorf("Proxy-Status error=%s", errType))
	}
	switch resp.StatusCode {
	case http.StatusProxyAuthRequired:
		return h.parentsFault(FaultConfig, resp.StatusCode, errors.New("the parent refused the proxy's credentials "+
			"(check parent_proxy's user and password)"))
	case http.StatusBadGateway, http.StatusServiceUnavailable, http.StatusGatewayTimeout:
		return &UpstreamError{Parent: h.key, Target: target, Status: resp.StatusCode, ProxyStatus: errType}
	}
	return &ParentError{Key: h.key, Fault: FaultRefused, Status: resp.StatusCode,
		Err: fmt.Errorf("the parent refused CONNECT %s", target)}
}

// parentsFault is a ParentError the parent named itself; a configuration
// error is said in the log, since nothing counts it.
func (h *parentHop) parentsFault(fault Fault, status int, cause error) error {
	err := &ParentError{Key: h.key, Fault: fault, Status: status, Err: cause}
	if fault == FaultConfig {
		h.warn.configError(h.key, err)
	}
	return err
}

// answered checks a parent's answer to an absolute-form request: a 407, or
// a Proxy-Status naming the parent's own fault, is the parent's and never
// reaches the client (a 407 would ask the client for credentials the
// parent wants from us); the parent's internal error counts for its
// breaker. Every other answer is the upstream's, as it would be directly.
func (h *parentHop) answered(resp *http.Response) (*http.Response, error) {
	var err error
	if errType := proxyStatusError(resp.Header); resp.StatusCode >= 400 && errType != "" {
		if fault, ok := parentsOwn(errType); ok {
			err = h.parentsFault(fault, resp.StatusCode, fmt.Errorf("Proxy-Status error=%s", errType))
		}
	}
	if err == nil && resp.StatusCode == http.StatusProxyAuthRequired {
		err = h.parentsFault(FaultConfig, resp.StatusCode, errors.New("the parent refused the proxy's credentials "+
			"(check parent_proxy's user and password)"))
	}
	if err == nil {
		return resp, nil
	}
	resp.Body.Close()
	var pe *ParentError
	if errors.As(err, &pe) && pe.Fault == FaultInternal {
		// The connection was admitted when it was made; this answer on it
		// is a failure of its own.
		if t, aerr := h.admit(); aerr == nil {
			t.Done(breakerstate.Failure)
		}
	}
	return nil, err
}

// verdict is what one connection to the parent means for the parent's
// breaker: a tunnel or a connection opened, or an answer about the
// upstream, is a success; a refusal of its policy shows it alive; a
// configuration error and a CONNECT left unanswered in time are nobody's;
// a failure to reach it is judged like any attempt's transport error
// (this machine's own faults and cancelled requests are neutral).
func verdict(ctx context.Context, err error) breakerstate.Outcome {
	var pe *ParentError
	var ue *UpstreamError
	switch {
	case err == nil, errors.As(err, &ue):
		return breakerstate.Success
	case !errors.As(err, &pe):
		return breakerstate.Neutral
	case pe.Fault == FaultConfig:
		return breakerstate.Neutral
	case pe.Fault == FaultRefused:
		return breakerstate.Alive
	}
	return attempt.Decide(nil, pe.Err, ctx)
}

// prefixedConn is a tunnel whose first bytes were read with the parent's
// answer.
type prefixedConn struct {
	net.Conn
	head []byte
}

func (c *prefixedConn) Read(p []byte) (int, error) {
	if len(c.head) > 0 {
		n := copy(p, c.head)
		c.head = c.head[n:]
		return n, nil
	}
	return c.Conn.Read(p)
}
