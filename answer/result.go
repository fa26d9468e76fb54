package answer

// Result names how one request was answered. It is the "result" field of the
// request's log line and the result label of nora_sidecar_requests_total, so
// the set is fixed here and nowhere else.
type Result string

const (
	// Forwarded: the addressed upstream's own answer (any status).
	Forwarded Result = "forwarded"
	// Fallback: another upstream of the same format served it.
	Fallback Result = "fallback"
	// Stale: a stored copy, because no upstream could serve.
	Stale Result = "stale"
	// Synthesized503: the proxy's 503, every upstream that could serve skipped.
	Synthesized503 Result = "synthesized_503"
	// Synthesized404: the proxy's 404, vouched for by another upstream.
	Synthesized404 Result = "synthesized_404"
	// Throttled: the proxy's 429, the addressed upstream asked us to wait.
	Throttled Result = "throttled"
	// Tunnel: a CONNECT tunnel was opened (nothing inside it is seen).
	Tunnel Result = "tunnel"
	// Intercepted: a CONNECT the proxy terminates itself; the requests inside
	// are logged on their own.
	Intercepted Result = "intercepted"
	// Unclassified: a host that is no upstream, passed through untouched.
	Unclassified Result = "unclassified"
	// Denied: refused by policy (destination, deny_unlisted, loop, port).
	Denied Result = "denied"
	// BadRequest: the client's request could not be read or was malformed.
	BadRequest Result = "bad_request"
	// Error: nothing could answer (an attempt failed and nothing replaced it).
	Error Result = "error"
)

// Results lists every Result, for metric help text and tests.
func Results() []Result {
	return []Result{Forwarded, Fallback, Stale, Synthesized503, Synthesized404, Throttled, Tunnel,
		Intercepted, Unclassified, Denied, BadRequest, Error}
}
