package config

import (
	"strconv"
	"strings"
	"time"
)

// Default circuit-breaker values: NORA's threshold and reset timeout, and
// the jitter of open periods and Retry-After (ours).
const (
	defaultFailureThreshold = 5
	defaultResetTimeout     = 30 * time.Second
	defaultJitter           = 0.1
	// maxJitter keeps every open period at least half its open time.
	maxJitter = 0.5
	// defaultSuspectAfter is long enough that a registry that works, even
	// a slow one, answers something within it (a third of NORA's default
	// proxy_timeout): early opening is for hosts that answer nothing.
	defaultSuspectAfter = 10 * time.Second
	// maxWait bounds hedge_after and suspect_after, in seconds.
	maxWait = 3600
)

// readCircuitBreaker reads [circuit_breaker] and NORA_CB_*; env beats file.
// reset_timeout_max and jitter are ours (NORA has neither), and so are
// their variables NORA_CB_RESET_TIMEOUT_MAX and NORA_CB_JITTER.
func readCircuitBreaker(root tbl, e env) CircuitBreaker {
	cb := CircuitBreaker{
		FailureThreshold: defaultFailureThreshold,
		ResetTimeout:     defaultResetTimeout,
		Jitter:           defaultJitter,
		SuspectAfter:     defaultSuspectAfter,
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
	var maxAt *origin // where reset_timeout_max was set, for a later problem
	if v, ok := t.integer("reset_timeout_max", 0); ok {
		cb.ResetTimeoutMax = time.Duration(v) * time.Second
		at := t.at(t.keyPath("reset_timeout_max"))
		maxAt = &at
	}
	if v, ok := share(t, "jitter", maxJitter); ok {
		cb.Jitter = v
	}
	if v, ok := seconds(t, "suspect_after"); ok {
		cb.SuspectAfter = v
	}
	overrides := t.table("overrides")
	for _, key := range overrides.keys() {
		o := overrides.table(key)
		if !o.present() {
			continue
		}
		cb.Overrides[key] = readOverride(o)
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
	if v, ok := e.integer("NORA_CB_RESET_TIMEOUT_MAX", 0); ok {
		cb.ResetTimeoutMax = time.Duration(v) * time.Second
		raw, _ := e.get("NORA_CB_RESET_TIMEOUT_MAX")
		maxAt = &origin{source: "env", key: "NORA_CB_RESET_TIMEOUT_MAX", value: raw}
	}
	if v, ok := e.share("NORA_CB_JITTER", maxJitter); ok {
		cb.Jitter = v
	}
	if v, ok := e.seconds("NORA_CB_SUSPECT_AFTER"); ok {
		cb.SuspectAfter = v
	}
	if maxAt != nil && cb.ResetTimeoutMax < cb.ResetTimeout {
		e.probs.add(maxAt.errorf("must be >= reset_timeout (%d), the open time it lets grow from",
			int64(cb.ResetTimeout/time.Second)))
	}
	return cb
}

// readOverride reads one [circuit_breaker.overrides.<key>] table. A
// reset_timeout_max below the same table's reset_timeout is a problem; one
// below a reset_timeout set elsewhere keeps that key's open time fixed.
func readOverride(o tbl) Override {
	var ov Override
	if v, ok := o.integer("failure_threshold", 1); ok {
		ov.FailureThreshold = &v
	}
	if v, ok := o.integer("reset_timeout", 0); ok {
		d := time.Duration(v) * time.Second
		ov.ResetTimeout = &d
	}
	if v, ok := o.integer("reset_timeout_max", 0); ok {
		d := time.Duration(v) * time.Second
		ov.ResetTimeoutMax = &d
		if ov.ResetTimeout != nil && d < *ov.ResetTimeout {
			o.errorf(o.keyPath("reset_timeout_max"), "must be >= reset_timeout (%d) of the same table", int64(*ov.ResetTimeout/time.Second))
		}
	}
	if v, ok := seconds(o, "suspect_after"); ok {
		ov.SuspectAfter = &v
	}
	if v, ok := seconds(o, "hedge_after"); ok {
		ov.HedgeAfter = &v
	}
	return ov
}

// seconds reads key as a number of seconds (fractions allowed) in [0,
// maxWait].
func seconds(t tbl, key string) (time.Duration, bool) {
	f, ok := share(t, key, maxWait)
	return time.Duration(f * float64(time.Second)), ok
}

// seconds parses a number of seconds in [0, maxWait] from the environment.
func (e env) seconds(name string) (time.Duration, bool) {
	f, ok := e.share(name, maxWait)
	return time.Duration(f * float64(time.Second)), ok
}

// share reads key as a number (integer or float) in [0, hi].
func share(t tbl, key string, hi float64) (float64, bool) {
	v, ok := t.m[key]
	if !ok {
		return 0, false
	}
	var f float64
	switch n := v.(type) {
	case int64:
		f = float64(n)
	case float64:
		f = n
	default:
		t.errorf(t.keyPath(key), "must be a number, not %s", typeName(v))
		return 0, false
	}
	if !(f >= 0 && f <= hi) { // also refuses NaN
		t.errorf(t.keyPath(key), "must be between 0 and %v (got %v)", hi, f)
		return 0, false
	}
	return f, true
}

// share parses a number in [0, hi] from the environment.
func (e env) share(name string, hi float64) (float64, bool) {
	v, ok := e.get(name)
	if !ok {
		return 0, false
	}
	f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
	switch {
	case err != nil:
		e.probs.envf(name, v, "not a number")
	case !(f >= 0 && f <= hi):
		e.probs.envf(name, v, "must be between 0 and %v", hi)
	default:
		return f, true
	}
	return 0, false
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

// BreakerSettings are one breaker key's threshold, reset timeout and
// maximum open time, each with where it came from: `override "<key>"`,
// `format "<fmt>"` or "global" (shown by check-config and the admin API);
// an unset maximum comes from "reset_timeout" and equals it. Jitter is
// global.
type BreakerSettings struct {
	FailureThreshold     int
	FailureThresholdFrom string
	ResetTimeout         time.Duration
	ResetTimeoutFrom     string
	ResetTimeoutMax      time.Duration // >= ResetTimeout
	ResetTimeoutMaxFrom  string
	Jitter               float64
	// SuspectAfter and HedgeAfter are the waits of early opening and
	// hedging (0: off); an unset HedgeAfter comes from the format's table
	// ("format table").
	SuspectAfter     time.Duration
	SuspectAfterFrom string
	HedgeAfter       time.Duration
	HedgeAfterFrom   string
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
	return c.lookUp(u.formatHedgeAfter, names...)
}

// resolveWaits sets every upstream's HedgeAfter and SuspectAfter to those
// of its key.
func (c *Config) resolveWaits() {
	for _, u := range c.Upstreams {
		bs := c.HostThresholds(u.Key, u)
		u.HedgeAfter, u.SuspectAfter = bs.HedgeAfter, bs.SuspectAfter
	}
}

// lookUp resolves each field from the first of names (most specific first)
// whose override sets it; a name equal to a format is shown as `format`.
// hedge is the format's own hedge_after.
func (c *Config) lookUp(hedge time.Duration, names ...string) BreakerSettings {
	cb := c.CircuitBreaker
	bs := BreakerSettings{FailureThreshold: cb.FailureThreshold, FailureThresholdFrom: "global",
		ResetTimeout: cb.ResetTimeout, ResetTimeoutFrom: "global", Jitter: cb.Jitter,
		SuspectAfter: cb.SuspectAfter, SuspectAfterFrom: "global", HedgeAfter: hedge, HedgeAfterFrom: "format table"}
	if cb.ResetTimeoutMax > 0 {
		bs.ResetTimeoutMax, bs.ResetTimeoutMaxFrom = cb.ResetTimeoutMax, "global"
	}
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
		if o.ResetTimeoutMax != nil {
			bs.ResetTimeoutMax, bs.ResetTimeoutMaxFrom = *o.ResetTimeoutMax, from
		}
		if o.SuspectAfter != nil {
			bs.SuspectAfter, bs.SuspectAfterFrom = *o.SuspectAfter, from
		}
		if o.HedgeAfter != nil {
			bs.HedgeAfter, bs.HedgeAfterFrom = *o.HedgeAfter, from
		}
	}
	// Unset, or below a reset_timeout set at another level: the open time
	// stays fixed.
	if bs.ResetTimeoutMaxFrom == "" || bs.ResetTimeoutMax < bs.ResetTimeout {
		bs.ResetTimeoutMax, bs.ResetTimeoutMaxFrom = bs.ResetTimeout, "reset_timeout"
	}
	return bs
}
