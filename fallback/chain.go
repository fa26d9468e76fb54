package fallback

import (
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/answer"
	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/coalesce"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/fallback/format"
	"github.com/nora-breaker/nora-breaker/stale"
	"github.com/nora-breaker/nora-breaker/throttle"
)

// defaultDeadline bounds the search for a candidate that answers.
const defaultDeadline = 60 * time.Second

// Options configures a Chain. Zero values: Formats nil means every format
// is format.Plain; Stale nil means no stale copies; Deadline zero means 60 s.
type Options struct {
	Breakers *breakerstate.Set
	Sender   *attempt.Sender
	// Formats holds what each format adds to the loop (docker's tokens,
	// PyPI's links); a format without an entry is format.Plain.
	Formats format.Set
	Stale   *stale.Cache
	// Throttles holds the hosts that answered 429 (nil: never throttle).
	Throttles *throttle.Table
	// OnRedirect, when set, hears of every redirect a classified upstream
	// answered to another host: upstream is its key, target the absolute
	// Location (the proxy learns the host, docs/behaviour.md §3.2).
	OnRedirect func(upstream string, target *url.URL)
	// Coalesce, when set, lets identical GETs that arrive while one is
	// decided share its decision (coalesce.go); nil decides every request
	// alone. Its Registerer, Logger and Now are these Options'.
	Coalesce *coalesce.Options
	// Deadline bounds the time spent waiting for candidates' headers,
	// across all candidates. A body that is being served streams on.
	Deadline time.Duration
	// Now is the clock of the search's deadline. It must be the clock the
	// attempts' timers run on (time.Now, which inside a testing/synctest
	// bubble is the bubble's): a candidate's header wait is bounded by the
	// time Now says is left, and attempt's timer then counts it down.
	Now        func() time.Time
	Registerer prometheus.Registerer
	Logger     zerolog.Logger
}

// Chain decides classified requests. It is safe for concurrent use.
type Chain struct {
	o           Options
	fallbacks   *prometheus.CounterVec
	staleServed *prometheus.CounterVec
	staleRuns   *staleWatch
	// joins holds the decisions in flight that identical GETs may join;
	// nil when Options.Coalesce is.
	joins *coalesce.Group[Result]
	// hedges is the hedging budget's count per host; the counters below
	// count hedges sent, those that served the client, and those the
	// budget refused, by the addressed key.
	hedges                                  hedgeBudget
	hedgesSent, hedgesWon, hedgesOverBudget *prometheus.CounterVec
}

// Settings are the parts of the configuration a request is decided under.
// They are taken once, when the request arrives, so a reload in the middle of
// a request never gives it two configurations.
type Settings struct {
	// Transport carries every attempt of the request.
	Transport http.RoundTripper
	// ParentKey names the breaker key of the parent proxy a URL is
	// reached through, or "" (directly); nil: no parent anywhere. While
	// that breaker refuses, the upstream is skipped without its own
	// breaker being asked (docs/behaviour.md §5.8).
	ParentKey func(*url.URL) string
	// StaleMode is stale_authenticated: off, isolate or share.
	StaleMode string
	// CredentialHeaders are the request headers that carry credentials
	// besides Authorization and Cookie, which always do: never sent to a
	// candidate, and what stale copies are kept apart by. nil means
	// stale.DefaultCredentialHeaders.
	CredentialHeaders []string
	// Routes names the breaker key of the host a URL goes to (a format
	// uses it to find the breaker of a docker token realm); nil: none.
	Routes format.Routes
	// ThrottleDefault is how long a 429 without a usable Retry-After
	// throttles its host.
	ThrottleDefault time.Duration
	// RetryAfterMax is, per format, the longest Retry-After the proxy's own
	// 503 and 429 say (answer.RetryAfter; a format not listed: no limit).
	RetryAfterMax map[string]time.Duration
}

// Request is one classified client request.
type Request struct {
	// Client is the request as it goes to the addressed upstream (hop-by-hop
	// headers removed, Via added). Its context is the client's.
	Client *http.Request
	// Addressed is the upstream the client addressed and HostKey the
	// breaker key of the host the request goes to (Addressed.Key for its URL
	// host, "<key>@<host>" for an alias or equivalent host); Rel the escaped path below
	// its URL; Candidates the upstreams that may be asked instead, in the
	// order the loop asks them (none for alias requests, bound or single
	// upstreams). The loop takes them as given.
	Addressed  *config.Upstream
	HostKey    string
	Rel        string
	Candidates []*config.Upstream
	// Equivalent marks a request to one of Addressed's equivalent hosts
	// (registry.yarnpkg.com for registry.npmjs.org): its registry under
	// another name, so what holds for the registry holds for it (the
	// token realm's exception), though its host has a breaker of its own.
	Equivalent bool
	Settings   Settings
}

// Result is the client's answer plus what the request's log line needs.
type Result struct {
	Resp     *http.Response
	Kind     answer.Result
	ServedBy string // breaker key of the upstream that served, "" if none
	// Attempts lists, in order, each upstream the loop asked or skipped;
	// for a request that joined another's decision, that decision's
	// attempts (shared: read only).
	Attempts Attempts
	// Coalesced marks a request that joined an identical request's
	// decision in flight instead of making its own.
	Coalesced bool
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
		hedgesSent: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nora_sidecar_hedges_sent_total",
			Help: "GET and HEAD requests also sent to a candidate because the addressed host had not answered within its hedge wait, by addressed breaker key.",
		}, []string{"registry"}),
		hedgesWon: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nora_sidecar_hedges_won_total",
			Help: "Hedges whose candidate served the client, by addressed breaker key.",
		}, []string{"registry"}),
		hedgesOverBudget: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "nora_sidecar_hedges_over_budget_total",
			Help: "Hedges not sent because the host's hedging budget was spent, by addressed breaker key.",
		}, []string{"registry"}),
	}
	for _, m := range []prometheus.Collector{c.fallbacks, c.staleServed, c.hedgesSent, c.hedgesWon, c.hedgesOverBudget} {
		if err := o.Registerer.Register(m); err != nil {
			return nil, fmt.Errorf("register fallback metrics: %w", err)
		}
	}
	var err error
	if c.staleRuns, err = newStaleWatch(o.Registerer); err != nil {
		return nil, err
	}
	if o.Coalesce != nil {
		co := *o.Coalesce
		co.Registerer, co.Logger, co.Now = o.Registerer, o.Logger, o.Now
		if c.joins, err = coalesce.New[Result](co); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Forget drops every series and count the chain keeps by breaker key for
// keys that left the breaker set (a learned host forgotten, an upstream
// removed by a reload), so the scrape does not grow with every host ever
// seen.
func (c *Chain) Forget(keys ...string) {
	for _, k := range keys {
		for _, v := range []*prometheus.CounterVec{c.staleServed, c.hedgesSent, c.hedgesWon, c.hedgesOverBudget} {
			v.DeleteLabelValues(k)
		}
		c.fallbacks.DeletePartialMatch(prometheus.Labels{"from": k})
		c.fallbacks.DeletePartialMatch(prometheus.Labels{"to": k})
		c.staleRuns.forget(k)
		c.hedges.keys.Delete(k)
	}
}

// Serve decides r, together with the identical GETs in flight when it may
// share their decision (coalesce.go), else alone.
func (c *Chain) Serve(r Request) Result {
	if r.HostKey == "" {
		r.HostKey = r.Addressed.Key
	}
	fm := c.o.Formats.Of(r.Addressed.Format)
	var sk knownStaleKey
	if c.joins != nil && coalesce.Eligible(r.Client) {
		if res, refused := c.refuseAlone(r, fm, &sk); refused {
			return res
		}
	}
	key, sk, ok := c.joinKey(r, fm, sk)
	if ok {
		return c.serveJoined(r, fm, sk, key)
	}
	return c.decide(r, fm, sk)
}

// decide is the one loop over the addressed upstream and then its
// candidates, then a stale copy, then the terminal answer. Each pass asks
// one upstream, after two checks (may the loop go on, is the upstream
// admitted); a pass that produces the client's answer ends the loop. The
// addressed upstream's pass may also send a hedge to the next admitted
// candidate while it waits (hedge.go); the loop then goes on after the
// candidates that hedge considered. sk is the request's stale key when it
// is already known.
func (c *Chain) decide(r Request, fm format.Format, sk knownStaleKey) Result {
	s := &search{c: c, r: r, fm: fm, sk: sk, attempts: make(Attempts, 0, 1+len(r.Candidates))}
	for i := 0; i <= len(r.Candidates); i = s.after(i) {
		u := s.upstream(i)
		if i > 0 && !s.mayGoOn() {
			break
		}
		ticket, admitted := s.admit(i, u)
		if !admitted {
			if i == 0 && !fm.Substitutable(r.Client) {
				return s.result(s.unavailable(), answer.Synthesized503, "")
			}
			continue
		}
		if res, done := s.ask(i, u, ticket); done {
			return res
		}
	}
	return s.exhausted()
}

// after is the index of the upstream the loop asks after the i-th: the
// next, or the first a hedge's admission did not consider already.
func (s *search) after(i int) int { return max(i+1, s.next) }
