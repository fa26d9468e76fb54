package config

import (
	"strconv"
	"time"
)

// Default circuit-breaker values, the same as NORA's.
const (
	defaultFailureThreshold = 5
	defaultResetTimeout     = 30 * time.Second
)

// readCircuitBreaker reads [circuit_breaker] and NORA_CB_*; env beats file.
func readCircuitBreaker(root tbl, e env) CircuitBreaker {
	cb := CircuitBreaker{
		FailureThreshold: defaultFailureThreshold,
		ResetTimeout:     defaultResetTimeout,
		Overrides:        map[string]Override{},
	}
	t := root.table("circuit_breaker")
	if v, ok := t.boolean("enabled"); ok {
		cb.Enabled = v
	}
	if v, ok := t.integer("failure_threshold", 1); ok {
		cb.FailureThreshold = v
	}
	if v, ok := t.integer("reset_timeout", 0); ok {
		cb.ResetTimeout = time.Duration(v) * time.Second
	}
	overrides := t.table("overrides")
	for _, key := range overrides.keys() {
		o := overrides.table(key)
		if !o.present() {
			continue
		}
		var ov Override
		if v, ok := o.integer("failure_threshold", 1); ok {
			ov.FailureThreshold = &v
		}
		if v, ok := o.integer("reset_timeout", 0); ok {
			d := time.Duration(v) * time.Second
			ov.ResetTimeout = &d
		}
		cb.Overrides[key] = ov
	}
	if v, ok := e.boolean("NORA_CB_ENABLED"); ok {
		cb.Enabled = v
	}
	if v, ok := e.integer("NORA_CB_THRESHOLD", 1); ok {
		cb.FailureThreshold = v
	}
	if v, ok := e.integer("NORA_CB_RESET_TIMEOUT", 0); ok {
		cb.ResetTimeout = time.Duration(v) * time.Second
	}
	return cb
}

// Chain returns the format's upstreams in config order: the order in which
// a failing upstream's siblings are asked.
func (c *Config) Chain(format string) []*Upstream {
	var chain []*Upstream
	for _, u := range c.Upstreams {
		if u.Format == format {
			chain = append(chain, u)
		}
	}
	return chain
}

// Formats returns the enabled formats that have at least one upstream, in
// canonical order. Disabled formats never get upstreams, so the upstream
// table alone answers this.
func (c *Config) Formats() []string {
	has := map[string]bool{}
	for _, u := range c.Upstreams {
		has[u.Format] = true
	}
	var out []string
	for _, f := range formatOrder {
		if has[f] {
			out = append(out, f)
		}
	}
	return out
}

// BreakerSettings are one breaker key's threshold and reset timeout, each
// with where it came from: `override "<key>"`, `format "<fmt>"` or "global"
// (shown by check-config and the admin API).
type BreakerSettings struct {
	FailureThreshold     int
	FailureThresholdFrom string
	ResetTimeout         time.Duration
	ResetTimeoutFrom     string
}

// HostBreaker is one breaker key of the configuration: the host it admits,
// the upstream that host belongs to and the key's settings.
type HostBreaker struct {
	Key string
	// Host is the host as written in Upstream.Hosts ("host", or
	// "host:port" for an alias that names a port).
	Host     string
	Upstream *Upstream
	BreakerSettings
}

// HostBreakers lists every breaker key once, in config order: for each
// upstream its hosts in order, the URL host under the upstream's key and
// each alias under "<key>@<host>" (docs/behaviour.md §3.1). A key several
// upstreams share (a per-format key such as cargo's) is listed with the
// first of them.
func (c *Config) HostBreakers() []HostBreaker {
	seen := make(map[string]bool)
	var out []HostBreaker
	for _, u := range c.Upstreams {
		for _, h := range u.Hosts {
			key := u.HostKey(h)
			if seen[key] {
				continue
			}
			seen[key] = true
			out = append(out, HostBreaker{Key: key, Host: h, Upstream: u, BreakerSettings: c.HostThresholds(key, u)})
		}
	}
	return out
}

// HostThresholds returns the breaker settings of one of u's hosts by its
// key: that key's override, then the upstream key's, then the format's,
// then the global value, each field on its own.
func (c *Config) HostThresholds(hostKey string, u *Upstream) BreakerSettings {
	names := []string{hostKey, u.Key, u.Format}
	if hostKey == u.Key {
		names = names[1:]
	}
	if u.Key == u.Format {
		names = names[:len(names)-1]
	}
	return c.lookUp(names...)
}

// lookUp resolves each field from the first of names (most specific first)
// whose override sets it; a name equal to a format is shown as `format`.
func (c *Config) lookUp(names ...string) BreakerSettings {
	bs := BreakerSettings{FailureThreshold: c.CircuitBreaker.FailureThreshold, FailureThresholdFrom: "global",
		ResetTimeout: c.CircuitBreaker.ResetTimeout, ResetTimeoutFrom: "global"}
	// Walk from least to most specific so the most specific wins.
	for i := len(names) - 1; i >= 0; i-- {
		o, ok := c.CircuitBreaker.Overrides[names[i]]
		if !ok {
			continue
		}
		from := "override " + strconv.Quote(names[i])
		if i == len(names)-1 && isFormat(names[i]) {
			from = "format " + strconv.Quote(names[i])
		}
		if o.FailureThreshold != nil {
			bs.FailureThreshold, bs.FailureThresholdFrom = *o.FailureThreshold, from
		}
		if o.ResetTimeout != nil {
			bs.ResetTimeout, bs.ResetTimeoutFrom = *o.ResetTimeout, from
		}
	}
	return bs
}
