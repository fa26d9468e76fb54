package fallback

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/nora-breaker/nora-breaker/internal/testkit"
	"github.com/nora-breaker/nora-breaker/stale"
)

func TestSubstitute(t *testing.T) {
	tests := []struct {
		name      string
		client    string // the client's URL
		rel       string
		cand      string
		auth      string
		wantURL   string
		wantAuthz string
	}{
		{name: "path below candidate path", client: "http://a.test/maven2/g/a/1/a-1.jar", rel: "/g/a/1/a-1.jar",
			cand: "http://b.test/repository/public", wantURL: "http://b.test/repository/public/g/a/1/a-1.jar"},
		{name: "candidate at root", client: "http://a.test/v2/lib/x/manifests/1", rel: "/v2/lib/x/manifests/1",
			cand: "https://b.test", wantURL: "https://b.test/v2/lib/x/manifests/1"},
		{name: "trailing slash on candidate", client: "http://a.test/simple/requests/", rel: "/requests/",
			cand: "http://b.test/simple/", wantURL: "http://b.test/simple/requests/"},
		{name: "query kept", client: "http://a.test/r/x?version=1&n=2", rel: "/x",
			cand: "http://b.test/r", wantURL: "http://b.test/r/x?version=1&n=2"},
		{name: "escapes kept", client: "http://a.test/r/%40scope%2Fpkg", rel: "/%40scope%2Fpkg",
			cand: "http://b.test/npm", wantURL: "http://b.test/npm/%40scope%2Fpkg"},
		{name: "candidate credentials", client: "http://a.test/r/x", rel: "/x", cand: "http://b.test/r",
			auth: "u:p", wantURL: "http://b.test/r/x", wantAuthz: "Basic dTpw"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client := httptest.NewRequest(http.MethodGet, tc.client, nil)
			client.RequestURI = ""
			client.Header.Set("Authorization", "Bearer client-secret")
			client.Header.Set("Cookie", "session=client")
			client.Header.Set("Accept", "application/vnd.oci.image.index.v1+json")
			client.Header.Set("Private-Token", "gitlab-token")
			client.Header.Set("X-Api-Key", "key")
			client.Header.Set("X-My-Registry-Token", "custom")
			cand := testkit.ConfigUpstream(t, "maven", tc.cand)
			cand.Auth = tc.auth
			// Authorization and Cookie are not in the list, and go all
			// the same (docs/behaviour.md §10). Proxy-* headers never get
			// here: the proxy removes them first (§5.5).
			out := substitute(client, cand, tc.rel, append(stale.DefaultCredentialHeaders(), "X-My-Registry-Token"))
			if got := out.URL.String(); got != tc.wantURL {
				t.Errorf("URL %q, want %q", got, tc.wantURL)
			}
			if out.Host != cand.URL.Host {
				t.Errorf("Host %q, want %q", out.Host, cand.URL.Host)
			}
			if got := out.Header.Get("Authorization"); got != tc.wantAuthz {
				t.Errorf("Authorization %q, want %q", got, tc.wantAuthz)
			}
			for _, h := range []string{"Cookie", "Private-Token", "X-Api-Key", "X-My-Registry-Token"} {
				if v := out.Header.Get(h); v != "" {
					t.Errorf("client's %s leaked: %q", h, v)
				}
			}
			if out.Header.Get("Accept") != client.Header.Get("Accept") || out.Method != client.Method {
				t.Errorf("method/Accept not kept: %s %q", out.Method, out.Header.Get("Accept"))
			}
			if out.Body != http.NoBody || out.RequestURI != "" {
				t.Errorf("body %v, RequestURI %q", out.Body, out.RequestURI)
			}
			// The client's own request is untouched: it may still be needed
			// for the stale key, which includes its credentials.
			if client.Header.Get("Authorization") != "Bearer client-secret" || !strings.HasPrefix(client.URL.Host, "a.test") {
				t.Errorf("client request changed: %v %v", client.URL, client.Header)
			}
		})
	}
}

func TestSubstituteBasicAuth(t *testing.T) {
	// Encoded as configured, colon and all, as NORA does.
	if got := basicAuth("ci-reader:p:w"); got != "Basic Y2ktcmVhZGVyOnA6dw==" {
		t.Fatalf("got %q", got)
	}
}
