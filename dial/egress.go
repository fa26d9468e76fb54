package dial

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"sync/atomic"

	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/internal/hostport"
	"github.com/nora-breaker/nora-breaker/route"
)

// Egress is the way out for the requests of one configuration snapshot:
// it decides, per request and per tunnel, whether the host is reached
// directly or through a parent proxy, and which one (docs/behaviour.md
// §5.8), and sends it through the snapshot's Transport. It is the
// http.RoundTripper of every upstream attempt, pass-through and token
// fetch, so everything the proxy sends goes the same way.
type Egress struct {
	t      *Transport
	router route.Router
	// def is parent_proxy: the parent of hosts no upstream owns.
	def     *config.Parent
	noProxy config.NoProxy
	// none is true when no parent is configured at all: every host is
	// dialled directly and nothing needs looking up.
	none bool
}

// NewEgress routes cfg's traffic through t, classifying hosts with router
// (cfg's table and the learned hosts).
func NewEgress(t *Transport, cfg *config.Config, router route.Router) *Egress {
	return &Egress{t: t, router: router, def: cfg.Parent, noProxy: cfg.NoProxy, none: len(cfg.Parents()) == 0}
}

// parentOf is the parent u is reached through, or nil for directly:
// directly for a parent_no_proxy host; else the parent of the upstream
// that owns it (its URL host, an alias, an equivalent or a learned host),
// which may be none; else parent_proxy.
func (e *Egress) parentOf(u *url.URL) *config.Parent {
	if e.none {
		return nil
	}
	host, port := hostport.Of(u)
	if e.noProxy.Match(host, port) {
		return nil
	}
	if rt := e.router.Of(u); rt.Classified() {
		return rt.Upstream.Parent
	}
	return e.def
}

// parentOfHost is parentOf for a CONNECT target, of which only the host
// and port are known.
func (e *Egress) parentOfHost(host, port string) *config.Parent {
	if e.none || e.noProxy.Match(host, port) {
		return nil
	}
	if rt := e.router.OfHost(host, port); rt.Classified() {
		return rt.Upstream.Parent
	}
	return e.def
}

// ParentKey is the breaker key of the parent u is reached through, or ""
// when it is dialled directly: the fallback loop skips an upstream whose
// parent's breaker refuses before it asks the upstream's own.
func (e *Egress) ParentKey(u *url.URL) string {
	if p := e.parentOf(u); p != nil {
		return p.Key()
	}
	return ""
}

// ParentKeyOfHost is ParentKey for a CONNECT target.
func (e *Egress) ParentKeyOfHost(host, port string) string {
	if p := e.parentOfHost(host, port); p != nil {
		return p.Key()
	}
	return ""
}

// RoundTrip sends req directly or through its parent: an http:// request
// in absolute form, an https:// one inside a CONNECT tunnel. An error of
// the parent itself wraps attempt.ErrParent; so does a round trip that
// ended (its header wait ran out) while the parent was still being
// dialled for it, since then the upstream was never reached.
func (e *Egress) RoundTrip(req *http.Request) (*http.Response, error) {
	p := e.parentOf(req.URL)
	if p == nil {
		if e.t.plain.handles(req) {
			return e.t.plain.RoundTrip(req)
		}
		return e.t.roundTripDirect(req)
	}
	way, err := e.way(p)
	if err != nil {
		return nil, err
	}
	tr := &hopTrace{}
	req = req.WithContext(context.WithValue(req.Context(), traceKey{}, tr))
	if req.URL.Scheme == "https" {
		resp, err := way.tunnel.RoundTrip(req)
		return resp, way.hop.blame(err, tr)
	}
	var body *clientBody
	if req.Body != nil && req.Body != http.NoBody {
		body = &clientBody{ReadCloser: req.Body}
		req.Body = body
	}
	resp, err := way.forward.RoundTrip(req)
	if err != nil {
		return nil, way.hop.forwardFailed(req.Context(), way.hop.blame(err, tr), body)
	}
	return way.hop.answered(resp)
}

// clientBody is a request body that remembers whether reading it failed:
// then the client's upload broke, not the connection to the parent.
type clientBody struct {
	io.ReadCloser
	failed atomic.Bool
}

func (b *clientBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	if err != nil && err != io.EOF {
		b.failed.Store(true)
	}
	return n, err
}

// DialTunnel opens the connection of a blind tunnel to host:port, directly
// or through a CONNECT to its parent, under the request's context.
func (e *Egress) DialTunnel(ctx context.Context, host, port string) (net.Conn, error) {
	addr := hostport.Join(host, port)
	p := e.parentOfHost(host, port)
	if p == nil {
		return e.t.dialer.DialContext(ctx, "tcp", addr)
	}
	way, err := e.way(p)
	if err != nil {
		return nil, err
	}
	return way.hop.connect(ctx, addr)
}

// way is p's transports in e's Transport. The snapshot that built e built
// or reused the Transport from the same parents, so a missing one is a bug
// that a request must not be sent elsewhere for.
func (e *Egress) way(p *config.Parent) (*parentWay, error) {
	way := e.t.parents[p.Key()]
	if way == nil {
		return nil, &ParentError{Key: p.Key(), Fault: FaultUnreachable, Err: errors.New("no transport for this parent")}
	}
	return way, nil
}

// forwardFailed is the error of an absolute-form request that got no
// answer from the parent it was sent to. The parent is the other end of
// that connection and answers about the upstream itself (a 502, 503 or
// 504), so a connection it breaks, closes or resets before its answer is
// its own failure, counted for its breaker. A request that ran out of time
// (the parent still waiting on the upstream), that the client cancelled,
// or whose body (nil: none) the client failed to send keeps its error.
func (h *parentHop) forwardFailed(ctx context.Context, err error, body *clientBody) error {
	var ne net.Error
	if errors.Is(err, attempt.ErrParent) || ctx.Err() != nil || (errors.As(err, &ne) && ne.Timeout()) ||
		(body != nil && body.failed.Load()) {
		return err
	}
	if t, aerr := h.admit(); aerr == nil {
		t.Done(breakerstate.Failure)
	}
	return &ParentError{Key: h.key, Fault: FaultUnreachable,
		Err: fmt.Errorf("the connection to the parent broke before its answer: %w", err)}
}

// blame is a failed round trip's error as the verdicts need it: unchanged
// when it already says whose it is, or when the parent had been reached;
// the parent's when the request gave up while a dial of the parent was
// still in flight for it.
func (h *parentHop) blame(err error, tr *hopTrace) error {
	if err == nil || errors.Is(err, attempt.ErrParent) || tr.reaching.Load() == 0 {
		return err
	}
	return &ParentError{Key: h.key, Fault: FaultUnreachable,
		Err: fmt.Errorf("still reaching the parent when the request ended: %w", err)}
}
