package proxy

import "github.com/nora-breaker/nora-breaker/destination"

// destinationRefusal is why policy refuses a request or a CONNECT to
// host:port before anything is dialed, or "" (docs/behaviour.md §10): an IP
// literal the destination policy refuses, or under deny_unlisted a host of
// no upstream, unless allow_hosts names it. The plain path and the CONNECT
// path both ask here, so the two cannot drift apart.
func destinationRefusal(snap *snapshot, host, port string, classified bool) string {
	allowed := snap.hostAllowed(host, port)
	switch {
	case destination.RefusedHost(host) && !allowed:
		return "destination address is not allowed"
	case !classified && snap.cfg.Sidecar.DenyUnlisted && !allowed:
		return "host is not a configured upstream"
	}
	return ""
}
