// Package proxy decides every request clients send through goproxy: under
// one configuration snapshot it runs the checks every request passes,
// classifies it, passes unclassified hosts through or hands classified
// requests to package fallback, and writes each request's one log line.
package proxy

import (
	"context"
	"fmt"
	"log"
	"maps"
	"net"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/admin"
	"github.com/nora-breaker/nora-breaker/attempt"
	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/certs"
	"github.com/nora-breaker/nora-breaker/clientconn"
	"github.com/nora-breaker/nora-breaker/coalesce"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/destination"
	"github.com/nora-breaker/nora-breaker/fallback"
	"github.com/nora-breaker/nora-breaker/relay"
	"github.com/nora-breaker/nora-breaker/route"
	"github.com/nora-breaker/nora-breaker/sharedstate"
	"github.com/nora-breaker/nora-breaker/stale"
	"github.com/nora-breaker/nora-breaker/throttle"
	"github.com/nora-breaker/nora-breaker/tunnel"
)

// Deps are the process-wide things a Proxy is built with.
type Deps struct {
	Registry *prometheus.Registry
	Logger   zerolog.Logger
	Now      func() time.Time
	// Rand is the breakers' jitter source (breakerstate.Options.Rand); nil
	// gives each key its own generator. Tests pin it.
	Rand    func() float64
	Version string
	// ShutdownGrace is how long Serve drains after its context ends before
	// it closes what is left (0: 25 s).
	ShutdownGrace time.Duration
}

// Proxy is a running nora-breaker: goproxy plus everything it consults.
type Proxy struct {
	deps  Deps
	log   zerolog.Logger
	now   func() time.Time
	state atomic.Pointer[snapshot]
	// fixed holds the settings copied once at start; a reload that changes
	// them reports them as needing a restart (reload.go lists them).
	fixed    fixedSettings
	gp       *goproxy.ProxyHttpServer
	breakers *breakerstate.Set
	// throttles holds the hosts that answered 429, for the loop and /breakers.
	throttles *throttle.Table
	// own names the proxy's bound listeners (set by Serve), which no
	// request may be forwarded to.
	own atomic.Pointer[destination.Own]
	// learned holds the hosts learned from upstreams' redirects; keysMu
	// serialises giving the breaker set its keys (reloads, new hosts), and
	// a reload stores its snapshot under it (syncBreakers).
	learned *route.Learned
	keysMu  sync.Mutex
	// learnedKeys are the breaker keys syncLearned gave the learned hosts
	// (guarded by keysMu).
	learnedKeys map[string]bool
	chain       *fallback.Chain
	sender      *attempt.Sender
	stale       *stale.Cache
	// interceptor serves intercepted CONNECTs; nil without a CA.
	interceptor *tunnel.Interceptor
	metrics     *metrics
	shared      *sharedstate.Client // nil unless shared_state is set
	// bufs recycles the buffers response bodies are copied through.
	bufs     *relay.Buffers
	started  time.Time
	shutting atomic.Bool
	// history keeps the last breaker transitions for the admin listener.
	history *admin.History
	admin   *admin.Server
	// goneLog rate-limits the log lines of requests whose client went away,
	// acceptLog those of failed accepts on the proxy port.
	goneLog, acceptLog *lineLimiter
	// refusals summarise the log lines of refusals per key.
	refusals *refusalLimiters
	// drainers are the client connections that left net/http (tunnels,
	// intercepted connections, protocol switches), drained at shutdown.
	drainers clientconn.Drainers
	// answered is what the request hook hands back to goproxy once the
	// answer has been written: an empty answer, which goproxy's writing
	// (made a no-op by PlainWriter.Finish) leaves alone. goproxy only reads
	// it, so one value serves every request.
	answered *http.Response
	// testHook, when set, is called at the top of serve; tests use it to
	// inject a panic. Always nil in production.
	testHook atomic.Pointer[func(*http.Request)]
}

// fixedSettings are the [sidecar] settings that belong to things built once
// at start: the client-facing servers' idle timeout and the proxy
// listener's connection limit. They are copied in New, so a reload before
// Serve cannot change them either. atStart is the whole [sidecar] table as
// New was given it: what a reload's restart-only settings are compared with,
// since those stay as they were at start whatever reloads came between.
type fixedSettings struct {
	idleTimeout    time.Duration
	maxConnections int
	atStart        config.Sidecar
}

// New builds a Proxy from a validated configuration.
func New(cfg *config.Config, deps Deps) (*Proxy, error) {
	if deps.Now == nil {
		deps.Now = time.Now
	}
	p := &Proxy{deps: deps, log: deps.Logger, now: deps.Now, started: deps.Now(), bufs: relay.NewBuffers(),
		history: &admin.History{}, answered: &http.Response{StatusCode: http.StatusOK, Header: http.Header{}, Body: http.NoBody},
		fixed: fixedSettings{idleTimeout: cfg.Sidecar.IdleTimeout, maxConnections: cfg.Sidecar.MaxConnections,
			atStart: cfg.Sidecar},
		learned: route.NewLearned(deps.Now),
		goneLog: newLineLimiter(deps.Now, time.Second, goneLogBurst), acceptLog: newLineLimiter(deps.Now, time.Second, acceptLogBurst),
		refusals: newRefusalLimiters(deps.Now)}
	var err error
	if p.metrics, err = newMetrics(deps.Registry); err != nil {
		return nil, err
	}
	// The breakers come first: the snapshot's transport reports to the
	// parent proxies' breakers.
	if p.breakers, err = breakerstate.New(breakerstate.Options{
		Enabled: cfg.CircuitBreaker.Enabled, Keys: keySettings(cfg), Now: deps.Now, Rand: deps.Rand,
		Registerer: deps.Registry, OnTransition: p.logTransition,
	}); err != nil {
		return nil, fmt.Errorf("breakers: %w", err)
	}
	snap, err := p.buildSnapshot(cfg, nil)
	if err != nil {
		return nil, err
	}
	p.state.Store(snap)
	p.logParents(cfg)
	if err := p.buildFallback(cfg); err != nil {
		return nil, err
	}
	if err := p.buildCA(cfg); err != nil {
		return nil, err
	}
	p.buildGoproxy()
	p.buildAdmin()
	if err := p.startShared(cfg, snap); err != nil {
		return nil, err
	}
	return p, nil
}

// keySettings resolves the settings of every breaker key, in config
// order: each upstream's key (override key → format → global), then a key
// per alias host of it (host key → upstream key → format → global); then
// one per parent proxy (its key → "parent" → global).
func keySettings(cfg *config.Config) []breakerstate.KeySettings {
	var out []breakerstate.KeySettings
	for _, b := range cfg.HostBreakers() {
		out = append(out, keySetting(b.Key, b.Upstream.Format, b.BreakerSettings))
	}
	for _, pp := range cfg.Parents() {
		out = append(out, keySetting(pp.Key(), config.ParentFormat, cfg.ParentThresholds(pp)))
	}
	return out
}

// keySetting is one key's settings as the breaker set takes them.
func keySetting(key, format string, bs config.BreakerSettings) breakerstate.KeySettings {
	return breakerstate.KeySettings{Key: key, Format: format,
		FailureThreshold: bs.FailureThreshold, ResetTimeout: bs.ResetTimeout,
		ResetTimeoutMax: bs.ResetTimeoutMax, Jitter: bs.Jitter,
		ThresholdSource: bs.FailureThresholdFrom, ResetTimeoutSource: bs.ResetTimeoutFrom}
}

// keyNames lists the keys of keys, in order.
func keyNames(keys []breakerstate.KeySettings) []string {
	names := make([]string, len(keys))
	for i, k := range keys {
		names[i] = k.Key
	}
	return names
}

func (p *Proxy) buildFallback(cfg *config.Config) error {
	sender, err := attempt.NewSender(p.now, p.deps.Registry)
	p.sender = sender
	if err != nil {
		return err
	}
	if cfg.Sidecar.StaleDir != "" {
		p.stale, err = stale.Open(stale.Options{Dir: cfg.Sidecar.StaleDir, MaxBytes: cfg.Sidecar.StaleMaxBytes,
			MaxObjectBytes: cfg.Sidecar.StaleMaxObjectBytes, Now: p.now, Registerer: p.deps.Registry,
			Logger: p.log.With().Str("component", "stale").Logger()})
		if err != nil {
			return fmt.Errorf("stale cache: %w", err)
		}
	}
	if p.throttles, err = throttle.New(p.now, keyNames(keySettings(cfg)), p.deps.Registry); err != nil {
		return err
	}
	// Identical GETs share one decision (docs/behaviour.md §5.9), their
	// bodies spooled in the temp directory under the stale cache's bounds.
	co := &coalesce.Options{MaxBytes: cfg.Sidecar.StaleMaxObjectBytes, TotalBytes: cfg.Sidecar.StaleMaxBytes}
	p.chain, err = fallback.New(fallback.Options{Breakers: p.breakers, Sender: sender,
		Formats: formats(p.now, p.breakers), Stale: p.stale, Throttles: p.throttles, OnRedirect: p.onRedirect,
		Coalesce: co, Now: p.now, Registerer: p.deps.Registry, Logger: p.log})
	return err
}

func (p *Proxy) buildCA(cfg *config.Config) error {
	if cfg.Sidecar.CACert == "" {
		return nil
	}
	ca, err := certs.Load(cfg.Sidecar.CACert, cfg.Sidecar.CAKey, p.now)
	if err != nil {
		return err
	}
	p.interceptor = &tunnel.Interceptor{CA: ca,
		Leaves: certs.NewStore(certs.StoreOptions{Now: p.now, OnGenerate: p.metrics.leaves.Inc}),
		Idle:   p.fixed.idleTimeout, Handle: p.handleInner, Bufs: p.bufs, Logger: p.log, ErrorLog: p.errorLog(),
		Drainers: &p.drainers, OnHandshake: p.countHandshake}
	p.warmLeaves(cfg)
	return nil
}

// countHandshake counts one intercepted TLS handshake.
func (p *Proxy) countHandshake(resumed bool) {
	p.metrics.handshakes.WithLabelValues(strconv.FormatBool(resumed)).Inc()
}

// warmLeaves has the interception CA sign, in the background, the leaves of
// every host of cfg's upstreams (URL hosts, aliases, equivalents), which
// are intercepted whenever a client comes: their first client then pays no
// signature (docs/behaviour.md §5.2).
func (p *Proxy) warmLeaves(cfg *config.Config) {
	if p.interceptor == nil {
		return
	}
	var hosts []string
	for _, u := range cfg.Upstreams {
		for _, h := range u.Hosts {
			hosts = append(hosts, route.HostPortOf(u, h))
		}
	}
	certs.Warm(p.interceptor.CA, p.interceptor.Leaves, hosts)
}

// buildGoproxy sets up goproxy for the two things it does here: parsing
// proxy requests (absolute-form and CONNECT) and handing each to our hooks.
// Our hooks answer every request and hijack every accepted CONNECT, so
// goproxy never makes a round trip, dials or intercepts TLS itself; its
// transport, dialers, certificate store and header options are unused.
func (p *Proxy) buildGoproxy() {
	gp := goproxy.NewProxyHttpServer()
	// goproxy's own chatter (client resets and the like) goes to debug.
	gp.Logger = goproxyLogger{p.log}
	// Origin-form requests reach the proxy port only by mistake.
	gp.NonproxyHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nora-breaker is a forward proxy: send absolute-form requests or CONNECT", http.StatusBadRequest)
	})
	gp.OnRequest().HandleConnectFunc(p.onConnect)
	gp.OnRequest().DoFunc(p.onRequest)
	p.gp = gp
}

// handleInner answers a request from inside an intercepted tunnel.
func (p *Proxy) handleInner(req *http.Request, target tunnel.Target) *http.Response {
	return p.handle(req, &target)
}

// errorLog sends net/http's own error log (TLS handshake noise, bad
// requests) to the structured log at debug level.
func (p *Proxy) errorLog() *log.Logger { return log.New(zerologWriter{p.log}, "", 0) }

// Handler is the proxy listener's handler.
func (p *Proxy) Handler() http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodConnect || r.Header["Upgrade"] != nil {
			// It may yet hand its connection over (docs/behaviour.md §8).
			defer p.drainers.Hold()()
		}
		pw := relay.NewPlainWriter(w, p.fixed.idleTimeout)
		if r.Method != http.MethodConnect {
			ex := &exchange{w: pw, body: relay.WatchClientBody(pw, r, p.fixed.idleTimeout)}
			defer ex.body.Finish()
			r = r.WithContext(context.WithValue(r.Context(), exchangeKey{}, ex))
		}
		p.gp.ServeHTTP(pw, r)
	})
}

// buildAdmin makes the admin listener's server, reading the configuration
// in force (and the hosts learned since) on every admin request.
func (p *Proxy) buildAdmin() {
	p.admin = admin.New(admin.Options{Registry: p.deps.Registry, Breakers: p.breakers, Throttles: p.throttles,
		History: p.history, Hosts: p.keyHosts, Token: func() string { return p.state.Load().cfg.Sidecar.AdminToken },
		Shared: p.sharedStatus, ShuttingDown: p.shutting.Load, Now: p.now, Started: p.started,
		Version: p.deps.Version, Logger: p.log})
}

// keyHosts names what every breaker key stands for: the snapshot's
// configured keys and the learned hosts' keys.
func (p *Proxy) keyHosts() map[string]admin.KeyHost {
	hosts := p.state.Load().hostOfKey
	learned := p.learned.Current()
	if len(learned) == 0 {
		return hosts
	}
	hosts = maps.Clone(hosts)
	for _, h := range learned {
		if _, ok := hosts[h.Key()]; !ok {
			hosts[h.Key()] = admin.KeyHost{Host: h.Name, Upstream: h.Upstream}
		}
	}
	return hosts
}

// AdminHandler serves the admin listener (docs/behaviour.md §7) that bound
// addr: on a loopback address it refuses host names other than localhost
// (admin/browsers.go).
func (p *Proxy) AdminHandler(addr net.Addr) http.Handler {
	return p.admin.Handler(admin.OnLoopback(addr))
}

// Breakers exposes the breaker set (admin API, status).
func (p *Proxy) Breakers() *breakerstate.Set { return p.breakers }

// Config returns the configuration in force.
func (p *Proxy) Config() *config.Config { return p.state.Load().cfg }

// SetShuttingDown makes /ready answer 503.
func (p *Proxy) SetShuttingDown() { p.shutting.Store(true) }

// Close releases background resources (the stale cache).
func (p *Proxy) Close() error {
	p.state.Load().transport.Retire()
	_ = p.closeShared()
	if p.stale != nil {
		return p.stale.Close()
	}
	return nil
}

// goproxyLogger routes goproxy's own chatter (client resets and the like)
// to debug level, so it never floods an operator's logs.
type goproxyLogger struct{ log zerolog.Logger }

func (g goproxyLogger) Printf(format string, v ...any) {
	g.log.Debug().Str("component", "goproxy").Msgf(format, v...)
}
