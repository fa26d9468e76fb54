//go:build e2e

package e2e

import (
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestClientsResumeTLSThroughTheProxy: clients that keep their TLS
// sessions resume them on their next intercepted connection
// (docs/behaviour.md §5.2), as the proxy's handshake counter and the
// clients themselves say. OpenSSL's s_client saves the session of one
// connection and offers it on the next; curl, which keeps a session cache
// across the transfers of one command, opens a connection per URL because
// every request asks to close it. Before the fix every one of these
// handshakes was a full one.
func TestClientsResumeTLSThroughTheProxy(t *testing.T) {
	s := loadSuite(t)
	dir := scenarioDir(t, s)
	ca := newOriginCA(t, dir)
	const host = "index.crates.io"
	f := newFront(t, host, "", http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		io.WriteString(w, "{}\n")
	}), ca.serverTLS(t, host))
	n := startNora(t, s, dir, noraOpts{
		formats:    breakerTOML(3, 10*time.Second, "cargo") + "[cargo]\nproxy = \"https://crates.io\"\n",
		resolve:    map[string]string{host + ":443": f.addr},
		upstreamCA: ca.pemPath,
	})
	counted := func() (resumed, full float64) {
		return n.metric(t, "nora_sidecar_mitm_handshakes_total", `resumed="true"`),
			n.metric(t, "nora_sidecar_mitm_handshakes_total", `resumed="false"`)
	}

	t.Run("openssl", func(t *testing.T) {
		r0, f0 := counted()
		session := filepath.Join(dir, "openssl-session.pem")
		head := "GET /config.json HTTP/1.1\r\nHost: " + host + "\r\nConnection: close\r\n\r\n"
		var said []string
		var wall time.Duration
		for i, flag := range []string{"-sess_out", "-sess_in"} {
			cmd := fmt.Sprintf("printf %q | openssl s_client -proxy 127.0.0.1:%s -connect %s:443 -servername %s "+
				"-CAfile %q -verify_return_error -ign_eof %s %q", head, n.proxyPort, host, host, n.caPEM, flag, session)
			r := mustRun(t, dir, cleanEnv(), 30*time.Second, "bash", "-c", cmd)
			wall += r.wall
			if !strings.Contains(r.out, "HTTP/1.1 200") || !strings.Contains(r.out, "Verify return code: 0 (ok)") {
				t.Fatalf("connection %d: no verified 200:\n%s", i, tail(r.out, 2000))
			}
			for _, l := range strings.Split(r.out, "\n") {
				if strings.HasPrefix(l, "New, ") || strings.HasPrefix(l, "Reused, ") {
					said = append(said, strings.SplitN(l, ",", 2)[0])
				}
			}
		}
		if strings.Join(said, " ") != "New Reused" {
			t.Fatalf("openssl s_client says %v, want [New Reused]", said)
		}
		if r, f := counted(); r-r0 != 1 || f-f0 != 1 {
			t.Fatalf("handshakes counted: %v resumed, %v full; want 1 and 1", r-r0, f-f0)
		}
		summary("openssl s_client, two connections through the interception", "none",
			"the second resumed the first's session", wall, fmt.Sprint(f.reqs.Load()))
	})

	t.Run("curl", func(t *testing.T) {
		r0, f0 := counted()
		const urls = 4
		argv := []string{"curl", "-sS", "--http1.1", "--proxy", n.proxyURL, "--cacert", n.caPEM,
			"-H", "Connection: close", "-w", "%{http_code} %{num_connects}\\n"}
		for range urls {
			argv = append(argv, "-o", "/dev/null", "https://"+host+"/config.json")
		}
		r := mustRun(t, dir, cleanEnv(), 30*time.Second, argv...)
		if got := strings.Count(r.out, "200 1\n"); got != urls {
			t.Fatalf("curl: %d of %d transfers were a 200 on a connection of their own:\n%s", got, urls, r.out)
		}
		if r, f := counted(); r-r0 != urls-1 || f-f0 != 1 {
			t.Fatalf("handshakes counted: %v resumed, %v full; want %d and 1", r-r0, f-f0, urls-1)
		}
		summary("curl, four connections in one command through the interception", "none",
			"every connection after the first resumed", r.wall, fmt.Sprint(f.reqs.Load()))
	})
}
