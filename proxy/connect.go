package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/nora-breaker/nora-breaker/answer"
	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/clientconn"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/destination"
	"github.com/nora-breaker/nora-breaker/dial"
	"github.com/nora-breaker/nora-breaker/internal/hostport"
	"github.com/nora-breaker/nora-breaker/relay"
	"github.com/nora-breaker/nora-breaker/route"
	"github.com/nora-breaker/nora-breaker/tunnel"
)

// onConnect decides a CONNECT: intercept upstream and alias hosts when a CA
// is configured; otherwise tunnel, with the host's breaker deciding for
// upstream hosts; refuse what policy forbids. It does no I/O: the dial and
// everything after it happen in the hijacked connection's own handler, so
// nothing is left behind if goproxy cannot hijack the connection.
func (p *Proxy) onConnect(requested string, ctx *goproxy.ProxyCtx) (action *goproxy.ConnectAction, target string) {
	rec := p.newRecord(ctx.Req)
	rec.scheme = "connect"
	defer func() {
		if v := recover(); v != nil {
			p.log.Error().Str("panic", fmt.Sprint(v)).Msg("CONNECT handler panic recovered")
			action, target = p.rejectConnect(ctx, rec, answer.Error,
				answer.Text(ctx.Req, http.StatusInternalServerError, "nora-breaker: internal error\n"))
		}
	}()
	host, port, err := hostport.Split(requested, "")
	if err != nil || port == "" || host == "" {
		return p.rejectConnect(ctx, rec, answer.Denied, answer.Refused(ctx.Req, http.StatusBadRequest,
			"CONNECT needs a host:port target"))
	}
	// From here on the target is in its one canonical spelling: a
	// trailing dot or upper case names the same upstream host.
	addr := hostport.Join(host, port)
	snap := p.state.Load()
	rec.everyRefusal = snap.cfg.Sidecar.LogRefusals == "every"
	rt := snap.routes.OfHost(host, port)
	rec.route = rt
	up := rt.Upstream
	if why := connectRefusal(snap, up, host, port); why != "" {
		return p.rejectConnect(ctx, rec, answer.Denied, answer.Refused(ctx.Req, http.StatusForbidden, why))
	}
	if up != nil && p.interceptor != nil {
		target := &tunnel.Target{Host: host, Port: port}
		ctx.UserData = target
		rec.result = answer.Intercepted
		p.emit(rec, 0)
		return p.interceptAction(*target, snap), addr
	}
	return &goproxy.ConnectAction{Action: goproxy.ConnectHijack,
		Hijack: func(req *http.Request, client net.Conn, _ *goproxy.ProxyCtx) {
			p.serveTunnel(req, client, snap, rt, addr, rec)
		}}, addr
}

// connectRefusal returns why a CONNECT is refused, or "".
func connectRefusal(snap *snapshot, up *config.Upstream, host, port string) string {
	if why := snap.policy.RefuseTarget(host, port, up != nil); why != "" {
		return why
	}
	if up == nil && !snap.connectPorts[port] { // a classified route is on its own port
		return "CONNECT port " + port + " is not allowed"
	}
	return ""
}

// serveTunnel runs an accepted blind tunnel on the hijacked client
// connection: for an upstream host its host's breaker decides and learns the
// dial's outcome; the CONNECT is answered with 503, 403, 502 or 200, and
// after a 200 bytes are relayed both ways until both sides are done.
func (p *Proxy) serveTunnel(req *http.Request, client net.Conn, snap *snapshot, rt route.Route,
	addr string, rec *record) {
	defer client.Close()
	host, port, _ := hostport.Split(addr, "")
	retryAfterMax := time.Duration(0)
	if rt.Classified() {
		retryAfterMax = snap.cfg.Sidecar.RetryAfterMax[rt.Upstream.Format]
	}
	if pk := snap.egress.ParentKeyOfHost(host, port); pk != "" && p.breakers.Refusing(pk) {
		// The parent proxy the tunnel would go through is down: the
		// upstream's breaker is not asked (docs/behaviour.md §5.8).
		p.answerConnect(client, rec, answer.Synthesized503, p.parentUnavailable(req, pk, retryAfterMax))
		return
	}
	ticket := breakerstate.Ticket{}
	if rt.Classified() {
		t, err := p.breakers.Admit(rt.Key)
		if err != nil {
			state, wait, _ := p.breakers.RetryAfter(rt.Key)
			p.answerConnect(client, rec, answer.Synthesized503,
				answer.Unavailable(req, "", rt.Key, state.String(), wait, retryAfterMax))
			return
		}
		ticket = t
	}
	upstream, err := snap.egress.DialTunnel(req.Context(), host, port)
	var pe *dial.ParentError
	if errors.As(err, &pe) && pe.Fault == dial.FaultOpen {
		ticket.Done(breakerstate.Neutral) // the parent's breaker refused, after all
		p.answerConnect(client, rec, answer.Synthesized503, p.parentUnavailable(req, pe.Key, retryAfterMax))
		return
	}
	if errors.Is(err, destination.ErrForbidden) {
		ticket.Done(breakerstate.Neutral) // policy, not the upstream's fault
		p.answerConnect(client, rec, answer.Denied, answer.Refused(req, http.StatusForbidden, err.Error()))
		return
	}
	if err != nil {
		ticket.Done(attempt.Decide(nil, err, req.Context()))
		rec.err = err
		p.sender.CountLocalFault(err)
		key := addr
		if rt.Classified() {
			key = rt.Key
		}
		p.answerConnect(client, rec, answer.Error, answer.ForError(req, "", key, err))
		return
	}
	ticket.Done(breakerstate.Success)
	defer upstream.Close()
	if _, err := io.WriteString(client, tunnel.Established(req)); err != nil {
		return
	}
	rec.result, rec.status = answer.Tunnel, http.StatusOK
	p.emit(rec, 0)
	relay.Tunnel(client, clientconn.IdleBounded(upstream, p.fixed.idleTimeout), p.bufs, &p.drainers)
}

// parentUnavailable is the 503 for a request or tunnel that would go
// through parent proxy key while its breaker refuses; its Retry-After is
// bounded by max, the retry_after_max of the format the request is for (0
// for an unclassified one: the whole wait).
func (p *Proxy) parentUnavailable(req *http.Request, key string, max time.Duration) *http.Response {
	state, wait, _ := p.breakers.RetryAfter(key)
	return answer.Unavailable(req, "", key, state.String(), wait, max)
}

// interceptAction answers an intercepted CONNECT: goproxy hands us the raw
// client connection and the interceptor does the rest, under the snapshot
// the CONNECT was decided with (each request inside takes its own).
func (p *Proxy) interceptAction(target tunnel.Target, snap *snapshot) *goproxy.ConnectAction {
	sc := snap.cfg.Sidecar
	return &goproxy.ConnectAction{Action: goproxy.ConnectHijack,
		Hijack: func(req *http.Request, client net.Conn, _ *goproxy.ProxyCtx) {
			p.interceptor.Serve(tunnel.Conn{Req: req, Client: client, Target: target,
				HandshakeTimeout: sc.TLSHandshakeTimeout, Streams: tunnel.StreamsPerConn(sc.MaxUpstreamConnsPerHost)})
		}}
}

// answerConnect writes resp as the CONNECT's answer on the raw connection.
func (p *Proxy) answerConnect(client net.Conn, rec *record, result answer.Result, resp *http.Response) {
	tunnel.Refuse(client, resp)
	rec.result, rec.status = result, resp.StatusCode
	p.emit(rec, 0)
}

// rejectConnect answers a CONNECT with resp and closes the connection.
func (p *Proxy) rejectConnect(ctx *goproxy.ProxyCtx, rec *record, result answer.Result, resp *http.Response) (*goproxy.ConnectAction, string) {
	resp.Header.Set("Connection", "close")
	resp.Close = true
	ctx.Resp = resp
	rec.result, rec.status = result, resp.StatusCode
	p.emit(rec, 0)
	return goproxy.RejectConnect, ctx.Req.URL.Host
}
