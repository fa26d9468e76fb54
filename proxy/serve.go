package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/nora-breaker/nora-breaker/answer"
	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/destination"
	"github.com/nora-breaker/nora-breaker/dial"
	"github.com/nora-breaker/nora-breaker/fallback"
	"github.com/nora-breaker/nora-breaker/internal/hostport"
	"github.com/nora-breaker/nora-breaker/relay"
	"github.com/nora-breaker/nora-breaker/tunnel"
)

// unclassifiedHeaderTimeout bounds the wait for headers from hosts that are
// not configured upstreams (they have no proxy_timeout of their own).
const unclassifiedHeaderTimeout = 60 * time.Second

// exchange is what the proxy port's handler leaves for goproxy's request
// hook: the writer the answer goes through and the client's request body.
type exchange struct {
	w    *relay.PlainWriter
	body *relay.ClientBody
}

type exchangeKey struct{}

// onRequest is the one goproxy request hook, for every plain request: it
// decides the request, writes the answer itself through the one writer
// (relay.Answer), and hands goproxy an answer with nothing left to write,
// so goproxy never runs its own round trip or writes a byte.
func (p *Proxy) onRequest(req *http.Request, _ *goproxy.ProxyCtx) (*http.Request, *http.Response) {
	resp := p.handle(req, nil)
	ex, ok := req.Context().Value(exchangeKey{}).(*exchange)
	if !ok {
		return req, resp // not from Handler: goproxy writes it (tests that drive goproxy alone)
	}
	relay.Answer(ex.w, req, resp, relay.Options{Bufs: p.bufs, Body: ex.body, Drainers: &p.drainers})
	ex.w.Finish()
	return req, p.answered
}

// handle answers one request, plain or from inside an intercepted tunnel,
// under the configuration in force when it arrived, and arranges its log
// line. A panic becomes a 500 for this request only.
func (p *Proxy) handle(req *http.Request, target *tunnel.Target) (resp *http.Response) {
	rec := p.newRecord(req)
	defer func() {
		if v := recover(); v != nil {
			p.log.Error().Str("panic", fmt.Sprint(v)).Str("host", req.URL.Hostname()).Msg("handler panic recovered")
			rec.result = answer.Error
			resp = answer.Text(req, http.StatusInternalServerError, "nora-breaker: internal error\n")
		}
		resp = p.finish(rec, resp)
	}()
	return p.serve(req, target, p.state.Load(), rec)
}

// serve decides one request under snapshot snap and returns the client's
// answer: the checks every request passes, then either the fallback loop
// (classified) or a plain pass-through (unclassified).
func (p *Proxy) serve(req *http.Request, target *tunnel.Target, snap *snapshot, rec *record) *http.Response {
	rec.everyRefusal = snap.cfg.Sidecar.LogRefusals == "every"
	if hook := p.testHook.Load(); hook != nil {
		(*hook)(req)
	}
	if target != nil {
		if status, why := refusedInTunnel(req); status != 0 {
			return rec.deny(answer.Refused(req, status, why))
		}
	}
	if looped(req.Header) {
		return rec.deny(answer.Refused(req, http.StatusLoopDetected,
			"request loop detected (Via already contains nora-breaker)"))
	}
	if target != nil && (!sameHost(req.URL, *target) || !sameHostHeader(req, *target)) {
		return rec.deny(answer.Refused(req, http.StatusMisdirectedRequest,
			"request Host does not match the CONNECT target"))
	}
	host, port := hostport.Of(req.URL)
	m := snap.routes.Of(req.URL)
	rec.route = m
	if why := snap.policy.RefuseTarget(host, port, m.Classified()); why != "" {
		return rec.deny(answer.Refused(req, http.StatusForbidden, why))
	}
	if m.ClimbsOut {
		rec.result = answer.BadRequest
		return answer.Refused(req, http.StatusBadRequest, "the path climbs out of the upstream's base path")
	}
	prepareOutbound(req)
	if !m.Classified() {
		return p.forwardUnclassified(req, snap, rec)
	}
	res := p.chain.Serve(fallback.Request{Client: req, Addressed: m.Upstream, HostKey: m.Key, Rel: m.Rel,
		Candidates: m.Candidates, Equivalent: m.Equivalent, Settings: snap.fallback})
	rec.apply(res)
	return res.Resp
}

// refusedInTunnel is the status and reason a request inside an intercepted
// tunnel is refused with before anything else is looked at, or 0.
func refusedInTunnel(req *http.Request) (int, string) {
	switch {
	case req.Method == "PRI" && req.URL.Path == "*":
		// HTTP/2's connection preface on a connection that negotiated
		// HTTP/1.1 (or none): net/http hands it to the handler as a
		// request, and forwarding it would turn it into "PRI * HTTP/1.1".
		// HTTP/2 inside a tunnel is offered through ALPN only.
		return http.StatusHTTPVersionNotSupported, "HTTP/2 here needs ALPN h2, not prior knowledge"
	case req.Method == http.MethodConnect:
		// A tunnel inside the tunnel would be a way past every check made
		// on the outer CONNECT.
		return http.StatusMethodNotAllowed, "CONNECT inside an intercepted tunnel is not allowed"
	}
	return 0, ""
}

// forwardUnclassified passes a request for a host that is no upstream
// through as is, without a breaker of its own; through a parent proxy, the
// parent's breaker admits it.
func (p *Proxy) forwardUnclassified(req *http.Request, snap *snapshot, rec *record) *http.Response {
	rec.result = answer.Unclassified
	if pk := snap.egress.ParentKey(req.URL); pk != "" && p.breakers.Refusing(pk) {
		rec.result = answer.Synthesized503
		return p.parentUnavailable(req, pk, 0)
	}
	resp, _, release, err := attempt.RoundTripWithin(snap.egress, req, unclassifiedHeaderTimeout)
	if err != nil {
		var pe *dial.ParentError
		if errors.As(err, &pe) && pe.Fault == dial.FaultOpen {
			rec.result, rec.err = answer.Synthesized503, err
			return p.parentUnavailable(req, pe.Key, 0)
		}
		if errors.Is(err, destination.ErrForbidden) {
			rec.result = answer.Denied
		} else {
			rec.result = answer.Error
		}
		rec.err = err
		p.sender.CountLocalFault(err)
		return answer.ForError(req, "", req.URL.Host, err)
	}
	if resp.StatusCode == http.StatusSwitchingProtocols {
		// The body is the upgraded connection, relayed as it is: wrapping
		// it would hide its Write, and the relay ends with the request.
		return resp
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: release}
	return resp
}

// prepareOutbound turns the client's request into the upstream request in
// place: hop-by-hop headers removed, our Via added.
func prepareOutbound(req *http.Request) {
	req.RequestURI = ""
	stripRequestHopByHop(req.Header)
	addVia(req.Header)
	if req.Host == "" {
		req.Host = req.URL.Host
	}
}

// sameHost checks an intercepted request against its CONNECT target, so a
// tunnel opened for one upstream cannot be used to reach another host.
func sameHost(u *url.URL, target tunnel.Target) bool {
	host, port := hostport.Of(u)
	return host == target.Host && port == target.Port
}

// sameHostHeader reports whether req's Host (HTTP/2's :authority) names the
// CONNECT target too, or is empty. net/http's HTTP/2 server takes the URL
// from an absolute :path, so a request may name the target there and
// another host in its :authority, which goes upstream as the Host
// (docs/behaviour.md §5.2); HTTP/1.1 makes the two agree itself.
func sameHostHeader(req *http.Request, target tunnel.Target) bool {
	return req.Host == "" || sameHost(&url.URL{Scheme: req.URL.Scheme, Host: req.Host}, target)
}

// cancelOnClose releases a request's context when its body is closed.
type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelCauseFunc
}

func (c *cancelOnClose) Close() error {
	err := c.ReadCloser.Close()
	c.cancel(nil)
	return err
}
