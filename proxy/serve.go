package proxy

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/elazarl/goproxy"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/fallback"
	"github.com/nora-breaker/nora-breaker/stale"
)

// unclassifiedHeaderTimeout bounds the wait for headers from hosts that are
// not configured upstreams (they have no proxy_timeout of their own).
const unclassifiedHeaderTimeout = 60 * time.Second

// connectState is what a CONNECT leaves for the requests inside its tunnel
// (goproxy copies ctx.UserData into every inner request's context).
type connectState struct {
	host string // lower-case host name of the CONNECT target
	port string
}

// onRequest is the one goproxy request hook. It always answers, so goproxy
// never runs its own round trip, and it recovers panics: on intercepted
// HTTP/1.1 connections goproxy has no recover of its own.
func (p *Proxy) onRequest(req *http.Request, ctx *goproxy.ProxyCtx) (_ *http.Request, resp *http.Response) {
	rec := p.newRecord(req)
	defer func() {
		if v := recover(); v != nil {
			p.log.Error().Str("panic", fmt.Sprint(v)).Str("host", req.URL.Hostname()).Msg("handler panic recovered")
			rec.result = fallback.KindError
			resp = fallback.TextResponse(req, http.StatusInternalServerError, "text/plain; charset=utf-8",
				"nora-breaker: internal error\n")
		}
		resp = p.finish(rec, resp)
	}()
	cs, _ := ctx.UserData.(*connectState)
	return req, p.serve(req, cs, rec)
}

// serve decides one request and returns the client's answer.
func (p *Proxy) serve(req *http.Request, cs *connectState, rec *record) *http.Response {
	if hook := p.testHook.Load(); hook != nil {
		(*hook)(req)
	}
	if looped(req.Header) {
		rec.result = "denied"
		return fallback.TextResponse(req, http.StatusLoopDetected, "text/plain; charset=utf-8",
			"nora-breaker: request loop detected (Via already contains nora-breaker)\n")
	}
	if cs != nil && !sameHost(req.URL, cs) {
		rec.result = "denied"
		return fallback.TextResponse(req, http.StatusMisdirectedRequest, "text/plain; charset=utf-8",
			"nora-breaker: request Host does not match the CONNECT target\n")
	}
	st := p.state.Load()
	host, port := hostPort(req.URL)
	if literalForbidden(host) && !st.hostAllowed(host, port) {
		rec.result = "denied"
		return forbidden(req, "destination address is not allowed")
	}
	m := st.table.Classify(req.URL)
	rec.match = m
	prepareOutbound(req)
	if !m.Classified() {
		if st.cfg.Sidecar.DenyUnlisted && !st.hostAllowed(host, port) {
			rec.result = "denied"
			return forbidden(req, "host is not a configured upstream")
		}
		return p.forwardUnclassified(req, rec)
	}
	return p.forwardClassified(req, m, st, rec)
}

// forwardClassified is the transparent path (SPEC §5.3) with the seams to the
// fallback chain for rejected and failed requests.
func (p *Proxy) forwardClassified(req *http.Request, m Match, st *runtimeState, rec *record) *http.Response {
	u := m.Upstream
	fr := fallback.Request{Client: req, Addressed: u, Rel: m.Rel, Candidates: st.table.Candidates(m)}
	t, err := p.breakers.Allow(u.Key)
	if errors.Is(err, breakerstate.ErrUnknownKey) {
		// The key vanished in a reload between classification and here:
		// forward without a breaker rather than refuse.
		t, err = breakerstate.Ticket{}, nil
	}
	if err != nil {
		res := p.chain.Rejected(fr)
		return p.fromChain(req, u, rec, res)
	}
	rec.attempts = 1
	resp, err := p.sender.Send(req, u, t)
	idempotent := fallback.Substitutable(req.Method)
	switch {
	case err != nil && req.Context().Err() != nil:
		rec.result = fallback.KindError
		return fallback.GatewayError(req, u.Format, u.Key, http.StatusBadGateway, errors.New("client went away"))
	case err != nil && errors.Is(err, ErrForbiddenDestination):
		rec.result = "denied"
		return forbidden(req, "destination address is not allowed")
	case err != nil && idempotent:
		res := p.chain.Failed(fr, nil, err)
		return p.fromChain(req, u, rec, res)
	case err != nil:
		rec.result = fallback.KindError
		return fallback.GatewayError(req, u.Format, u.Key, gatewayStatus(err), err)
	case resp.StatusCode >= 500 && idempotent:
		res := p.chain.Failed(fr, resp, nil)
		return p.fromChain(req, u, rec, res)
	}
	rec.result, rec.servedBy = fallback.KindForwarded, u.Key
	p.teeStale(req, resp, u)
	return resp
}

// fromChain records what the chain decided and keeps a copy of an answer a
// mirror served: the client addressed this URL, and the next outage of the
// whole chain should still find the artifact.
func (p *Proxy) fromChain(req *http.Request, u *config.Upstream, rec *record, res fallback.Result) *http.Response {
	rec.apply(res)
	if res.Kind == fallback.KindFallback {
		p.teeStale(req, res.Resp, u)
	}
	return res.Resp
}

// teeStale stores a copy of a cacheable answer while it streams (SPEC §6).
func (p *Proxy) teeStale(req *http.Request, resp *http.Response, u *config.Upstream) {
	if p.stale == nil || resp.StatusCode != http.StatusOK || req.Method != http.MethodGet {
		return
	}
	key, ok := stale.Key(req, u.Format, p.state.Load().cfg.Sidecar.StaleAuthenticated)
	if !ok || !p.stale.Storable(req, resp) {
		return
	}
	p.stale.Tee(key, resp)
}

// forwardUnclassified passes a request for a host that is no upstream
// through as is, without a breaker.
func (p *Proxy) forwardUnclassified(req *http.Request, rec *record) *http.Response {
	rec.result = "unclassified"
	resp, _, release, err := fallback.RoundTripWithin(p.tr, req, unclassifiedHeaderTimeout)
	if err != nil {
		if errors.Is(err, ErrForbiddenDestination) {
			rec.result = "denied"
			return forbidden(req, "destination address is not allowed")
		}
		rec.result = fallback.KindError
		return fallback.GatewayError(req, "", req.URL.Host, gatewayStatus(err), err)
	}
	resp.Body = &cancelOnClose{ReadCloser: resp.Body, cancel: release}
	return resp
}

// gatewayStatus maps a transport error to 504 (header timeout) or 502.
func gatewayStatus(err error) int {
	if errors.Is(err, fallback.ErrHeaderTimeout) {
		return http.StatusGatewayTimeout
	}
	return http.StatusBadGateway
}

// prepareOutbound turns the client's request into the upstream request in
// place: hop-by-hop headers removed, our Via added (SPEC §5.5).
func prepareOutbound(req *http.Request) {
	req.RequestURI = ""
	stripHopByHop(req.Header)
	addVia(req.Header)
	if req.Host == "" {
		req.Host = req.URL.Host
	}
}

// sameHost checks an intercepted request against its CONNECT target, so a
// tunnel opened for one upstream cannot be used to reach another host.
func sameHost(u *url.URL, cs *connectState) bool {
	host, port := hostPort(u)
	return strings.EqualFold(host, cs.host) && port == cs.port
}

func forbidden(req *http.Request, why string) *http.Response {
	return fallback.TextResponse(req, http.StatusForbidden, "text/plain; charset=utf-8", "nora-breaker: "+why+"\n")
}

// hostPort returns the lower-case host and the port, defaulted by scheme.
func hostPort(u *url.URL) (string, string) {
	host, port := strings.ToLower(u.Hostname()), u.Port()
	if port == "" {
		port = "80"
		if strings.EqualFold(u.Scheme, "https") {
			port = "443"
		}
	}
	return host, port
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
