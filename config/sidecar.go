package config

import (
	"strings"
	"time"
)

// fieldKind is how a [sidecar] value is written.
type fieldKind int

const (
	kString   fieldKind = iota
	kDuration           // Go duration string, > 0
	kSize               // bytes: integer or "64MiB"
	kBool
	kInt   // >= 1
	kCount // >= 0
	kList  // TOML list of strings; env comma-separated
)

// sidecarField binds one [sidecar] key to its place in Sidecar.
type sidecarField struct {
	key  string
	kind fieldKind
	ptr  any // *string, *time.Duration, *int64, *bool, *int or *[]string
}

func sidecarFields(s *Sidecar) []sidecarField {
	return []sidecarField{
		{"listen", kString, &s.Listen},
		{"admin_listen", kString, &s.AdminListen},
		{"ca_cert", kString, &s.CACert},
		{"ca_key", kString, &s.CAKey},
		{"upstream_ca", kString, &s.UpstreamCA},
		{"stale_dir", kString, &s.StaleDir},
		{"stale_max_bytes", kSize, &s.StaleMaxBytes},
		{"stale_max_object_bytes", kSize, &s.StaleMaxObjectBytes},
		{"stale_authenticated", kString, &s.StaleAuthenticated},
		{"dial_timeout", kDuration, &s.DialTimeout},
		{"tls_handshake_timeout", kDuration, &s.TLSHandshakeTimeout},
		{"idle_timeout", kDuration, &s.IdleTimeout},
		{"deny_unlisted", kBool, &s.DenyUnlisted},
		{"allow_hosts", kList, &s.AllowHosts},
		{"log_level", kString, &s.LogLevel},
		{"log_format", kString, &s.LogFormat},
		{"log_refusals", kString, &s.LogRefusals},
		{"admin_token", kString, &s.AdminToken},
		{"max_connections", kInt, &s.MaxConnections},
		{"procs", kCount, &s.Procs},
		{"throttle_default", kDuration, &s.ThrottleDefault},
		{"credential_headers", kList, &s.CredentialHeaders},
		{"max_upstream_conns_per_host", kInt, &s.MaxUpstreamConnsPerHost},
		{"shared_state", kString, &s.SharedState},
		{"shared_state_prefix", kString, &s.SharedStatePrefix},
		{"shared_state_password", kString, &s.SharedStatePassword},
		{"parent_proxy", kString, &s.ParentProxy},
		{"parent_proxy_password", kString, &s.ParentProxyPassword},
		{"parent_no_proxy", kList, &s.ParentNoProxy},
	}
}

// SidecarKeys lists every key of the [sidecar] table, tables included.
func SidecarKeys() []string {
	var s Sidecar
	keys := []string{"aliases", "equivalents", "resolve", "retry_after_max", "parents"}
	for _, f := range sidecarFields(&s) {
		keys = append(keys, f.key)
	}
	return keys
}

func defaultSidecar() Sidecar {
	return Sidecar{
		Listen:                  "127.0.0.1:3128",
		AdminListen:             "127.0.0.1:9128",
		StaleMaxBytes:           1 << 30,
		StaleMaxObjectBytes:     64 << 20,
		StaleAuthenticated:      "isolate",
		DialTimeout:             5 * time.Second,
		TLSHandshakeTimeout:     10 * time.Second,
		IdleTimeout:             120 * time.Second,
		Aliases:                 map[string][]string{},
		Equivalents:             map[string][]string{},
		Resolve:                 map[string]string{},
		RetryAfterMax:           defaultRetryAfterMax(),
		Parents:                 map[string]string{},
		LogLevel:                "info",
		LogFormat:               "json",
		LogRefusals:             "summary",
		MaxConnections:          4096,
		MaxUpstreamConnsPerHost: 256,
		ThrottleDefault:         60 * time.Second,
		CredentialHeaders:       defaultCredentialHeaders(),
		SharedStatePrefix:       "nora-breaker",
	}
}

// sidecarReader reads [sidecar] and NORA_SIDECAR_*, remembering where each
// value came from so validation can point at it.
type sidecarReader struct {
	t    tbl
	e    env
	from map[string]origin // field key → where its value was set
}

// readSidecar returns the merged [sidecar] table: defaults, then file, env
// and flags. Unknown keys are an error here (unlike NORA's tables): a typo
// such as deny_unlistd must not silently leave the proxy open.
func readSidecar(root tbl, e env, flags Flags) (Sidecar, map[string]origin) {
	s := defaultSidecar()
	r := sidecarReader{t: root.table("sidecar"), e: e, from: map[string]origin{}}
	fields := sidecarFields(&s)
	known := map[string]bool{"aliases": true, "equivalents": true, "resolve": true, "retry_after_max": true, "parents": true}
	for _, f := range fields {
		known[f.key] = true
		r.fromFile(f)
		r.fromEnv(f)
	}
	for _, k := range r.t.keys() {
		if !known[k] {
			r.t.errorf(r.t.keyPath(k), "unknown key in [sidecar]%s", unknownKeyHint(k, SidecarKeys()))
		}
	}
	r.hostLists("aliases", s.Aliases)
	r.hostLists("equivalents", s.Equivalents)
	r.resolve(s.Resolve)
	r.durations("retry_after_max", s.RetryAfterMax)
	r.parents(s.Parents)
	if flags.Listen != "" {
		s.Listen = flags.Listen
		r.from["listen"] = origin{source: "flag", key: "--listen", value: flags.Listen}
	}
	if flags.AdminListen != "" {
		s.AdminListen = flags.AdminListen
		r.from["admin_listen"] = origin{source: "flag", key: "--admin-listen", value: flags.AdminListen}
	}
	return s, r.from
}

func envName(key string) string { return "NORA_SIDECAR_" + strings.ToUpper(key) }

// defaultRetryAfterMax is the longest Retry-After each format's clients are
// told by default, chosen from what the clients were measured to do with
// the proxy's 503 and 429 (README, "What each client does"): pip, yarn 4
// and cargo sleep Retry-After, each several times over, so a long one only
// makes a dead registry take minutes to fail, and 1 s gets them to an
// answer soonest (pypi, npm, cargo, and the formats not measured); skopeo,
// podman and CRI-O sleep it on a 429 four times per URL, which 5 s keeps
// under a minute (docker); no client of maven, go or deb reads it, so the
// true wait stays (0: no limit).
func defaultRetryAfterMax() map[string]time.Duration {
	m := map[string]time.Duration{"docker": 5 * time.Second}
	for _, f := range formatSpecs() {
		switch f.name {
		case "docker":
		case "maven", "go", "deb":
			m[f.name] = 0
		default:
			m[f.name] = time.Second
		}
	}
	return m
}
