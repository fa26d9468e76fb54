package proxy

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/answer"
	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/fallback"
	"github.com/nora-breaker/nora-breaker/route"
)

// keptQueryParams are query parameters whose values are safe and useful in
// logs; every other value is redacted, since tokens and signatures travel in
// query strings.
var keptQueryParams = map[string]bool{"service": true, "scope": true, "q": true, "n": true, "last": true, "ns": true}

// record collects every decision about one request for its log line.
type record struct {
	ctx      context.Context // the client's request: done once the client has gone
	start    time.Time
	method   string
	scheme   string
	host     string
	path     string
	query    string
	client   string
	route    route.Route
	result   answer.Result
	servedBy string
	attempts fallback.Attempts
	// coalesced: the request joined an identical request's decision.
	coalesced bool
	status    int
	// err is why the proxy answered with an error of its own outside the
	// fallback loop (an unclassified host, a CONNECT's dial), for the log.
	err error
	// everyRefusal logs every refusal in full (log_refusals = "every",
	// taken from the request's snapshot); else they are summarised.
	everyRefusal bool
}

func (p *Proxy) newRecord(req *http.Request) *record {
	return &record{ctx: req.Context(), start: p.now(), method: req.Method, scheme: req.URL.Scheme, host: req.URL.Host,
		path: req.URL.EscapedPath(), query: redactQuery(req.URL.RawQuery), client: req.RemoteAddr}
}

// apply takes over what the fallback loop decided.
func (r *record) apply(res fallback.Result) {
	r.result, r.servedBy, r.attempts, r.coalesced = res.Kind, res.ServedBy, res.Attempts, res.Coalesced
}

// deny records a refusal by policy and returns the refusal.
func (r *record) deny(resp *http.Response) *http.Response {
	r.result = answer.Denied
	return resp
}

func (r *record) format() string {
	if r.route.Upstream == nil {
		return "none"
	}
	return r.route.Upstream.Format
}

func (r *record) key() string { return r.route.Key }

// finish prepares the client's answer and arranges for the request's log
// line and metrics once its body has been sent.
func (p *Proxy) finish(rec *record, resp *http.Response) *http.Response {
	if resp == nil {
		// Never hand goproxy a nil response: on intercepted connections it
		// would drop the client without an answer.
		rec.result = answer.Error
		resp = answer.Text(nil, http.StatusBadGateway, "nora-breaker: no response\n")
	}
	rec.status = resp.StatusCode
	if resp.StatusCode == http.StatusSwitchingProtocols {
		p.emit(rec, 0)
		return resp
	}
	stripAnswerHopByHop(resp.Header)
	if resp.Body == nil {
		resp.Body = http.NoBody
	}
	resp.Body = &loggedBody{ReadCloser: resp.Body, p: p, rec: rec}
	return resp
}

// emit writes the request's one log line and counts it, in that order: a
// request counted has had its line written or left out.
func (p *Proxy) emit(rec *record, bytes int64) {
	defer p.metrics.requests.WithLabelValues(rec.format(), string(rec.result)).Inc()
	lvl := zerolog.InfoLevel
	if rec.status >= 500 {
		lvl = zerolog.WarnLevel
	}
	ev := p.log.WithLevel(lvl)
	if rec.ctx != nil && rec.ctx.Err() != nil {
		// The client went away (a reset stream, a closed connection): its
		// lines are rate limited, since a client can cause them by the
		// thousand each second. Metrics above still count every one.
		ok, left := p.goneLog.allow()
		if !ok {
			return
		}
		ev = ev.Bool("client_gone", true).Int64("suppressed_before", left)
	} else if isRefusal(rec.result) && !rec.everyRefusal {
		ok, left := p.refusals.allow(string(rec.result) + " " + rec.key())
		if !ok {
			return
		}
		if left > 0 {
			ev = ev.Int64("suppressed_before", left)
		}
	}
	if rec.err != nil {
		ev = ev.Str("error", rec.err.Error())
	}
	if rec.coalesced {
		// Its attempts are the decision's it joined, made once for all.
		ev = ev.Bool("coalesced", true)
	}
	ev.
		Str("method", rec.method).Str("scheme", rec.scheme).Str("host", rec.host).
		Str("path", rec.path).Str("query", rec.query).Str("client", rec.client).
		Str("format", rec.format()).Str("key", rec.key()).Bool("alias", rec.route.Alias).
		Str("result", string(rec.result)).Int("status", rec.status).Str("served_by", rec.servedBy).
		Array("attempts", &rec.attempts).Int64("bytes", bytes).
		Float64("duration_ms", float64(p.now().Sub(rec.start).Microseconds())/1000).
		Msg("request")
}

// isRefusal reports the answers the proxy gives in its own name by the
// thousand during an outage: a breaker's 503, a throttled host's answer.
// Policy's refusals (403) are each logged: they tell of a client, not of an
// outage, and an operator wants every host a client was refused.
func isRefusal(r answer.Result) bool {
	return r == answer.Synthesized503 || r == answer.Throttled
}

// loggedBody counts the bytes sent to the client and logs the request when
// the body is done.
type loggedBody struct {
	io.ReadCloser
	p    *Proxy
	rec  *record
	n    int64
	done atomic.Bool
}

func (b *loggedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n += int64(n)
	return n, err
}

func (b *loggedBody) Close() error {
	err := b.ReadCloser.Close()
	if b.done.CompareAndSwap(false, true) {
		b.p.emit(b.rec, b.n)
	}
	return err
}

// redactQuery keeps parameter names and replaces values outside the
// allowlist, so tokens and signatures never reach a log.
func redactQuery(raw string) string {
	if raw == "" {
		return ""
	}
	parts := strings.Split(raw, "&")
	for i, kv := range parts {
		k, _, hasValue := strings.Cut(kv, "=")
		if !hasValue {
			continue
		}
		// A name that does not unescape is no name we keep: its value is
		// redacted like any other's, never logged as it came.
		name, err := url.QueryUnescape(k)
		if err != nil || !keptQueryParams[strings.ToLower(name)] {
			parts[i] = k + "=REDACTED"
		}
	}
	return strings.Join(parts, "&")
}

// logTransition logs a breaker transition: warn when an upstream is cut off,
// info when it is probed or comes back. It also keeps it in the bounded
// history the admin listener shows (history.go).
func (p *Proxy) logTransition(t breakerstate.Transition) {
	p.history.Add(t)
	lvl := zerolog.InfoLevel
	if t.To == breakerstate.Open {
		lvl = zerolog.WarnLevel
	}
	p.log.WithLevel(lvl).Str("key", t.Key).Str("from", t.From.String()).Str("to", t.To.String()).
		Int("failure_count", t.FailureCount).Bool("remote", t.Remote).Bool("manual", t.Manual).
		Str("why", t.Why()).Msg("circuit breaker transition")
}
