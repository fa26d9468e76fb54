package admin

import (
	"net"
	"net/http"
	"net/netip"

	"github.com/nora-breaker/nora-breaker/internal/hostport"
)

// The admin listener's clients are curl, the status command, Prometheus and
// kubelet probes, none of which is a browser. A browser the operator happens
// to have open is still able to reach it, on a page of anyone's choosing, so
// the two rules of docs/behaviour.md §7 keep such a page from using it:
//
//   - cross-origin requests with an unsafe method (a POST to
//     /breakers/force) are refused: net/http's CrossOriginProtection reads
//     Sec-Fetch-Site, else compares Origin with Host, and lets through a
//     request that carries neither, as every non-browser client sends it;
//   - on a loopback listener, a Host that is neither localhost nor an IP
//     literal is refused on every route: a domain rebound to 127.0.0.1 is
//     the same origin as the listener for the browser, so it could read
//     everything, but its requests carry its own name. A listener on other
//     addresses (the Helm chart's, on all interfaces) is reached by service
//     and pod names, and is left to the admin token and the network policy.

// OnLoopback reports whether addr, the address the admin listener bound, is
// a loopback address (127.0.0.0/8 or ::1). A listener on every interface
// ("0.0.0.0", "::") is not one.
func OnLoopback(addr net.Addr) bool {
	if a, ok := addr.(*net.TCPAddr); ok {
		return a.AddrPort().Addr().Unmap().IsLoopback()
	}
	if addr == nil {
		return false
	}
	ap, err := netip.ParseAddrPort(addr.String())
	return err == nil && ap.Addr().Unmap().IsLoopback()
}

// guardBrowsers wraps the admin handler with both rules; the Host rule only
// when loopback (the listener's address, OnLoopback).
func guardBrowsers(next http.Handler, loopback bool) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		writeJSON(w, http.StatusForbidden, map[string]string{"error": "cross-origin request refused"})
	}))
	guarded := cop.Handler(next)
	if !loopback {
		return guarded
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !localHost(r.Host) {
			writeJSON(w, http.StatusForbidden, map[string]string{
				"error": "this admin listener is on loopback: name it localhost or by its IP address"})
			return
		}
		guarded.ServeHTTP(w, r)
	})
}

// localHost reports whether host, a request's Host with or without its
// port, is localhost or an IP literal: no name a DNS answer of someone
// else's can point at this machine. An empty Host is neither.
func localHost(host string) bool {
	h, _, err := hostport.Split(host, "0")
	if err != nil {
		return false
	}
	if h == "localhost" {
		return true
	}
	_, err = netip.ParseAddr(h)
	return err == nil
}
