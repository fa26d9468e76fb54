// Package adminapi holds the JSON wire types of the admin listener's read
// endpoints, which package admin encodes and the status command decodes, so
// the two cannot drift apart (docs/behaviour.md §7).
package adminapi

import "time"

// Breaker is one entry of GET /breakers (and the answer of
// POST /breakers/force).
type Breaker struct {
	Key                string  `json:"key"`
	Format             string  `json:"format"`
	State              string  `json:"state"`
	FailureCount       int     `json:"failure_count"`
	Threshold          int     `json:"threshold"`
	ThresholdSource    string  `json:"threshold_source"`
	ResetTimeout       float64 `json:"reset_timeout_seconds"`
	ResetTimeoutSource string  `json:"reset_timeout_source"`
	// OpenTime is how long the breaker stays open: the current open period
	// while open or half-open (grown and jittered), else the open time the
	// next opening starts from; FailedProbes is how many probes of this
	// outage failed in a row, each of which doubled it up to ResetTimeoutMax
	// (docs/behaviour.md §4).
	OpenTime        float64  `json:"open_time_seconds"`
	FailedProbes    int      `json:"failed_probes"`
	ResetTimeoutMax float64  `json:"reset_timeout_max_seconds"`
	LastFailureAgo  *float64 `json:"last_failure_seconds_ago"`
	RetryAfter      int      `json:"retry_after_seconds"`
	Rejections      uint64   `json:"rejections"`
	Forced          string   `json:"forced"`
	// Host is the host whose requests this breaker admits; Upstream is the
	// breaker key of the upstream that host belongs to (equal to Key for the
	// upstream's URL host, docs/behaviour.md §3.1).
	Host     string `json:"host"`
	Upstream string `json:"upstream"`
	// Throttled is true while the host is skipped after a 429, for
	// ThrottledSeconds more seconds (docs/behaviour.md §5.6); it is not a breaker state.
	Throttled        bool `json:"throttled"`
	ThrottledSeconds int  `json:"throttled_seconds"`
}

// Transition is one breaker transition as GET /breakers/history shows it.
// Every field comes from the breaker set: keys are configured keys, never
// request data.
type Transition struct {
	At           time.Time `json:"at"`
	Key          string    `json:"key"`
	From         string    `json:"from"`
	To           string    `json:"to"`
	Why          string    `json:"why"`
	FailureCount int       `json:"failure_count"`
}
