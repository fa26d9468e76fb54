// Package proxy is nora-breaker's forward proxy: it wires goproxy with safe
// defaults, classifies each request to an upstream, applies the circuit
// breaker on the transparent path, hands rejected or failed requests to the
// fallback chain, and serves the admin endpoints. goproxy types stay inside
// this package; the decisions live in plain functions and in the fallback and
// breakerstate packages.
package proxy

import (
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/elazarl/goproxy"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/certs"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/fallback"
	"github.com/nora-breaker/nora-breaker/sharedstate"
	"github.com/nora-breaker/nora-breaker/stale"
)

// Deps are the process-wide things a Proxy is built with.
type Deps struct {
	Registry *prometheus.Registry
	Logger   zerolog.Logger
	Now      func() time.Time
	Version  string
}

// Proxy is a running nora-breaker: goproxy plus everything it consults.
type Proxy struct {
	deps     Deps
	log      zerolog.Logger
	now      func() time.Time
	state    atomic.Pointer[runtimeState]
	gp       *goproxy.ProxyHttpServer
	tr       *http.Transport
	dial     *dialer
	breakers *breakerstate.Set
	sender   *fallback.Sender
	chain    *fallback.Chain
	stale    *stale.Cache
	ca       *tls.Certificate
	certs    *certs.Store
	metrics  *metrics
	shared   *sharedstate.Client // nil unless shared_state is set
	// bufs recycles the buffers response bodies are copied through.
	bufs *sync.Pool
	// preDialed holds tunnel connections dialed while deciding a CONNECT,
	// keyed by the CONNECT request, until goproxy asks for them.
	preDialed sync.Map
	started   time.Time
	shutting  atomic.Bool
	// testHook, when set, is called at the top of serve; tests use it to
	// inject a panic. Always nil in production.
	testHook atomic.Pointer[func(*http.Request)]
}

// New builds a Proxy from a validated configuration.
func New(cfg *config.Config, deps Deps) (*Proxy, error) {
	if deps.Now == nil {
		deps.Now = time.Now
	}
	p := &Proxy{deps: deps, log: deps.Logger, now: deps.Now, started: deps.Now(), bufs: newCopyBufs()}
	p.state.Store(newRuntimeState(cfg))
	var err error
	if p.metrics, err = newMetrics(deps.Registry); err != nil {
		return nil, err
	}
	if p.breakers, err = breakerstate.New(breakerstate.Options{
		Enabled: cfg.CircuitBreaker.Enabled, Keys: KeySettings(cfg), Now: deps.Now,
		Registerer: deps.Registry, OnTransition: p.logTransition,
	}); err != nil {
		return nil, fmt.Errorf("breakers: %w", err)
	}
	if err := p.buildTransport(cfg); err != nil {
		return nil, err
	}
	if err := p.buildFallback(cfg); err != nil {
		return nil, err
	}
	if err := p.buildCA(cfg); err != nil {
		return nil, err
	}
	p.buildGoproxy()
	if err := p.startShared(cfg); err != nil {
		return nil, err
	}
	return p, nil
}

// KeySettings resolves each configured breaker key's threshold and reset
// timeout (override key → format → global), in config order.
func KeySettings(cfg *config.Config) []breakerstate.KeySettings {
	seen := make(map[string]bool)
	var out []breakerstate.KeySettings
	for _, u := range cfg.Upstreams {
		if seen[u.Key] {
			continue // per-format keys are shared by several upstreams
		}
		seen[u.Key] = true
		th, thFrom, rt, rtFrom := cfg.Thresholds(u.Key, u.Format)
		out = append(out, breakerstate.KeySettings{Key: u.Key, Format: u.Format,
			FailureThreshold: th, ResetTimeout: rt, ThresholdSource: thFrom, ResetTimeoutSource: rtFrom})
	}
	return out
}

func (p *Proxy) buildTransport(cfg *config.Config) error {
	sc := cfg.Sidecar
	p.dial = &dialer{timeout: sc.DialTimeout, resolve: normaliseResolve(sc.Resolve), allowed: p.hostAllowed}
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12}
	if sc.UpstreamCA != "" {
		pem, err := os.ReadFile(sc.UpstreamCA)
		if err != nil {
			return fmt.Errorf("sidecar.upstream_ca: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil || pool == nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return fmt.Errorf("sidecar.upstream_ca %s: no PEM certificates found", sc.UpstreamCA)
		}
		tlsConf.RootCAs = pool
	}
	p.tr = &http.Transport{
		// Never the environment's proxy: in a pod HTTPS_PROXY points at us.
		Proxy:                 nil,
		DialContext:           p.dial.DialContext,
		TLSClientConfig:       tlsConf,
		TLSHandshakeTimeout:   sc.TLSHandshakeTimeout,
		ForceAttemptHTTP2:     true,
		MaxIdleConns:          1024,
		MaxIdleConnsPerHost:   256,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: time.Second,
		// Compression passes through untouched: the client's Accept-Encoding
		// goes upstream and the body comes back as the upstream sent it.
		DisableCompression: true,
		// An HTTP/2 connection outlives a timed-out request (only the stream
		// is cancelled), so a black-holed upstream would keep receiving new
		// requests and probes over one dead connection. Pings find it out.
		HTTP2:                  &http.HTTP2Config{SendPingTimeout: 10 * time.Second, PingTimeout: 5 * time.Second},
		MaxResponseHeaderBytes: 1 << 20,
	}
	return nil
}

func (p *Proxy) buildFallback(cfg *config.Config) error {
	var err error
	if p.sender, err = fallback.NewSender(p.tr, p.now, p.deps.Registry); err != nil {
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
	tokens := fallback.NewTokenSource(fallback.TokenOptions{Client: &http.Client{Transport: p.tr,
		Timeout: 30 * time.Second}, Now: p.now})
	p.chain, err = fallback.New(fallback.Options{Breakers: p.breakers, Sender: p.sender, Tokens: tokens,
		Stale: p.stale, StaleMode: cfg.Sidecar.StaleAuthenticated, Now: p.now,
		Registerer: p.deps.Registry, Logger: p.log})
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
	p.ca = ca
	p.certs = certs.NewStore(certs.StoreOptions{Now: p.now, OnGenerate: p.metrics.leaves.Inc})
	return nil
}

func (p *Proxy) buildGoproxy() {
	gp := goproxy.NewProxyHttpServer()
	gp.Logger = goproxyLogger{p.log}
	gp.Tr = p.tr
	// goproxy reads HTTPS_PROXY into ConnectDial; in a pod that is us.
	gp.ConnectDial = nil
	gp.ConnectDialWithReq = p.connectDial
	gp.KeepAcceptEncoding = true
	gp.AllowHTTP2 = true
	gp.CertStore = p.certs
	gp.NonproxyHandler = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, "nora-breaker is a forward proxy: send absolute-form requests or CONNECT", http.StatusBadRequest)
	})
	gp.OnRequest().HandleConnectFunc(p.onConnect)
	gp.OnRequest().DoFunc(p.onRequest)
	p.gp = gp
}

// Handler is the proxy listener's handler.
func (p *Proxy) Handler() http.Handler {
	idle := p.state.Load().cfg.Sidecar.IdleTimeout
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		p.gp.ServeHTTP(&clientWriter{ResponseWriter: w, idle: idle, bufs: p.bufs}, r)
	})
}

// Breakers exposes the breaker set (admin API, status).
func (p *Proxy) Breakers() *breakerstate.Set { return p.breakers }

// Config returns the configuration in force.
func (p *Proxy) Config() *config.Config { return p.state.Load().cfg }

// SetShuttingDown makes /ready answer 503.
func (p *Proxy) SetShuttingDown() { p.shutting.Store(true) }

// Close releases background resources (the stale cache).
func (p *Proxy) Close() error {
	p.tr.CloseIdleConnections()
	_ = p.closeShared()
	if p.stale != nil {
		return p.stale.Close()
	}
	return nil
}

// hostAllowed reports whether host (and port) is listed in allow_hosts of
// the configuration in force.
func (p *Proxy) hostAllowed(host, port string) bool {
	return p.state.Load().hostAllowed(host, port)
}

func normaliseResolve(m map[string]string) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[strings.ToLower(k)] = v
	}
	return out
}

// goproxyLogger routes goproxy's own chatter (client resets and the like)
// to debug level, so it never floods an operator's logs.
type goproxyLogger struct{ log zerolog.Logger }

func (g goproxyLogger) Printf(format string, v ...any) {
	g.log.Debug().Str("component", "goproxy").Msgf(format, v...)
}
