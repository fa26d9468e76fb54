package config

import (
	"net/url"
	"time"
)

// formatOrder lists every format nora-breaker knows, in the order used for
// display and for "first upstream in config order" decisions across formats.
var formatOrder = [...]string{
	"docker", "maven", "npm", "pypi", "cargo", "go", "gems", "terraform",
	"ansible", "nuget", "pub", "conan", "rpm", "deb",
}

// perUpstreamKey reports whether a format keeps one breaker per upstream
// (docker, pypi, npm, maven) rather than one per format.
func perUpstreamKey(format string) bool {
	switch format {
	case "docker", "pypi", "npm", "maven":
		return true
	}
	return false
}

// Config is the fully resolved, validated configuration.
type Config struct {
	// Path is the config file that was read, or "" when only defaults and
	// environment were used.
	Path string

	CircuitBreaker CircuitBreaker
	// Upstreams holds every configured upstream of every enabled format, in
	// config order: formats in formatOrder, upstreams within a format in the
	// order the file (or env) lists them.
	Upstreams []*Upstream
	Sidecar   Sidecar
	// Parent is parent_proxy parsed, with parent_proxy_password applied:
	// what hosts no upstream owns (and upstreams with no entry of their
	// own in [sidecar.parents]) go through; nil = none.
	Parent *Parent
	// NoProxy is parent_no_proxy compiled: the hosts always dialled
	// directly.
	NoProxy NoProxy

	// Warnings are non-fatal findings (unknown override keys, an open relay,
	// a disabled breaker) to be logged once at start and shown by check-config.
	Warnings []string
}

// CircuitBreaker is NORA's [circuit_breaker] table.
type CircuitBreaker struct {
	Enabled          bool
	FailureThreshold int           // >= 1; default 5
	ResetTimeout     time.Duration // >= 0; default 30s
	// ResetTimeoutMax bounds the open time as failed probes double it
	// (docs/behaviour.md §4); 0 means unset: each key's reset_timeout, a
	// fixed open time as in NORA.
	ResetTimeoutMax time.Duration
	// Jitter is the share, in [0, 0.5], by which open periods and
	// Retry-After are moved at random; default 0.1.
	Jitter float64
	// SuspectAfter is how long a GET or HEAD waits for headers before it
	// counts as silent: failure_threshold silent requests with no answer
	// in between open the breaker early (docs/behaviour.md §4); default
	// 10 s, 0 turns early opening off.
	SuspectAfter time.Duration
	// Overrides maps a breaker key ("pypi:https://pypi.org/simple") or a
	// format name ("pypi") to per-field overrides.
	Overrides map[string]Override
}

// Override holds per-key or per-format values; nil means "not set here".
type Override struct {
	FailureThreshold *int
	ResetTimeout     *time.Duration
	ResetTimeoutMax  *time.Duration
	SuspectAfter     *time.Duration
	HedgeAfter       *time.Duration
}

// Upstream is one registry the proxy knows about.
type Upstream struct {
	Format string // "docker", "maven", "npm", "pypi", "cargo", "go", ...
	// Name is the repository name for rpm/deb ("[rpm.proxies] name = url"); "" otherwise.
	Name string
	// URL is the configured URL with credentials, query, fragment and
	// trailing slash removed; scheme and host lower-cased.
	URL *url.URL
	// Auth is "user:pass" from the auth/proxy_auth field (or from user:pass@
	// in the configured URL); sent as HTTP Basic. Never log it.
	Auth string
	// Prefix and Namespace are docker's; Prefix != "" makes the upstream Bound.
	Prefix, Namespace string
	// Key is the breaker key: "<format>:<URL>" for docker, pypi, npm, maven;
	// "<format>" otherwise.
	Key string
	// Hosts are the lower-cased hosts that belong to this upstream: the
	// URL's host name first (its port is the URL's), then its equivalent
	// hosts, then built-in and configured aliases, each "host" (on the URL
	// scheme's default port) or "host:port" when it names one. Each has its
	// own breaker (HostKey).
	Hosts []string
	// Equivalents are the hosts of Hosts that are the upstream's own
	// registry under another name, with the same paths
	// (registry.yarnpkg.com for registry.npmjs.org): a request to one is
	// classified as the upstream's, under its base path, and fails over
	// like a request to its URL host (docs/behaviour.md §3). The other
	// hosts after the first are aliases.
	Equivalents []string
	// Serves, for docker, names the registries the upstream answers for,
	// as a request names its registry (containerd's ?ns=, see
	// DockerRegistryName): its own first (docker.io for Docker Hub's
	// hosts, else its URL host), then those its `serves` lists. A request
	// that names a registry is only answered by a candidate that serves
	// it (docs/behaviour.md §5.4). Empty for other formats.
	Serves []string
	// Parent is the parent proxy the upstream's hosts (its URL host,
	// aliases, equivalents and learned hosts) are reached through: its
	// [sidecar.parents] entry by key, else by format, else parent_proxy;
	// nil = directly (docs/behaviour.md §5.8).
	Parent *Parent
	// Position is the 0-based index in its format's chain.
	Position int
	// Bound is true for a docker upstream with a prefix and for every rpm
	// and deb repository: it has no other upstream to ask and is never a
	// candidate for another (docs/behaviour.md §5.4).
	Bound bool
	// ProxyTimeout bounds the wait for response headers (format proxy_timeout).
	ProxyTimeout time.Duration
	// ReadTimeout bounds idle time while reading a response body (docker
	// read_timeout; other formats use their proxy_timeout).
	ReadTimeout time.Duration
	// HedgeAfter is the longest a GET or HEAD waits for this upstream's
	// headers before it is also sent to the next candidate (0: never;
	// docs/behaviour.md §5.10), and SuspectAfter how long before it counts
	// as silent (0: never); both as resolved for the upstream's key: its
	// override, the format's, then the format's hedge_after and the global
	// suspect_after. The hosts of its aliases and equivalents use them too.
	HedgeAfter, SuspectAfter time.Duration
	// formatHedgeAfter is the format's own hedge_after, what HedgeAfter
	// is resolved from.
	formatHedgeAfter time.Duration
	// Source says where the upstream came from: "file:<path>", "env:NORA_…" or "default".
	Source string
}

// HostKey is the breaker key of one of the upstream's hosts, as written in
// Hosts: the upstream's own key for its URL host, "<Key>@<host>" for an
// alias host (docs/behaviour.md §3.1).
func (u *Upstream) HostKey(host string) string {
	if len(u.Hosts) > 0 && host == u.Hosts[0] {
		return u.Key
	}
	return u.Key + "@" + host
}

// Sidecar is the proxy's own [sidecar] table (env NORA_SIDECAR_<KEY>).
type Sidecar struct {
	Listen      string // default 127.0.0.1:3128
	AdminListen string // default 127.0.0.1:9128

	CACert, CAKey string // PEM files; both empty = tunnel-only
	UpstreamCA    string // extra PEM roots for upstream TLS

	StaleDir            string // "" = stale cache off
	StaleMaxBytes       int64  // default 1 GiB
	StaleMaxObjectBytes int64  // default 64 MiB
	StaleAuthenticated  string // "off" | "isolate" (default) | "share"

	DialTimeout         time.Duration // default 5s
	TLSHandshakeTimeout time.Duration // default 10s
	IdleTimeout         time.Duration // default 120s

	DenyUnlisted bool
	AllowHosts   []string // host or host:port, lower-cased

	// Aliases maps a breaker key or format to extra hosts of its upstream(s);
	// merged into Upstream.Hosts.
	Aliases map[string][]string
	// Equivalents maps a breaker key or format to hosts that are its
	// upstream(s) under another name, with the same paths; merged into
	// Upstream.Equivalents (and Hosts) after the built-in ones.
	Equivalents map[string][]string
	// Resolve maps "host:port" to "ip:port" at dial time.
	Resolve map[string]string
	// LogRefusals is "summary" (default: the first refusal of a key in
	// full, then one line a second with the count left out) or "every".
	LogRefusals string
	// RetryAfterMax maps a format to the longest Retry-After the proxy's own
	// 503 and 429 tell its clients (0: no limit); a longer wait is sent as 1
	// s (docs/behaviour.md §5.7). Defaults per format (defaultRetryAfterMax)
	// are overridden by [sidecar.retry_after_max].
	RetryAfterMax map[string]time.Duration

	LogLevel  string // default "info"
	LogFormat string // "json" (default) | "console"

	AdminToken string // when set, every admin call but /metrics, /health, /ready needs Bearer auth

	MaxConnections int // default 4096
	// Procs is how many processors the Go scheduler runs on: 0 (default)
	// sizes it to the load (package procs: one while the proxy uses well
	// under a CPU, the runtime's default above); N fixes it at N.
	Procs int
	// MaxUpstreamConnsPerHost bounds the proxy's connections to one
	// upstream host (dialing, active and idle together), so clients that
	// start and abandon requests faster than upstreams answer cannot turn
	// into a connection storm. Default 256.
	MaxUpstreamConnsPerHost int

	// ThrottleDefault is how long a host that answered 429 without a
	// usable Retry-After is left alone; default 60s.
	ThrottleDefault time.Duration

	// CredentialHeaders are the request headers that carry a client's
	// credentials besides Authorization and Cookie, which always do: never
	// sent to another upstream, and what stale_authenticated keys copies
	// by. Canonical form.
	CredentialHeaders []string

	// SharedState is the Redis URL (redis://, rediss:// or unix://) through which a
	// fleet shares breaker state; "" = every process alone. It may carry a
	// password: never log it (SharedStateDisplay redacts it).
	SharedState string
	// SharedStatePrefix starts every Redis key and channel; default "nora-breaker".
	SharedStatePrefix string
	// SharedStatePassword replaces the URL's password when set (env
	// NORA_SIDECAR_SHARED_STATE_PASSWORD, typically from a secret). Never log it.
	SharedStatePassword string

	// ParentProxy is the proxy upstream traffic goes through
	// (http[s]://[user[:pass]@]host:port); "" = every upstream is dialled
	// directly. It may carry a password: never log it (ParentDisplay).
	ParentProxy string
	// ParentProxyPassword replaces the password of ParentProxy's user
	// (env NORA_SIDECAR_PARENT_PROXY_PASSWORD, typically from a secret).
	// Never log it.
	ParentProxyPassword string
	// ParentNoProxy lists the hosts, domains, addresses and CIDRs reached
	// directly whatever the parent (Config.NoProxy is its compiled form).
	ParentNoProxy []string
	// Parents maps an upstream key or format to the parent its traffic
	// goes through instead of ParentProxy: a proxy URL, or "direct".
	// Values may carry passwords: never log them.
	Parents map[string]string
}
