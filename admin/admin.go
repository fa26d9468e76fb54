package admin

import (
	"encoding/json"
	"errors"
	"math"
	"net/http"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/internal/adminapi"
)

// Handler serves the admin listener (docs/behaviour.md §7). It is never
// mounted on the proxy port. Every route but /metrics, /health and /ready
// sits behind the admin token when one is configured (adminauth.go), and
// all of them behind the browser rules (browsers.go); loopback is whether
// the listener serving it is on a loopback address (OnLoopback).
func (s *Server) Handler(loopback bool) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.o.Registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /health", s.handleHealth)
	mux.HandleFunc("GET /ready", s.handleReady)
	mux.HandleFunc("GET /breakers", s.handleBreakers)
	mux.HandleFunc("GET /breakers/history", s.handleHistory)
	mux.HandleFunc("POST /breakers/force", s.handleForce)
	mux.HandleFunc("GET /{$}", s.handleStatusPage)
	return guardBrowsers(s.requireAdminToken(mux), loopback)
}

// breakerView is one entry of GET /breakers; its wire form, shared with the
// status command, is adminapi.Breaker.
type breakerView = adminapi.Breaker

// Views lists every breaker as GET /breakers shows it, in configuration
// order.
func (s *Server) Views() []breakerView { return s.views() }

func (s *Server) views() []breakerView {
	now := s.o.Now()
	hosts := s.o.Hosts()
	enabled := s.o.Breakers.Enabled()
	snaps := s.o.Breakers.Snapshot()
	out := make([]breakerView, 0, len(snaps))
	for _, b := range snaps {
		v := breakerView{Key: b.Key, Format: b.Format, State: b.State.String(), FailureCount: b.FailureCount,
			Threshold: b.Threshold, ThresholdSource: b.ThresholdSource, ResetTimeout: b.ResetTimeout.Seconds(),
			ResetTimeoutSource: b.ResetTimeoutSource, Rejections: b.Rejections, Forced: b.Forced,
			RetryAfter: int(math.Ceil(b.RetryAfter.Seconds())), Host: hosts[b.Key].Host, Upstream: hosts[b.Key].Upstream,
			OpenTime: b.OpenTime.Seconds(), FailedProbes: b.FailedProbes, ResetTimeoutMax: b.ResetTimeoutMax.Seconds()}
		if !b.LastFailure.IsZero() {
			ago := math.Floor(now.Sub(b.LastFailure).Seconds())
			v.LastFailureAgo = &ago
		}
		if left := s.o.Throttles.Left(b.Key); left > 0 {
			v.Throttled, v.ThrottledSeconds = true, int(math.Ceil(left.Seconds()))
		}
		if !enabled {
			v.State = "disabled"
		}
		out = append(out, v)
	}
	return out
}

func (s *Server) handleBreakers(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, s.views())
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

func (s *Server) handleHealth(w http.ResponseWriter, _ *http.Request) {
	views := s.views()
	sum := summarize(views, s.o.Breakers.Enabled())
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
		"status": sum.status, "version": s.o.Version, "circuit_breaker": sum.circuitBreaker,
		"shared_state": s.o.Shared(), "uptime_seconds": math.Floor(s.o.Now().Sub(s.o.Started).Seconds()),
		"upstreams": formats,
	})
}

func (s *Server) handleReady(w http.ResponseWriter, _ *http.Request) {
	if s.o.ShuttingDown() {
		writeJSON(w, http.StatusServiceUnavailable, map[string]string{"status": "shutting_down"})
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"status": "ready"})
}

func (s *Server) handleForce(w http.ResponseWriter, r *http.Request) {
	key, state := r.URL.Query().Get("key"), r.URL.Query().Get("state")
	mode, err := breakerstate.ParseMode(state)
	if err != nil {
		writeJSON(w, http.StatusBadRequest, map[string]string{"error": "state must be open, closed or auto"})
		return
	}
	if err := s.o.Breakers.Force(key, mode); err != nil {
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
	s.o.Logger.Warn().Str("key", key).Str("mode", state).Str("client", r.RemoteAddr).Msg("breaker forced")
	for _, v := range s.views() {
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
