package dial

import (
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/url"
	"slices"
	"sync/atomic"
	"time"

	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/certs"
	"github.com/nora-breaker/nora-breaker/config"
	"github.com/nora-breaker/nora-breaker/destination"
	"github.com/nora-breaker/nora-breaker/route"
)

// Settings are the settings the upstream transport and its dialer are
// built from. A reload that changes any of them builds a new transport
// for the requests that arrive after it; requests in flight finish on the
// old one, whose idle connections are then closed. They are plain data, so
// a later snapshot that reuses the transport shares nothing else with the
// snapshot that built it.
type Settings struct {
	upstreamCA          string
	dialTimeout         time.Duration
	tlsHandshakeTimeout time.Duration
	resolve             map[string]string // "host:port" (lower-case host) → "ip:port"
	// Allow holds the allow_hosts entries ("host": any port, or
	// "host:port"; lower-case), exempt from the metadata-address refusal.
	Allow map[string]bool
	named map[string]bool // hosts upstreams, resolve and parents name (may reach loopback)
	// maxConnsPerHost bounds dialing, active and idle connections to one
	// host together. Just after a reload that changes it the old transport's
	// connections still count on their own, until they finish.
	maxConnsPerHost int
	// parents are the parent proxies traffic is routed through, each
	// once, with the credentials sent to it.
	parents []parentSettings
}

// parentSettings is one parent proxy as a transport is built for it.
type parentSettings struct {
	key, scheme, hostPort, user, password string
}

// SettingsOf takes the transport's settings from cfg, whose host names
// config has already lower-cased (allow_hosts, resolve keys, upstream
// hosts), and t, the table built from it.
func SettingsOf(cfg *config.Config, t *route.Table) Settings {
	sc := cfg.Sidecar
	allow := make(map[string]bool, len(sc.AllowHosts))
	for _, a := range sc.AllowHosts {
		allow[a] = true
	}
	var parents []parentSettings
	for _, p := range cfg.Parents() {
		parents = append(parents, parentSettings{key: p.Key(), scheme: p.URL.Scheme, hostPort: p.URL.Host,
			user: p.User, password: p.Password})
	}
	named := namedHosts(t, sc.Resolve)
	for _, p := range parents {
		// The configuration names the parent: it may be on loopback (a
		// proxy in the same pod) like any host an upstream names.
		named[p.hostPort] = true
	}
	return Settings{upstreamCA: sc.UpstreamCA, dialTimeout: sc.DialTimeout,
		tlsHandshakeTimeout: sc.TLSHandshakeTimeout, resolve: sc.Resolve, Allow: allow,
		maxConnsPerHost: sc.MaxUpstreamConnsPerHost, named: named, parents: parents}
}

// namedHosts are the "host:port" the configuration names: every host the
// table classifies (upstreams' URL hosts and alias hosts) and every
// [sidecar.resolve] key.
func namedHosts(t *route.Table, resolve map[string]string) map[string]bool {
	hps := t.HostPorts()
	named := make(map[string]bool, len(hps)+len(resolve))
	for _, hp := range hps {
		named[hp] = true
	}
	for k := range resolve {
		if host, port, err := net.SplitHostPort(k); err == nil {
			named[net.JoinHostPort(host, port)] = true
		}
	}
	return named
}

// Equal reports whether a transport built from a would be built from b too.
func (a Settings) Equal(b Settings) bool {
	return a.upstreamCA == b.upstreamCA && a.dialTimeout == b.dialTimeout &&
		a.tlsHandshakeTimeout == b.tlsHandshakeTimeout && maps.Equal(a.resolve, b.resolve) &&
		maps.Equal(a.Allow, b.Allow) && a.maxConnsPerHost == b.maxConnsPerHost && maps.Equal(a.named, b.named) &&
		slices.Equal(a.parents, b.parents)
}

// Policy is the destination policy the dialer applies: the allow and named
// hosts of s, the listeners of own, and denyUnlisted for targets.
func (s Settings) Policy(own *atomic.Pointer[destination.Own], denyUnlisted bool) destination.Policy {
	return destination.Policy{Allow: s.Allow, Named: s.named, DenyUnlisted: denyUnlisted, Own: own}
}

// Deps are the process-wide things a transport reports to: the breaker set
// the parents' breakers live in (nil: none, for a snapshot built alone in a
// test), and the log a parent's configuration errors are said in.
type Deps struct {
	Breakers *breakerstate.Set
	Logger   zerolog.Logger
	Now      func() time.Time
}

// Transport holds every way out to upstreams that one set of Settings
// builds: the direct transport, and for each parent proxy a transport that
// sends plain http requests to it in absolute form and one that reaches
// https upstreams through its CONNECT tunnels. It never uses the
// environment's proxy: in a pod HTTPS_PROXY points at the proxy itself.
type Transport struct {
	direct *http.Transport
	// shared carries the direct https requests over HTTP/2 connections
	// that host names of one server share (h2share.go); direct serves
	// the hosts whose servers speak HTTP/1.1 only, and websockets.
	shared *h2Share
	// plain carries the direct http:// requests without a body on the
	// caller's goroutine (h1.go); the rest go through direct.
	plain   *h1
	dialer  *Dialer
	parents map[string]*parentWay // by the parent's breaker key
	rootCAs *x509.CertPool
}

// parentWay is one parent's two transports and the hop both dial through.
type parentWay struct {
	hop *parentHop
	// forward sends http:// requests to the parent in absolute form, with
	// Proxy-Authorization; its connections go to the parent whatever the
	// request's host.
	forward *http.Transport
	// tunnel reaches https:// upstreams: each connection is a CONNECT
	// tunnel through the parent, in which the transport does the TLS
	// handshake with the upstream itself (HTTP/2 by ALPN as directly).
	tunnel *http.Transport
}

// NewTransport builds the transports every upstream attempt goes through
// (TLS verified against the system roots plus upstream_ca) and the dialer
// they and every tunnel dial with.
func NewTransport(s Settings, own *atomic.Pointer[destination.Own], deps Deps) (*Transport, error) {
	// Sessions are resumed: a new connection to a host already met (one
	// after an idle close) skips the full handshake. crypto/tls keys the
	// cache by server name, so another host name of the same server
	// shares that server's connection instead (h2share.go).
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12, ClientSessionCache: tls.NewLRUClientSessionCache(1024)}
	if s.upstreamCA != "" {
		pool, err := certs.Roots(s.upstreamCA)
		if err != nil {
			return nil, fmt.Errorf("sidecar.upstream_ca: %w", err)
		}
		tlsConf.RootCAs = pool
	}
	if deps.Now == nil {
		deps.Now = time.Now
	}
	d := &Dialer{timeout: s.dialTimeout, resolve: s.resolve, policy: s.Policy(own, false)}
	t := &Transport{dialer: d, rootCAs: tlsConf.RootCAs, parents: make(map[string]*parentWay, len(s.parents))}
	t.direct = newHTTPTransport(s, tlsConf)
	t.direct.DialContext = d.DialContext
	t.plain = newH1(d.DialContext, s.maxConnsPerHost)
	t.shared = newH2Share(s, tlsConf, d)
	// The pool's TLS dial, so a connection it dialled for a server that
	// chose HTTP/1.1 serves here rather than being dialled twice.
	t.direct.DialTLSContext = t.shared.dialTLS
	warn := newWarner(deps.Logger, deps.Now)
	for _, ps := range s.parents {
		t.parents[ps.key] = newParentWay(s, ps, tlsConf, d, deps, warn)
	}
	return t, nil
}

// newParentWay builds the transports of parent ps.
func newParentWay(s Settings, ps parentSettings, tlsConf *tls.Config, d *Dialer, deps Deps, warn *warner) *parentWay {
	host, _, _ := net.SplitHostPort(ps.hostPort)
	hop := &parentHop{key: ps.key, addr: ps.hostPort, https: ps.scheme == "https", dialer: d,
		tlsTimeout: s.tlsHandshakeTimeout, auth: basicAuth(ps.user, ps.password), breakers: deps.Breakers,
		warn: warn}
	if hop.https {
		// HTTP/1.1 with the parent itself: CONNECT and absolute-form
		// requests are HTTP/1 things, whatever the upstream speaks inside.
		hop.tlsConf = &tls.Config{MinVersion: tls.VersionTLS12, RootCAs: tlsConf.RootCAs, ServerName: host,
			NextProtos: []string{"http/1.1"}}
	}
	proxyURL := &url.URL{Scheme: ps.scheme, Host: ps.hostPort}
	if ps.user != "" || ps.password != "" {
		// net/http turns these into the Proxy-Authorization of every
		// absolute-form request, on the connection to the parent only.
		proxyURL.User = url.UserPassword(ps.user, ps.password)
	}
	forward := newHTTPTransport(s, tlsConf)
	forward.Proxy = http.ProxyURL(proxyURL)
	if hop.https {
		// Set, so net/http leaves the TLS with the parent to the hop
		// (which offers it HTTP/1.1 only and names its failures).
		forward.DialTLSContext = hop.dialForward
	} else {
		forward.DialContext = hop.dialForward
	}
	tunnel := newHTTPTransport(s, tlsConf)
	tunnel.DialContext = hop.dialTunnel
	return &parentWay{hop: hop, forward: forward, tunnel: tunnel}
}

// expectContinueTimeout is how long a request with Expect: 100-continue
// holds its body back for the upstream's 100 (or its final answer), on
// HTTP/1.1 and HTTP/2 alike.
const expectContinueTimeout = time.Second

// newHTTPTransport is an http.Transport with the settings every way out
// shares; its dial functions are the caller's to set.
func newHTTPTransport(s Settings, tlsConf *tls.Config) *http.Transport {
	return &http.Transport{
		// Never the environment's proxy: in a pod HTTPS_PROXY points at us.
		Proxy:               nil,
		TLSClientConfig:     tlsConf,
		TLSHandshakeTimeout: s.tlsHandshakeTimeout,
		ForceAttemptHTTP2:   true,
		MaxIdleConns:        1024,
		MaxIdleConnsPerHost: 256,
		// Go's transport goes on dialing after the request that asked for
		// a connection is cancelled (the connection is parked for later),
		// so clients that start and abandon requests faster than upstreams
		// answer would otherwise pile up connections without bound.
		MaxConnsPerHost:       s.maxConnsPerHost,
		IdleConnTimeout:       90 * time.Second,
		ExpectContinueTimeout: expectContinueTimeout,
		// Compression passes through untouched: the client's Accept-Encoding
		// goes upstream and the body comes back as the upstream sent it.
		DisableCompression: true,
		// An HTTP/2 connection outlives a timed-out request (only the stream
		// is cancelled), so a black-holed upstream would keep receiving new
		// requests and probes over one dead connection. Pings find it out.
		HTTP2:                  &http.HTTP2Config{SendPingTimeout: 10 * time.Second, PingTimeout: 5 * time.Second},
		MaxResponseHeaderBytes: 1 << 20,
	}
}

// CloseIdleConnections closes the idle connections of every way out.
func (t *Transport) CloseIdleConnections() {
	t.direct.CloseIdleConnections()
	t.shared.closeIdle(false)
	t.plain.CloseIdleConnections()
	for _, w := range t.parents {
		w.forward.CloseIdleConnections()
		w.tunnel.CloseIdleConnections()
	}
}

// Retire closes every idle connection and keeps none from now on, for a
// transport a reload replaced: the requests still using it finish on their
// connections, which then close.
func (t *Transport) Retire() {
	t.plain.retire()
	t.shared.closeIdle(true)
	t.CloseIdleConnections()
}

// MaxConnsPerHost is the bound on connections to one host that every
// transport of t applies.
func (t *Transport) MaxConnsPerHost() int { return t.direct.MaxConnsPerHost }

// RootCAs are the roots upstream TLS is verified against: nil for the
// system's alone, else the system's plus upstream_ca.
func (t *Transport) RootCAs() *x509.CertPool { return t.rootCAs }

// Dialer is the dialer every direct connection goes through.
func (t *Transport) Dialer() *Dialer { return t.dialer }

// roundTripDirect sends req straight to its upstream: over a shared
// HTTP/2 connection when the pool takes it, else through net/http's
// transport.
func (t *Transport) roundTripDirect(req *http.Request) (*http.Response, error) {
	var h *handOver
	if t.shared.takes(req) {
		resp, err := t.shared.RoundTrip(req)
		var hc *http1Chosen
		switch {
		case errors.As(err, &hc):
			h = hc.h
			defer h.drop()
		case !errors.Is(err, errRetired):
			return resp, err
		}
	}
	return t.direct.RoundTrip(viaHTTP1(req, h))
}
