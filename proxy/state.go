package proxy

import (
	"net"
	"strings"

	"github.com/nora-breaker/nora-breaker/config"
)

// runtimeState is what a configuration reload swaps as one unit: the
// configuration and everything the request path derives from it, worked out
// once here instead of on every request.
type runtimeState struct {
	cfg   *config.Config
	table *Table
	// allowHosts holds allow_hosts entries, lower-cased: "host" (any port)
	// or "host:port".
	allowHosts map[string]bool
	// connectPorts are the ports a CONNECT may name: 443, the ports of the
	// configured upstreams and those named in allow_hosts.
	connectPorts map[string]bool
}

func newRuntimeState(cfg *config.Config) *runtimeState {
	st := &runtimeState{cfg: cfg, table: NewTable(cfg.Upstreams),
		allowHosts: make(map[string]bool), connectPorts: map[string]bool{"443": true}}
	for _, u := range cfg.Upstreams {
		_, port := hostPort(u.URL)
		st.connectPorts[port] = true
	}
	for _, a := range cfg.Sidecar.AllowHosts {
		a = strings.ToLower(a)
		st.allowHosts[a] = true
		if _, port, err := net.SplitHostPort(a); err == nil {
			st.connectPorts[port] = true
		}
	}
	return st
}

// hostAllowed reports whether host (and port) is listed in allow_hosts.
func (st *runtimeState) hostAllowed(host, port string) bool {
	host = strings.ToLower(host)
	return st.allowHosts[host] || st.allowHosts[net.JoinHostPort(host, port)]
}
