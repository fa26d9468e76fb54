// Package admin serves the admin listener: the Prometheus endpoint, the
// health and readiness probes, the breaker API with its history of
// transitions, and the status page built from the same views.
package admin

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/rs/zerolog"

	"github.com/nora-breaker/nora-breaker/breakerstate"
	"github.com/nora-breaker/nora-breaker/throttle"
)

// KeyHost is what a breaker key stands for: the host it admits and the key
// of the upstream that host belongs to.
type KeyHost struct{ Host, Upstream string }

// Options is everything the admin listener shows and changes. Every field
// is required; the functions are called once per admin request, so they
// read the configuration in force at that moment.
type Options struct {
	// Registry is the process's private registry: served on /metrics, and
	// the status page reads its counters back.
	Registry *prometheus.Registry
	Breakers *breakerstate.Set
	// Throttles are the hosts that answered 429.
	Throttles *throttle.Table
	// History receives every breaker transition (the breaker set's
	// transition hook feeds it).
	History *History
	// Hosts names, for every breaker key (configured and learned), the host
	// it admits and its upstream.
	Hosts func() map[string]KeyHost
	// Token is the admin_token in force ("" = no token).
	Token func() string
	// Shared is /health's shared_state: "off", "up" or "down".
	Shared func() string
	// ShuttingDown makes /ready answer 503 once it reports true.
	ShuttingDown func() bool
	Now          func() time.Time
	Started      time.Time
	Version      string
	Logger       zerolog.Logger
}

// Server is the admin listener's handler and what it keeps.
type Server struct{ o Options }

// New builds the admin listener's server.
func New(o Options) *Server { return &Server{o: o} }
