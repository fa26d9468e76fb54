package proxy

import (
	"bufio"
	"fmt"
	"io"
	"net/http"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
)

// twoMavenWithCreds is maven A (addressed) and B (candidate, with its own
// configured credentials), plus extra [sidecar] lines.
func twoMavenWithCreds(a, b, sidecar string) string {
	return fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "maven"
[maven]
proxies = ["%s/maven2", { url = "%s/repo", auth = "buser:bpass" }]
[sidecar]
%s
`, a, b, sidecar)
}

// TestSecurityDotSegmentsNeverReachTheCandidate: a path that climbs out of
// the addressed upstream's base path is refused with 400 before any
// upstream sees it, in every spelling, on the plain port and inside an
// intercepted tunnel; a path whose dots stay inside reaches the candidate
// resolved.
func TestSecurityDotSegmentsNeverReachTheCandidate(t *testing.T) {
	climbing := []string{"/maven2/../../admin/secret", "/maven2/%2e%2e/%2e%2e/admin/secret",
		"/maven2/..%2f..%2fadmin/secret", "/maven2/..%2F..%2Fadmin", "/maven2/x/../../../admin"}
	var seen atomic.Value
	seen.Store("")
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		seen.Store(r.URL.EscapedPath())
		io.WriteString(w, "B")
	})
	t.Run("plain", func(t *testing.T) {
		a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) })
		tp := newTestProxy(t, twoMavenWithCreds(a.URL, b.URL, ""), nil)
		host := strings.TrimPrefix(a.URL, "http://")
		for _, p := range climbing {
			resp, _ := ixRaw(t, tp, fmt.Sprintf("GET http://%s%s HTTP/1.1\r\nHost: %s\r\n\r\n", host, p, host))
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("%s: %d, want 400", p, resp.StatusCode)
			}
		}
		if a.hits.Load() != 0 || b.hits.Load() != 0 {
			t.Fatalf("a climbing path reached an upstream (A %d, B %d)", a.hits.Load(), b.hits.Load())
		}
		resp, body := getURL(t, proxyClient(t, tp, nil), a.URL+"/maven2/g/x/../a.jar")
		if resp.StatusCode != 200 || body != "B" || seen.Load() != "/repo/g/a.jar" {
			t.Fatalf("dots inside the base: %d %q, B saw %q, want /repo/g/a.jar", resp.StatusCode, body, seen.Load())
		}
	})
	t.Run("intercepted", func(t *testing.T) {
		a := newTLSUpstream(t, func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) })
		lines, ca := interceptCA(t, a.Server)
		tp := newTestProxy(t, twoMavenWithCreds(a.URL, b.URL, lines), nil)
		target := strings.TrimPrefix(a.URL, "https://")
		for _, p := range climbing {
			tc := ixTLSInTunnel(t, tp, ca, target, "http/1.1")
			fmt.Fprintf(tc, "GET %s HTTP/1.1\r\nHost: %s\r\n\r\n", p, target)
			resp, err := http.ReadResponse(bufio.NewReader(tc), nil)
			if err != nil {
				t.Fatal(err)
			}
			resp.Body.Close()
			tc.Close()
			if resp.StatusCode != http.StatusBadRequest {
				t.Errorf("%s: %d, want 400", p, resp.StatusCode)
			}
		}
		if a.hits.Load() != 0 {
			t.Fatalf("a climbing path reached the addressed upstream %d times", a.hits.Load())
		}
	})
	if strings.Contains(seen.Load().(string), "admin") {
		t.Fatalf("B received %q", seen.Load())
	}
}

// TestSecurityCredentialHeadersStayWithTheAddressedUpstream: every
// credential header (the defaults and the configured ones) stays with the
// upstream the client addressed, and keys the stale copy: a copy fetched
// with only Private-Token is never served to a client without it.
func TestSecurityCredentialHeadersStayWithTheAddressedUpstream(t *testing.T) {
	var down atomic.Bool
	leaked := make(chan string, 16)
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if down.Load() {
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		io.WriteString(w, "private to "+r.Header.Get("Private-Token"))
	})
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		for _, h := range []string{"Private-Token", "X-Api-Key", "Job-Token", "X-Registry-Secret"} {
			if v := r.Header.Get(h); v != "" {
				leaked <- h + ": " + v
			}
		}
		w.WriteHeader(http.StatusNotFound)
	})
	tp := newTestProxy(t, twoMavenWithCreds(a.URL, b.URL, fmt.Sprintf(
		"stale_dir = %q\ncredential_headers = [\"Authorization\", \"Cookie\", \"Private-Token\", \"X-Api-Key\", \"Job-Token\", \"X-Registry-Secret\"]",
		filepath.Join(t.TempDir(), "stale"))), nil)
	c := proxyClient(t, tp, nil)
	url := a.URL + "/maven2/g/private.jar"
	token := fbHeader("Private-Token", "glpat-secret", "X-Api-Key", "k", "Job-Token", "j", "X-Registry-Secret", "s")
	if resp, body := request(t, c, "GET", url, token); resp.StatusCode != 200 || body != "private to glpat-secret" {
		t.Fatalf("priming: %d %q", resp.StatusCode, body)
	}
	fbWaitStored(t, tp, "maven", url, token)
	down.Store(true)
	resp, body := getURL(t, c, url) // no credentials at all
	if resp.Header.Get("X-Nora-Stale") != "" || strings.Contains(body, "glpat") {
		t.Fatalf("a client without the token got the private copy: %d %q", resp.StatusCode, body)
	}
	if resp, body := request(t, c, "GET", url, token); resp.Header.Get("X-Nora-Stale") != "true" || body != "private to glpat-secret" {
		t.Fatalf("the token's owner: %d %q, want its stale copy", resp.StatusCode, body)
	}
	close(leaked)
	for l := range leaked {
		t.Errorf("credential header reached the candidate: %s", l)
	}
}

// TestSecuritySetCookieFromACandidateIsDropped: a session a candidate
// opened for the proxy's configured credentials never reaches the client.
func TestSecuritySetCookieFromACandidateIsDropped(t *testing.T) {
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "a-session", Value: "client-own"})
		w.WriteHeader(http.StatusBadGateway)
	})
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		http.SetCookie(w, &http.Cookie{Name: "JSESSIONID", Value: "opened-with-buser"})
		w.Header().Add("Set-Cookie2", "legacy=1")
		io.WriteString(w, "jar")
	})
	tp := newTestProxy(t, twoMavenWithCreds(a.URL, b.URL, ""), nil)
	resp, body := getURL(t, proxyClient(t, tp, nil), a.URL+"/maven2/g/a.jar")
	if resp.StatusCode != 200 || body != "jar" {
		t.Fatalf("fallback: %d %q", resp.StatusCode, body)
	}
	if v := resp.Header.Values("Set-Cookie"); len(v) != 0 || resp.Header.Get("Set-Cookie2") != "" {
		t.Fatalf("the candidate's cookies reached the client: %v", resp.Header)
	}
}

// TestSecurityAuthorizationAndCookieAreAlwaysCredentials: Authorization and
// Cookie are the client's credentials whatever credential_headers lists
// (docs/behaviour.md §5.5, §10; the stale key counts them always), and so
// are the default credential headers (GitLab's Private-Token, X-Api-Key,
// …), which a list adds to: an operator who lists only a registry's own
// token header must not make the proxy hand any of them to the next registry,
// whether it is asked after the addressed one failed or as a hedge while
// the addressed one is silent (§5.10).
func TestSecurityAuthorizationAndCookieAreAlwaysCredentials(t *testing.T) {
	for _, tc := range []struct {
		name       string
		hedgeAfter string
		addressed  http.HandlerFunc
	}{
		{"after a failure", "0", func(w http.ResponseWriter, r *http.Request) { w.WriteHeader(http.StatusBadGateway) }},
		{"as a hedge", "0.2", func(w http.ResponseWriter, r *http.Request) { <-r.Context().Done() }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			first := newUpstream(t, tc.addressed)
			seen := make(chan http.Header, 1)
			second := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
				seen <- r.Header.Clone()
				io.WriteString(w, "jar")
			})
			tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "maven"
[maven]
proxies = ["%s/maven2", "%s/maven2"]
hedge_after = %s
[sidecar]
credential_headers = ["X-Registry-Token"]
`, first.URL, second.URL, tc.hedgeAfter), nil)
			resp, body := request(t, proxyClient(t, tp, nil), http.MethodGet, first.URL+"/maven2/g/a/1/a-1.jar",
				fbHeader("Authorization", "Bearer client-secret", "Cookie", "session=client-cookie",
					"X-Registry-Token", "tok", "Private-Token", "glpat-secret", "X-Api-Key", "key", "Job-Token", "job"))
			if resp.StatusCode != http.StatusOK || body != "jar" {
				t.Fatalf("answer %d %q, want the candidate's 200", resp.StatusCode, body)
			}
			h := <-seen
			for _, name := range []string{"Authorization", "Cookie", "X-Registry-Token", "Private-Token", "X-Api-Key", "Job-Token"} {
				if v := h.Get(name); v != "" {
					t.Errorf("the candidate received the client's %s: %q", name, v)
				}
			}
		})
	}
}
