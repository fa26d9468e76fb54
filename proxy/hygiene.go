package proxy

import (
	"net/http"
	"net/textproto"
	"strings"

	"golang.org/x/net/http/httpguts"
)

// viaToken is what the proxy adds to Via; seeing it on an incoming request
// means the request has looped back through us (docs/behaviour.md §5.5).
const viaToken = "nora-breaker"

// viaValue is the full Via entry added to requests and responses.
const viaValue = "1.1 " + viaToken

// hopHeaders are connection-scoped headers that must not be forwarded
// (RFC 9110 §7.6.1). Every Proxy-* header goes too (stripHopByHop): they
// speak to a proxy, this one or the one before it.
var hopHeaders = [...]string{
	"Connection", "Keep-Alive", "Te", "Trailer", "Transfer-Encoding", "Upgrade",
}

// looped reports whether the request already passed through this proxy.
func looped(h http.Header) bool {
	for _, v := range h["Via"] {
		for _, part := range strings.Split(v, ",") {
			fields := strings.Fields(part)
			if len(fields) >= 2 && strings.EqualFold(fields[1], viaToken) {
				return true
			}
		}
	}
	return false
}

// isWebSocketHandshake reports a client's websocket upgrade request, the one
// Upgrade the proxy relays.
func isWebSocketHandshake(h http.Header) bool {
	return httpguts.HeaderValuesContainsToken(h["Connection"], "upgrade") &&
		httpguts.HeaderValuesContainsToken(h["Upgrade"], "websocket")
}

// stripRequestHopByHop removes a request's hop-by-hop headers. A websocket
// handshake keeps Connection and Upgrade, which the upstream needs to switch
// protocols.
func stripRequestHopByHop(h http.Header) {
	stripHopByHop(h, isWebSocketHandshake(h))
}

// stripAnswerHopByHop removes an answer's hop-by-hop headers, Upgrade and
// Connection: upgrade included whatever the request was: they pass only on
// the 101 that answers a handshake (docs/behaviour.md §5.5), which is
// relayed as it came and never stripped.
func stripAnswerHopByHop(h http.Header) {
	stripHopByHop(h, false)
}

// stripHopByHop removes hop-by-hop headers and every header named in
// Connection, all but Connection and Upgrade when ws is set.
func stripHopByHop(h http.Header, ws bool) {
	for _, v := range h["Connection"] {
		for _, name := range strings.Split(v, ",") {
			name = textproto.TrimString(name)
			if name == "" || (ws && strings.EqualFold(name, "upgrade")) {
				continue
			}
			h.Del(name)
		}
	}
	for _, name := range hopHeaders {
		if ws && (name == "Connection" || name == "Upgrade") {
			continue
		}
		delete(h, name) // hopHeaders are canonical: Del would canonicalise each again
	}
	if ws {
		// What else Connection named is gone: it says only what stays.
		h["Connection"] = []string{"Upgrade"}
	}
	for name := range h {
		if isProxyHeader(name) {
			delete(h, name)
		}
	}
}

// isProxyHeader reports the Proxy-* family in canonical form
// (Proxy-Authorization, Proxy-Authenticate, Proxy-Connection, Proxy-Status
// and any other) and the bare Proxy header, which CGI servers turn into the
// HTTP_PROXY variable of the process that handles the request (httpoxy).
func isProxyHeader(name string) bool {
	return name == "Proxy" || strings.HasPrefix(name, "Proxy-")
}

// addVia appends our Via entry.
func addVia(h http.Header) {
	if prior := h.Get("Via"); prior != "" {
		h.Set("Via", strings.Join(h.Values("Via"), ", ")+", "+viaValue)
		return
	}
	h.Set("Via", viaValue)
}
