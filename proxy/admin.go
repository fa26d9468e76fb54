package proxy

import (
	"encoding/json"
	"errors"
	"maps"
	"math"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/internal/adminapi"
)

// AdminHandler serves the admin listener (docs/behaviour.md §7). It is never mounted on
// the proxy port. Every route but /metrics, /health and /ready sits behind
// the admin token when one is configured (adminauth.go).
func (p *Proxy) AdminHandler() http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(p.deps.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /health", p.handleHealth)
	mux.HandleFunc("GET /ready", p.handleReady)
	mux.HandleFunc("GET /breakers", p.handleBreakers)
	mux.HandleFunc("GET /breakers/history", p.handleHistory)
	mux.HandleFunc("POST /breakers/force", p.handleForce)
	mux.HandleFunc("GET /{$}", p.handleStatusPage)
	return p.requireAdminToken(mux)
}

// breakerView is one entry of GET /breakers; its wire form, shared with the
// status command, is adminapi.Breaker.
type breakerView = adminapi.Breaker

func (p *Proxy) views() []breakerView {
	now := p.now()
	hosts := p.state.Load().hostOfKey
	if learned := p.learned.Current(); len(learned) > 0 {
		hosts = maps.Clone(hosts)
		for _, h := range learned {
			if _, ok := hosts[h.Key()]; !ok {
				hosts[h.Key()] = keyHost{host: h.Name, upstream: h.Upstream}
			}
		}
	}
	snaps := p.breakers.Snapshot()
	out := make([]breakerView, 0, len(snaps))
	for _, s := range snaps {
		v := breakerView{Key: s.Key, Format: s.Format, State: s.State.String(), FailureCount: s.FailureCount,
			Threshold: s.Threshold, ThresholdSource: s.ThresholdSource, ResetTimeout: s.ResetTimeout.Seconds(),
			ResetTimeoutSource: s.ResetTimeoutSource, Rejections: s.Rejections, Forced: s.Forced,
			RetryAfter: int(math.Ceil(s.RetryAfter.Seconds())), Host: hosts[s.Key].host, Upstream: hosts[s.Key].upstream}
		if !s.LastFailure.IsZero() {
			ago := math.Floor(now.Sub(s.LastFailure).Seconds())
			v.LastFailureAgo = &ago
		}
		if left := p.throttles.Left(s.Key); left > 0 {
			v.Throttled, v.ThrottledSeconds = true, int(math.Ceil(left.Seconds()))
		}
		if !p.breakers.Enabled() {
			v.State = "disabled"
		}
		out = append(out, v)
	}
	return out
}

func (p *Proxy) handleBreakers(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, p.views())
}

// summary is what /health and the status page say about the breakers as a
// whole.
type summary struct {
	// status is "degraded" while any breaker is not closed (a disabled set
	// has none), else "healthy".
	status string
	// circuitBreaker is "enabled" or "disabled".
	circuitBreaker string
	// worst maps each format to the worst state of its breakers.
	worst map[string]string
}

// summarize sums views up; enabled is whether the breaker set is.
func summarize(views []breakerView, enabled bool) summary {
	s := summary{status: "healthy", circuitBreaker: "enabled", worst: make(map[string]string)}
	if !enabled {
		s.circuitBreaker = "disabled"
	}
	for _, v := range views {
		if w, ok := s.worst[v.Format]; !ok || severity(v.State) > severity(w) {
			s.worst[v.Format] = v.State
		}
		if v.State != "closed" && v.State != "disabled" {
			s.status = "degraded"
		}
	}
	return s
}

// severity orders breaker states for "worst of" (open > half_open > closed).
func severity(state string) int {
	switch state {
	case "open":
		return 3
	case "half_open":
		return 2
	case "closed":
		return 1
	}
	return 0
}

type healthBreaker struct {
	Status           string   `json:"status"`
	FailureCount     int      `json:"failure_count"`
	LastFailureAgo   *float64 `json:"last_failure_seconds_ago"`
	RetryAfter       int      `json:"retry_after_seconds"`
	Throttled        bool     `json:"throttled"`
	ThrottledSeconds int      `json:"throttled_seconds"`
}

type healthFormat struct {
	Status         string                   `json:"status"`
	FailureCount   int                      `json:"failure_count"`
	LastFailureAgo *float64                 `json:"last_failure_seconds_ago"`
	Breakers       map[string]healthBreaker `json:"breakers"`
}

func (p *Proxy) handleHealth(w http.ResponseWriter, _ *http.Request) {
	views := p.views()
	sum := summarize(views, p.breakers.Enabled())
	formats := make(map[string]*healthFormat)
	for _, v := range views {
		f := formats[v.Format]
		if f == nil {
			f = &healthFormat{Status: sum.worst[v.Format], Breakers: make(map[string]healthBreaker)}
			formats[v.Format] = f
		}
		f.Breakers[v.Key] = healthBreaker{Status: v.State, FailureCount: v.FailureCount,
			Throttled: v.Throttled, ThrottledSeconds: v.ThrottledSeconds,
			LastFailureAgo: v.LastFailureAgo, RetryAfter: v.RetryAfter}
		f.FailureCount += v.FailureCount
		if v.LastFailureAgo != nil && (f.LastFailureAgo == nil || *v.LastFailureAgo < *f.LastFailureAgo) {
			f.LastFailureAgo = v.LastFailureAgo
		}
	}
	writeJSON(w, http.StatusOK, map[string]any{
		"status": sum.status, "version": p.deps.Version, "circuit_breaker": sum.circuitBreaker,
		"shared_state": p.sharedStatus(), "uptime_seconds": math.Floor(p.now().Sub(p.started).Seconds()),
		"upstreams": formats,
	})
}

func (p *Proxy) handleReady(w http.ResponseWriter, _ *http.Request) {
	if p.shutting.Load() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting_down"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (p *Proxy) handleForce(w http.ResponseWriter, r *http.Request) {
	key, state := r.URL.Query().Get("key"), r.URL.Query().Get("state")
	mode, err := breakerstate.ParseMode(state)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "state must be open, closed or auto"})
		return
	}
	if err := p.breakers.Force(key, mode); err != nil {
		switch {
		case errors.Is(err, breakerstate.ErrUnknownKey):
			writeJSON(w, http.StatusNotFound, map[string]string{"error": "unknown breaker key", "key": key})
		case errors.Is(err, breakerstate.ErrDisabled):
			writeJSON(w, http.StatusConflict, map[string]string{"error": "the circuit breaker is disabled", "key": key})
		default:
			writeJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
		}
		return
	}
	p.log.Warn().Str("key", key).Str("mode", state).Str("client", r.RemoteAddr).Msg("breaker forced")
	for _, v := range p.views() {
		if v.Key == key {
			writeJSON(w, http.StatusOK, v)
			return
		}
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}
