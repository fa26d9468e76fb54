package proxy

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// TestSecurityDestinationPolicy: metadata addresses are refused (literal or
// after [sidecar.resolve]), allow_hosts exempts, deny_unlisted refuses hosts
// that are no upstream. Every refusal is decided before any packet leaves:
// literals before the dial, resolved names in the dialer's Control hook.
func TestSecurityDestinationPolicy(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "reached") })
	upAddr := strings.TrimPrefix(up.URL, "http://")
	tests := []struct {
		name, sidecar, url string
		want               int
	}{
		{"IPv4 metadata literal", "", "http://169.254.169.254/latest/meta-data/", 403},
		{"link-local literal with port", "", "http://169.254.10.1:8080/x", 403},
		{"IPv6 metadata literal", "", "http://[fd00:ec2::254]/latest", 403},
		{"name resolved to metadata", `resolve = {"meta.example:80" = "169.254.169.254:80"}`, "http://meta.example/x", 403},
		{"upstream name resolved to link-local", `resolve = {"sneaky.example:80" = "169.254.1.1:80"}`, "http://sneaky.example/maven2/x", 403},
		{"allow_hosts exempts the literal", `allow_hosts = ["169.254.169.254"]` + "\n" +
			`resolve = {"169.254.169.254:80" = "` + upAddr + `"}`, "http://169.254.169.254/x", 200},
		{"deny_unlisted refuses other hosts", "deny_unlisted = true", "http://unlisted.invalid/x", 403},
		{"deny_unlisted with allow_hosts", "deny_unlisted = true\nallow_hosts = [\"allowed.example\"]\n" +
			`resolve = {"allowed.example:80" = "` + upAddr + `"}`, "http://allowed.example/x", 200},
		{"private ranges are fine", `resolve = {"internal.example:80" = "` + upAddr + `"}`, "http://internal.example/x", 200},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			cfg := ixMaven("http://sneaky.example", true, "[sidecar]\n"+tc.sidecar+"\n")
			tp, logs := ixStartProxy(t, cfg)
			resp, body := request(t, proxyClient(t, tp, nil), "GET", tc.url, nil)
			if resp.StatusCode != tc.want {
				t.Fatalf("got %d %q, want %d", resp.StatusCode, body, tc.want)
			}
			if tc.want == 403 {
				logs.waitFor(t, `"result":"denied"`)
			}
		})
	}
}

func TestSecurityOversizedHeaders(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	tp := newTestProxy(t, ixMaven(up.URL, true, ""), nil)
	big := strings.Repeat("a", 80<<10)
	resp, _ := ixRaw(t, tp, "GET "+up.URL+"/maven2/x HTTP/1.1\r\nHost: x\r\nX-Big: "+big+"\r\n\r\n")
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Fatalf("got %d, want 431", resp.StatusCode)
	}
	if up.hits.Load() != 0 {
		t.Fatal("oversized request forwarded")
	}
}

func TestSecurityAmbiguousLength(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.Copy(io.Discard, r.Body) })
	tp := newTestProxy(t, ixMaven(up.URL, true, ""), nil)
	resp, _ := ixRaw(t, tp, "POST "+up.URL+"/maven2/x HTTP/1.1\r\nHost: x\r\nContent-Length: 5\r\n"+
		"Transfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n")
	if resp.StatusCode != http.StatusBadRequest {
		t.Fatalf("got %d, want 400", resp.StatusCode)
	}
	if up.hits.Load() != 0 {
		t.Fatal("ambiguous request forwarded")
	}
}

// TestSecurityConnectionLimit: with max_connections = 2 the third open
// connection is answered 503 at once.
func TestSecurityConnectionLimit(t *testing.T) {
	up := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { io.WriteString(w, "ok") })
	tp := newTestProxy(t, ixMaven(up.URL, true, "[sidecar]\nmax_connections = 2\n"), nil)
	req := "GET " + up.URL + "/maven2/x HTTP/1.1\r\nHost: x\r\n\r\n"
	var held []net.Conn
	for i := 0; i < 2; i++ {
		c, err := net.Dial("tcp", tp.URL.Host)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { c.Close() })
		held = append(held, c)
		// An answer proves the connection was accepted and holds a slot.
		c.SetDeadline(time.Now().Add(10 * time.Second))
		io.WriteString(c, req)
		buf := make([]byte, 12)
		if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "HTTP/1.1 200" {
			t.Fatalf("connection %d: %q %v", i, buf, err)
		}
	}
	resp, body := ixRaw(t, tp, req)
	if resp.StatusCode != http.StatusServiceUnavailable || !strings.Contains(body, "too many") {
		t.Fatalf("third connection: %d %q, want 503", resp.StatusCode, body)
	}
	// Closing a held connection frees its slot. The server notices the close
	// asynchronously and nothing outside shows when, so this is the one
	// bounded retry loop; each try is a full round trip, no sleep.
	held[0].Close()
	deadline := time.Now().Add(5 * time.Second)
	for {
		resp, _ := ixRaw(t, tp, req)
		if resp.StatusCode == 200 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("slot never released: %d", resp.StatusCode)
		}
	}
}

// TestSecurityIdleTunnelClosed: a tunnel nobody uses is closed after
// idle_timeout.
func TestSecurityIdleTunnelClosed(t *testing.T) {
	up := newTLSUpstream(t, func(w http.ResponseWriter, r *http.Request) {})
	tp := newTestProxy(t, ixMaven(up.URL, true, "[sidecar]\nidle_timeout = \"300ms\"\n"), nil)
	resp, conn, br := ixRawConnect(t, tp, strings.TrimPrefix(up.URL, "https://"))
	if resp.StatusCode != 200 {
		t.Fatalf("CONNECT: %d", resp.StatusCode)
	}
	start := time.Now()
	conn.SetReadDeadline(start.Add(5 * time.Second))
	_, err := br.ReadByte()
	var ne net.Error
	if err == nil || (errors.As(err, &ne) && ne.Timeout()) {
		t.Fatalf("idle tunnel still open after %v: %v", time.Since(start), err)
	}
	if d := time.Since(start); d < 200*time.Millisecond {
		t.Fatalf("tunnel closed after %v, before the idle timeout", d)
	}
}

// TestSecurityCredentialsStayWithAddressedUpstream: the client's
// Authorization and Cookie go to the upstream it addressed; a fallback
// candidate gets its own configured credentials and nothing else.
func TestSecurityCredentialsStayWithAddressedUpstream(t *testing.T) {
	const secret = "Basic Y2xpZW50OnMzY3JldC1jbGllbnQ="
	addressedAuth := make(chan string, 1)
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		addressedAuth <- r.Header.Get("Authorization")
		w.WriteHeader(http.StatusInternalServerError)
	})
	leak := make(chan string, 4)
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if strings.Contains(r.Header.Get("Authorization"), "Y2xpZW50") || r.Header.Get("Cookie") != "" {
			leak <- r.Header.Get("Authorization") + "|" + r.Header.Get("Cookie")
		}
		user, pass, _ := r.BasicAuth()
		io.WriteString(w, user+":"+pass)
	})
	cfg := fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "maven"
[maven]
proxies = ["%s/m2", { url = "%s/m2", auth = "buser:bpass" }]
`, a.URL, b.URL)
	tp := newTestProxy(t, cfg, nil)
	resp, body := request(t, proxyClient(t, tp, nil), "GET", a.URL+"/m2/g/a.jar",
		http.Header{"Authorization": {secret}, "Cookie": {"session=s3cret-cookie"}})
	select {
	case l := <-leak:
		t.Fatalf("client credentials reached the candidate: %s", l)
	default:
	}
	if resp.StatusCode != 200 || body != "buser:bpass" || resp.Header.Get("X-Nora-Upstream") != "maven:"+b.URL+"/m2" {
		t.Fatalf("fallback: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	if got := <-addressedAuth; got != secret {
		t.Fatalf("addressed upstream got Authorization %q, want the client's", got)
	}
}

// TestSecurityRefusedDestinationIsNotAnUpstreamFailure: a dial the policy
// refuses says nothing about the upstream, so it never opens the breaker:
// every request keeps getting 403, never a 503 from an opened breaker.
func TestSecurityRefusedDestinationIsNotAnUpstreamFailure(t *testing.T) {
	cfg := ixMaven("http://sneaky.example", true,
		"[sidecar]\n"+`resolve = {"sneaky.example:80" = "169.254.1.1:80"}`+"\n")
	tp, _ := ixStartProxy(t, cfg)
	c := proxyClient(t, tp, nil)
	for i := 0; i < 6; i++ { // twice the threshold of 3
		resp, body := request(t, c, "GET", "http://sneaky.example/maven2/x", nil)
		if resp.StatusCode != http.StatusForbidden {
			t.Fatalf("request %d: %d %q, want 403", i, resp.StatusCode, body)
		}
	}
	for _, s := range tp.Breakers().Snapshot() {
		if s.State != breakerstate.Closed || s.FailureCount != 0 {
			t.Fatalf("%s: state %s, %d failures; a refused dial must not count", s.Key, s.State, s.FailureCount)
		}
	}
}
