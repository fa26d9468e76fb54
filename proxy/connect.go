package proxy

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"strings"

	"github.com/elazarl/goproxy"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/fallback"
)

// onConnect decides a CONNECT (SPEC §5.2): intercept upstream and alias
// hosts when a CA is configured; otherwise tunnel, with the host's breaker
// deciding for upstream hosts; refuse what policy forbids.
func (p *Proxy) onConnect(hostport string, ctx *goproxy.ProxyCtx) (action *goproxy.ConnectAction, target string) {
	rec := p.newRecord(ctx.Req)
	rec.scheme = "connect"
	defer func() {
		if v := recover(); v != nil {
			p.log.Error().Str("panic", fmt.Sprint(v)).Msg("CONNECT handler panic recovered")
			action, target = p.rejectConnect(ctx, rec, fallback.KindError,
				fallback.TextResponse(ctx.Req, http.StatusInternalServerError, "text/plain; charset=utf-8",
					"nora-breaker: internal error\n"))
		}
	}()
	host, port, err := net.SplitHostPort(hostport)
	if err != nil || port == "" || host == "" {
		return p.rejectConnect(ctx, rec, "denied", plainAnswer(ctx.Req, http.StatusBadRequest,
			"CONNECT needs a host:port target"))
	}
	host = strings.ToLower(host)
	st := p.state.Load()
	up := st.table.HostUpstream(host)
	rec.match = Match{Upstream: up, Alias: true}
	if why := p.connectRefusal(st, up, host, port); why != "" {
		return p.rejectConnect(ctx, rec, "denied", plainAnswer(ctx.Req, http.StatusForbidden, why))
	}
	if up != nil && p.ca != nil {
		cs := &connectState{host: host, port: port}
		ctx.UserData = cs
		rec.result = "intercept"
		p.log.Debug().Str("host", hostport).Str("key", up.Key).Msg("intercepting CONNECT")
		return p.interceptAction(cs, hostport), hostport
	}
	return p.tunnel(ctx, rec, up, hostport)
}

// connectRefusal returns why a CONNECT is refused, or "".
func (p *Proxy) connectRefusal(st *runtimeState, up *config.Upstream, host, port string) string {
	allowed := st.hostAllowed(host, port)
	switch {
	case literalForbidden(host) && !allowed:
		return "destination address is not allowed"
	case up == nil && st.cfg.Sidecar.DenyUnlisted && !allowed:
		return "host is not a configured upstream"
	case !st.connectPorts[port]:
		return "CONNECT port " + port + " is not allowed"
	}
	return ""
}

// tunnel dials the target now, while the CONNECT can still be answered with
// a status, and hands the connection to goproxy through connectDial. For an
// upstream host the breaker decides first and learns the dial's outcome.
func (p *Proxy) tunnel(ctx *goproxy.ProxyCtx, rec *record, up *config.Upstream, hostport string) (*goproxy.ConnectAction, string) {
	var done func(ok bool)
	if up != nil {
		t, err := p.breakers.Allow(up.Key)
		if errors.Is(err, breakerstate.ErrUnknownKey) {
			t, err = breakerstate.Ticket{}, nil // key gone in a reload: no breaker
		}
		if err != nil {
			state, wait, _ := p.breakers.RetryAfter(up.Key)
			return p.rejectConnect(ctx, rec, fallback.KindSynthesized503,
				fallback.Unavailable(ctx.Req, "", up.Key, state.String(), wait))
		}
		done = func(ok bool) {
			if ok {
				t.Done(breakerstate.Success)
			} else {
				t.Done(breakerstate.Failure)
			}
		}
	}
	conn, err := p.dial.DialContext(ctx.Req.Context(), "tcp", hostport)
	if err != nil {
		if errors.Is(err, ErrForbiddenDestination) {
			if done != nil {
				done(true) // policy, not the upstream's fault: do not count it
			}
			return p.rejectConnect(ctx, rec, "denied", plainAnswer(ctx.Req, http.StatusForbidden, err.Error()))
		}
		if done != nil {
			done(false)
		}
		key := hostport
		if up != nil {
			key = up.Key
		}
		return p.rejectConnect(ctx, rec, fallback.KindError,
			fallback.GatewayError(ctx.Req, "", key, http.StatusBadGateway, err))
	}
	if done != nil {
		done(true)
	}
	p.preDialed.Store(ctx.Req, conn)
	rec.result, rec.status = "tunnel", http.StatusOK
	p.emit(rec, 0)
	return &goproxy.ConnectAction{Action: goproxy.ConnectAccept}, hostport
}

// connectDial is goproxy's dial for accepted tunnels: it returns the
// connection tunnel() already opened.
func (p *Proxy) connectDial(req *http.Request, network, addr string) (net.Conn, error) {
	if c, ok := p.preDialed.LoadAndDelete(req); ok {
		return c.(net.Conn), nil
	}
	return p.dial.DialContext(req.Context(), network, addr)
}

// rejectConnect answers a CONNECT with resp and closes the connection.
func (p *Proxy) rejectConnect(ctx *goproxy.ProxyCtx, rec *record, result string, resp *http.Response) (*goproxy.ConnectAction, string) {
	resp.Header.Set("Connection", "close")
	resp.Close = true
	ctx.Resp = resp
	rec.result, rec.status = result, resp.StatusCode
	p.emit(rec, 0)
	return goproxy.RejectConnect, ctx.Req.URL.Host
}

func plainAnswer(req *http.Request, status int, why string) *http.Response {
	return fallback.TextResponse(req, status, "text/plain; charset=utf-8", "nora-breaker: "+why+"\n")
}
