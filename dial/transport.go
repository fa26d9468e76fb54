package dial

import (
	"crypto/tls"
	"fmt"
	"maps"
	"net"
	"net/http"
	"sync/atomic"
	"time"

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
	named map[string]bool // hosts upstreams and resolve name (may reach loopback)
	// maxConnsPerHost bounds dialing, active and idle connections to one
	// host together. Just after a reload that changes it the old transport's
	// connections still count on their own, until they finish.
	maxConnsPerHost int
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
	return Settings{upstreamCA: sc.UpstreamCA, dialTimeout: sc.DialTimeout,
		tlsHandshakeTimeout: sc.TLSHandshakeTimeout, resolve: sc.Resolve, Allow: allow,
		maxConnsPerHost: sc.MaxUpstreamConnsPerHost, named: namedHosts(t, sc.Resolve)}
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
		maps.Equal(a.Allow, b.Allow) && a.maxConnsPerHost == b.maxConnsPerHost && maps.Equal(a.named, b.named)
}

// Policy is the destination policy the dialer applies: the allow and named
// hosts of s, the listeners of own, and denyUnlisted for targets.
func (s Settings) Policy(own *atomic.Pointer[destination.Own], denyUnlisted bool) destination.Policy {
	return destination.Policy{Allow: s.Allow, Named: s.named, DenyUnlisted: denyUnlisted, Own: own}
}

// NewTransport builds the transport every upstream attempt goes through
// (TLS verified against the system roots plus upstream_ca, never the
// environment's proxy) and the dialer it and every tunnel dial with.
func NewTransport(s Settings, own *atomic.Pointer[destination.Own]) (*http.Transport, *Dialer, error) {
	// Sessions are resumed: a new connection to an upstream already met
	// (another of its host names, one after an idle close) skips the full
	// handshake.
	tlsConf := &tls.Config{MinVersion: tls.VersionTLS12, ClientSessionCache: tls.NewLRUClientSessionCache(1024)}
	if s.upstreamCA != "" {
		pool, err := certs.Roots(s.upstreamCA)
		if err != nil {
			return nil, nil, fmt.Errorf("sidecar.upstream_ca: %w", err)
		}
		tlsConf.RootCAs = pool
	}
	d := &Dialer{timeout: s.dialTimeout, resolve: s.resolve, policy: s.Policy(own, false)}
	return &http.Transport{
		// Never the environment's proxy: in a pod HTTPS_PROXY points at us.
		Proxy:               nil,
		DialContext:         d.DialContext,
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
		ExpectContinueTimeout: time.Second,
		// Compression passes through untouched: the client's Accept-Encoding
		// goes upstream and the body comes back as the upstream sent it.
		DisableCompression: true,
		// An HTTP/2 connection outlives a timed-out request (only the stream
		// is cancelled), so a black-holed upstream would keep receiving new
		// requests and probes over one dead connection. Pings find it out.
		HTTP2:                  &http.HTTP2Config{SendPingTimeout: 10 * time.Second, PingTimeout: 5 * time.Second},
		MaxResponseHeaderBytes: 1 << 20,
	}, d, nil
}
