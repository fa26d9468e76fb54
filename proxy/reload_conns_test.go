package proxy

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptrace"
	"strings"
	"testing"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
)

// TestReloadReachesOpenConnections: after a reload that removes an
// upstream and turns deny_unlisted on (allow_hosts emptied), the next
// request on a connection opened before it — a plain keep-alive, an
// intercepted HTTP/1.1 or HTTP/2 connection — is decided under the new
// configuration and refused 403, while a blind tunnel opened before it goes
// on relaying (docs/behaviour.md §2.3).
func TestReloadReachesOpenConnections(t *testing.T) {
	a := newTLSUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "a") })
	p := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "p") })
	u := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "u") })
	blind := newTLSUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "blind") })
	lines, pool := interceptCA(t, a.Server)
	conf := func(ups []string, sidecar string) string {
		return fmt.Sprintf("[registries]\nenable = \"maven\"\n[maven]\nproxies = [%s]\n[sidecar]\n%s%s\n",
			strings.Join(ups, ", "), lines, sidecar)
	}
	before := conf([]string{fmt.Sprintf("%q", a.URL+"/maven2"), fmt.Sprintf("%q", p.URL+"/maven2")}, allowHostsLine(u, blind))
	after := conf([]string{fmt.Sprintf("%q", p.URL+"/maven2")}, "deny_unlisted = true\n")
	tp := newTestProxy(t, before, nil)
	ix := &ixIntercept{up: a, tp: tp, ca: pool}
	type kind struct {
		name   string
		c      *http.Client
		url    string
		status int // after the reload
	}
	blindClient := proxyClient(t, tp, blind.Client().Transport.(*http.Transport).TLSClientConfig.RootCAs)
	kinds := []kind{
		{"plain to an allow_hosts host", proxyClient(t, tp, nil), u.URL + "/x", http.StatusForbidden},
		{"intercepted h1", ix.client(t, false), a.URL + "/maven2/x.jar", http.StatusForbidden},
		{"intercepted h2", ix.client(t, true), a.URL + "/maven2/x.jar", http.StatusForbidden},
		{"blind tunnel", blindClient, blind.URL + "/x", http.StatusOK},
	}
	get := func(k kind) (int, bool) {
		reused := false
		req, _ := http.NewRequest("GET", k.url, nil)
		req = req.WithContext(httptrace.WithClientTrace(req.Context(), &httptrace.ClientTrace{
			GotConn: func(info httptrace.GotConnInfo) { reused = info.Reused },
		}))
		resp, err := k.c.Do(req)
		if err != nil {
			t.Fatalf("%s: %v", k.name, err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp.StatusCode, reused
	}
	for _, k := range kinds {
		if st, _ := get(k); st != 200 {
			t.Fatalf("%s before the reload: %d", k.name, st)
		}
	}
	if _, err := tp.Reload(testkit.LoadConfig(t, after, nil)); err != nil {
		t.Fatal(err)
	}
	for _, k := range kinds {
		if st, reused := get(k); st != k.status || !reused {
			t.Errorf("%s after the reload: %d on a reused connection %v, want %d on the connection opened before",
				k.name, st, reused, k.status)
		}
	}
}
