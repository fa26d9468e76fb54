package route

import (
	"net/url"
	"strings"

	"github.com/nora-breaker/nora-breaker/internal/hostport"
)

// Router classifies under one configuration: its table first, then the
// hosts learned from redirects, which are alias hosts of the upstream that
// redirected to them (docs/behaviour.md §3, §3.2). A Router is a small
// value; a configuration snapshot holds one, and any number of goroutines
// may use it.
type Router struct {
	table   *Table
	learned *Learned
}

// NewRouter combines table with the learned hosts (nil: none).
func NewRouter(table *Table, learned *Learned) Router {
	return Router{table: table, learned: learned}
}

// Table is the configured part of the router.
func (r Router) Table() *Table { return r.table }

// Of classifies a request URL.
func (r Router) Of(u *url.URL) Route {
	if rt := r.table.Classify(u); rt.Classified() {
		return rt
	}
	host, port := hostport.Of(u)
	return r.learnedRoute(strings.ToLower(u.Scheme), host, port)
}

// OfHost classifies a CONNECT target, where only host and port are seen.
func (r Router) OfHost(host, port string) Route {
	if rt := r.table.HostUpstream(host, port); rt.Classified() {
		return rt
	}
	return r.learnedRoute("", host, port)
}

// KeyOf is the breaker key of the host u goes to, or "" when it is no
// upstream's (the fallback loop finds a docker token realm's breaker so).
func (r Router) KeyOf(u *url.URL) string { return r.Of(u).Key }

// learnedRoute is the route of a learned host reached with scheme ("" for
// any: a CONNECT).
func (r Router) learnedRoute(scheme, host, port string) Route {
	if r.learned == nil {
		return Route{}
	}
	h, ok := r.learned.Lookup(host, port)
	if !ok || (scheme != "" && scheme != h.Scheme) {
		return Route{}
	}
	up := r.table.ByKey(h.Upstream)
	if up == nil {
		return Route{} // the upstream left the configuration
	}
	return Route{Upstream: up, Alias: true, Key: h.Key()}
}
