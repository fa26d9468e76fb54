package fallback

import (
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/answer"
	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/stale"
	"github.com/nora-breaker/nora-breaker/throttle"
)

// defaultDeadline bounds the search for a candidate that answers.
const defaultDeadline = 60 * time.Second

// Options configures a Chain. Zero values: Tokens nil means docker
// candidates get no bearer token negotiation; Stale nil means no stale
// copies; Deadline zero means 60 s.
type Options struct {
	Breakers *breakerstate.Set
	Sender   *attempt.Sender
	Tokens   *TokenSource
	Stale    *stale.Cache
	// Throttles holds the hosts that answered 429 (nil: never throttle).
	Throttles *throttle.Table
	// OnRedirect, when set, hears of every redirect a classified upstream
	// answered to another host: upstream is its key, target the absolute
	// Location (the proxy learns the host, docs/behaviour.md §3.2).
	OnRedirect func(upstream string, target *url.URL)
	// Deadline bounds the time spent waiting for candidates' headers,
	// across all candidates. A body that is being served streams on.
	Deadline   time.Duration
	Now        func() time.Time
	Registerer prometheus.Registerer
	Logger     zerolog.Logger
}

// Chain decides classified requests. It is safe for concurrent use.
type Chain struct {
	o      Options
	realms realms
	tokens identities
	blobs  blobRedirects
	// challenges holds each docker candidate's last Bearer challenge, to
	// find its cached token before it asks again.
	challenges  sync.Map // candidate key → Challenge
	fallbacks   *prometheus.CounterVec
	staleServed *prometheus.CounterVec
}

// Settings are the parts of the configuration a request is decided under.
// They are taken once, when the request arrives, so a reload in the middle of
// a request never gives it two configurations.
type Settings struct {
	// Transport carries every attempt of the request.
	Transport http.RoundTripper
	// StaleMode is stale_authenticated: off, isolate or share.
	StaleMode string
	// CredentialHeaders are the request headers that carry credentials:
	// never sent to a candidate, and what stale copies are kept apart by.
	// nil means stale.DefaultCredentialHeaders.
	CredentialHeaders []string
	// KeyOf returns the breaker key of the host a URL goes to, or "" when
	// it is no upstream's (used to find a docker token realm's breaker).
	KeyOf func(*url.URL) string
	// ThrottleDefault is how long a 429 without a usable Retry-After
	// throttles its host.
	ThrottleDefault time.Duration
}

// Request is one classified client request.
type Request struct {
	// Client is the request as it goes to the addressed upstream (hop-by-hop
	// headers removed, Via added). Its context is the client's.
	Client *http.Request
	// Addressed is the upstream the client addressed and HostKey the
	// breaker key of the host the request goes to (Addressed.Key for its URL
	// host, "<key>@<host>" for an alias host); Rel the escaped path below
	// its URL; Candidates the upstreams that may be asked instead, in order
	// (none for alias requests, bound or single upstreams).
	Addressed  *config.Upstream
	HostKey    string
	Rel        string
	Candidates []*config.Upstream
	Settings   Settings
}

// Result is the client's answer plus what the request's log line needs.
type Result struct {
	Resp     *http.Response
	Kind     answer.Result
	ServedBy string // breaker key of the upstream that served, "" if none
	Attempts int    // upstreams asked (a docker token retry is the same attempt)
}

// New builds a Chain and registers its metrics.
func New(o Options) (*Chain, error) {
	if o.Deadline <= 0 {
		o.Deadline = defaultDeadline
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

// Serve decides r: the one loop over the addressed upstream and then its
// candidates, then a stale copy, then the terminal answer. Each pass asks
// one upstream, after two checks (is its host throttled, does its breaker
// admit it); a pass that produces the client's answer ends the loop.
func (c *Chain) Serve(r Request) Result {
	if r.HostKey == "" {
		r.HostKey = r.Addressed.Key
	}
	s := &search{c: c, r: r}
	for i, u := range s.upstreams() {
		if i > 0 && !s.mayGoOn() {
			break
		}
		ticket, admitted := s.admit(i, u)
		if !admitted {
			if i == 0 && !substitutable(r.Client.Method) {
				return Result{Resp: s.unavailable(), Kind: answer.Synthesized503}
			}
			continue
		}
		if res, done := s.ask(i, u, ticket); done {
			return res
		}
	}
	return s.exhausted()
}

// substitutable reports whether a method may be sent to another upstream,
// or continue down the chain after the addressed upstream failed: GET and
// HEAD, which are safe to repeat.
func substitutable(method string) bool {
	return method == http.MethodGet || method == http.MethodHead
}

// notFoundIsTruth: for maven and docker another upstream's 404 is good enough
// to answer 404; for the rest (pypi especially) a skipped upstream might have
// had it, so only 503 is honest.
func notFoundIsTruth(format string) bool { return format == "maven" || format == "docker" }
