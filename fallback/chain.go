package fallback

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/stale"
)

// ErrExhausted means no candidate served the request and no stale copy was
// available.
var ErrExhausted = errors.New("no upstream of the chain could serve the request")

// maxFailureBody bounds how much of an addressed upstream's 5xx body is kept
// to replay to the client when no candidate serves (SPEC §5.3).
const maxFailureBody = 64 << 10

// Result kinds, used as the "result" label of nora_sidecar_requests_total and
// in the request log.
const (
	KindForwarded      = "forwarded"
	KindFallback       = "fallback"
	KindStale          = "stale"
	KindSynthesized503 = "synthesized_503"
	KindSynthesized404 = "synthesized_404"
	KindError          = "error"
)

// Options configures a Chain.
type Options struct {
	Breakers *breakerstate.Set
	Sender   *Sender
	Tokens   *TokenSource
	// Stale is the stale cache, nil when stale_dir is unset.
	Stale *stale.Cache
	// StaleMode is [sidecar] stale_authenticated: off, isolate or share.
	StaleMode string
	// Deadline bounds the time spent looking for a candidate that answers
	// (headers), across all candidates. Zero means 60 s.
	Deadline   time.Duration
	Now        func() time.Time
	Registerer prometheus.Registerer
	Logger     zerolog.Logger
}

// Chain walks the candidates of a request whose addressed upstream cannot
// serve it, then the stale cache, then builds the terminal answer.
type Chain struct {
	o           Options
	fallbacks   *prometheus.CounterVec
	staleServed *prometheus.CounterVec
}

// Request is one client request that needs the chain.
type Request struct {
	// Client is the request as it would go to the addressed upstream
	// (hop-by-hop headers removed, Via added). Its context is the client's.
	Client *http.Request
	// Addressed is the upstream the client addressed; Rel the path below its
	// URL; Candidates the upstreams that may be asked instead (SPEC §5.4).
	Addressed  *config.Upstream
	Rel        string
	Candidates []*config.Upstream
}

// Result is the chain's answer plus what the request log needs.
type Result struct {
	Resp     *http.Response
	Kind     string
	ServedBy string // breaker key of the upstream that served, "" if none
	Attempts int
}

// New builds a Chain and registers its metrics.
func New(o Options) (*Chain, error) {
	if o.Deadline <= 0 {
		o.Deadline = 60 * time.Second
	}
	c := &Chain{
		o: o,
		fallbacks: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nora_sidecar_fallback_total",
			Help: "Requests for one upstream served by another upstream of the same format.",
		}, []string{"from", "to"}),
		staleServed: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nora_sidecar_stale_served_total",
			Help: "Stale copies served because no upstream could answer, by addressed breaker key.",
		}, []string{"registry"}),
	}
	for _, m := range []prometheus.Collector{c.fallbacks, c.staleServed} {
		if err := o.Registerer.Register(m); err != nil {
			return nil, fmt.Errorf("register fallback metrics: %w", err)
		}
	}
	return c, nil
}

// Rejected answers a request whose addressed upstream's breaker rejected it
// (SPEC §5.4).
func (c *Chain) Rejected(r Request) Result {
	skipped := []string{r.Addressed.Key}
	if !Substitutable(r.Client.Method) {
		return Result{Resp: c.unavailable(r, skipped), Kind: KindSynthesized503}
	}
	res, saw404, more := c.tryCandidates(r)
	if res.Resp != nil {
		return res
	}
	skipped = append(skipped, more...)
	if st, ok := c.serveStale(r); ok {
		st.Attempts = res.Attempts
		return st
	}
	if saw404 && notFoundIsTruth(r.Addressed.Format) {
		return Result{Resp: NotFound(r.Client, r.Addressed.Format, r.Addressed.Key),
			Kind: KindSynthesized404, Attempts: res.Attempts}
	}
	return Result{Resp: c.unavailable(r, skipped), Kind: KindSynthesized503, Attempts: res.Attempts}
}

// Failed continues a GET or HEAD whose attempt at the addressed upstream
// failed before anything reached the client (SPEC §5.3). primary is the
// addressed upstream's 5xx answer (nil on a transport error, then cause says
// why). The failure was already recorded on the addressed key.
func (c *Chain) Failed(r Request, primary *http.Response, cause error) Result {
	replay := keepFailure(primary)
	res, saw404, _ := c.tryCandidates(r)
	res.Attempts++ // the addressed attempt
	if res.Resp != nil {
		return res
	}
	if st, ok := c.serveStale(r); ok {
		st.Attempts = res.Attempts
		return st
	}
	if saw404 && notFoundIsTruth(r.Addressed.Format) {
		return Result{Resp: NotFound(r.Client, r.Addressed.Format, r.Addressed.Key),
			Kind: KindSynthesized404, Attempts: res.Attempts}
	}
	if replay != nil {
		return Result{Resp: replay(r.Client), Kind: KindForwarded, ServedBy: r.Addressed.Key, Attempts: res.Attempts}
	}
	status := http.StatusBadGateway
	if errors.Is(cause, ErrHeaderTimeout) {
		status = http.StatusGatewayTimeout
	}
	return Result{Resp: GatewayError(r.Client, r.Addressed.Format, r.Addressed.Key, status, cause),
		Kind: KindError, Attempts: res.Attempts}
}

// Substitutable reports whether a method may be sent to another upstream,
// or continue down the chain after the addressed upstream failed: GET and
// HEAD, which are safe to repeat.
func Substitutable(method string) bool {
	return method == http.MethodGet || method == http.MethodHead
}

// notFoundIsTruth: for maven and docker another upstream's 404 is good enough
// to answer 404; for the rest (pypi especially) a skipped upstream might have
// had it, so only 503 is honest.
func notFoundIsTruth(format string) bool { return format == "maven" || format == "docker" }

// tryCandidates asks each candidate in order and returns the first success.
// saw404 reports whether a candidate said 404/410; skipped lists the keys of
// candidates whose breaker rejected them.
func (c *Chain) tryCandidates(r Request) (res Result, saw404 bool, skipped []string) {
	ctx := r.Client.Context()
	deadline := c.o.Now().Add(c.o.Deadline)
	for _, cand := range r.Candidates {
		if ctx.Err() != nil || !c.o.Now().Before(deadline) {
			break
		}
		t, err := c.o.Breakers.Allow(cand.Key)
		if err != nil {
			skipped = append(skipped, cand.Key)
			continue
		}
		res.Attempts++
		resp, err := c.attempt(r, cand, t, deadline)
		if err != nil {
			c.o.Logger.Debug().Str("key", cand.Key).Err(err).Msg("fallback candidate failed")
			continue
		}
		switch {
		case resp.StatusCode < 400:
			c.fallbacks.WithLabelValues(r.Addressed.Key, cand.Key).Inc()
			res.Resp, res.Kind, res.ServedBy = c.present(r, cand, resp), KindFallback, cand.Key
			return res, saw404, skipped
		case resp.StatusCode == http.StatusNotFound || resp.StatusCode == http.StatusGone:
			saw404 = true
		}
		drainClose(resp.Body)
	}
	return res, saw404, skipped
}

// attempt sends the substituted request to cand, negotiating a docker bearer
// token once when the candidate asks for one.
func (c *Chain) attempt(r Request, cand *config.Upstream, t breakerstate.Ticket, deadline time.Time) (*http.Response, error) {
	// The chain's deadline bounds only the wait for headers (through each
	// attempt's header timeout); a body that is being served streams on.
	out := Substitute(r.Client, cand, r.Rel)
	resp, err := c.o.Sender.Send(out, limitTimeout(cand, deadline, c.o.Now()), t)
	if err != nil || resp.StatusCode != http.StatusUnauthorized || cand.Format != "docker" || c.o.Tokens == nil {
		return resp, err
	}
	ch, ok := BearerChallenge(resp.Header)
	if !ok {
		return resp, nil
	}
	if len(ch.Scopes) == 0 {
		ch.Scopes = dockerScope(r.Rel)
	}
	token, terr := c.o.Tokens.Token(r.Client.Context(), cand.Key, cand.Auth, ch)
	if terr != nil {
		return resp, nil // the 401 stands; the chain moves on
	}
	drainClose(resp.Body)
	t2, err := c.o.Breakers.Allow(cand.Key)
	if err != nil {
		return nil, err
	}
	retry := Substitute(r.Client, cand, r.Rel)
	retry.Header.Set("Authorization", "Bearer "+token)
	resp, err = c.o.Sender.Send(retry, limitTimeout(cand, deadline, c.o.Now()), t2)
	if err == nil && resp.StatusCode == http.StatusUnauthorized {
		// The registry refused a token we still thought fresh (revoked, or
		// its clock disagrees): forget it so the next pull fetches anew
		// instead of failing until it expires.
		c.o.Tokens.Invalidate(cand.Key, ch)
	}
	return resp, err
}

// limitTimeout returns cand with its header timeout cut to what is left of
// the chain's deadline.
func limitTimeout(cand *config.Upstream, deadline, now time.Time) *config.Upstream {
	left := deadline.Sub(now)
	if left >= cand.ProxyTimeout {
		return cand
	}
	if left < time.Millisecond {
		left = time.Millisecond
	}
	cp := *cand
	cp.ProxyTimeout = left
	return &cp
}

// serveStale looks up a stale copy of the client's request.
func (c *Chain) serveStale(r Request) (Result, bool) {
	if c.o.Stale == nil {
		return Result{}, false
	}
	key, ok := stale.Key(r.Client, r.Addressed.Format, c.o.StaleMode)
	if !ok {
		return Result{}, false
	}
	e, ok := c.o.Stale.Lookup(key)
	if !ok {
		return Result{}, false
	}
	c.staleServed.WithLabelValues(r.Addressed.Key).Inc()
	return Result{Resp: e.Response(r.Client, c.o.Now()), Kind: KindStale}, true
}

// unavailable builds the synthesized 503 with Retry-After = the smallest
// remaining open time of the skipped upstreams.
func (c *Chain) unavailable(r Request, skipped []string) *http.Response {
	state, wait, _ := c.o.Breakers.RetryAfter(r.Addressed.Key)
	for _, k := range skipped[1:] {
		if _, d, ok := c.o.Breakers.RetryAfter(k); ok && d < wait {
			wait = d
		}
	}
	return Unavailable(r.Client, r.Addressed.Format, r.Addressed.Key, state.String(), wait)
}

// keepFailure buffers up to 64 KiB of a 5xx answer so it can be replayed if
// no candidate serves; nil when there is no answer to keep.
func keepFailure(resp *http.Response) func(*http.Request) *http.Response {
	if resp == nil {
		return nil
	}
	body, _ := io.ReadAll(io.LimitReader(resp.Body, maxFailureBody))
	resp.Body.Close()
	return func(req *http.Request) *http.Response {
		cp := *resp
		cp.Header = resp.Header.Clone()
		cp.Request = req
		cp.Body = newBytesBody(body)
		cp.ContentLength = int64(len(body))
		cp.Header.Del("Content-Length")
		cp.TransferEncoding = nil
		if req.Method == http.MethodHead {
			cp.Body = http.NoBody
		}
		return &cp
	}
}

// drainClose reads a little of an unwanted body so the connection can be
// reused, then closes it.
func drainClose(rc io.ReadCloser) {
	_, _ = io.CopyN(io.Discard, rc, 4<<10)
	rc.Close()
}
