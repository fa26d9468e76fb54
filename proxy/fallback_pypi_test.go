package proxy

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func pypiConfig(a, b string) string {
	return fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "pypi"
[pypi]
proxies = ["%s/simple/", "%s/simple"]
`, a, b)
}

// TestFallbackPyPICandidateNotFoundIs503: the skipped index might have had
// the project, so another index's 404 proves nothing.
func TestFallbackPyPICandidateNotFoundIs503(t *testing.T) {
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { t.Error("A is open") })
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { http.NotFound(w, r) })
	tp := newTestProxy(t, pypiConfig(a.URL, b.URL), nil)
	keys := fbKeys(t, tp, "pypi")
	fbForceOpen(t, tp, keys[0])
	resp, body := getURL(t, proxyClient(t, tp, nil), a.URL+"/simple/requests/")
	if resp.StatusCode != 503 || b.hits.Load() != 1 || resp.Header.Get("Retry-After") == "" ||
		!strings.Contains(body, keys[0]) {
		t.Fatalf("got %d %q %v (B hits %d)", resp.StatusCode, body, resp.Header, b.hits.Load())
	}
}

// TestFallbackPyPIRelativeLinksMadeAbsolute: B's simple page links files
// relative to itself; the client must fetch them from B, not from A.
func TestFallbackPyPIRelativeLinksMadeAbsolute(t *testing.T) {
	const rel = "../../packages/x-1.0-py3-none-any.whl"
	const hash = "#sha256=0123abcd"
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { t.Error("A is open") })
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/simple/x/" {
			t.Errorf("B asked for %s", r.URL.Path)
		}
		if strings.Contains(r.Header.Get("Accept"), "json") {
			w.Header().Set("Content-Type", "application/vnd.pypi.simple.v1+json")
			fmt.Fprintf(w, `{"meta":{"api-version":"1.1"},"name":"x","files":[{"filename":"x-1.0-py3-none-any.whl","url":%q,"hashes":{"sha256":"0123abcd"}}]}`, rel)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<!DOCTYPE html><html><body><a href=\"%s%s\">x-1.0-py3-none-any.whl</a></body></html>", rel, hash)
	})
	tp := newTestProxy(t, pypiConfig(a.URL, b.URL), nil)
	keys := fbKeys(t, tp, "pypi")
	fbForceOpen(t, tp, keys[0])
	c := proxyClient(t, tp, nil)
	want := b.URL + "/packages/x-1.0-py3-none-any.whl"

	t.Run("HTML", func(t *testing.T) {
		resp, body := request(t, c, http.MethodGet, a.URL+"/simple/x/", fbHeader("Accept", "text/html"))
		if resp.StatusCode != 200 || resp.Header.Get("X-Nora-Upstream") != keys[1] {
			t.Fatalf("got %d %v", resp.StatusCode, resp.Header)
		}
		if !strings.Contains(body, `href="`+want+hash+`"`) || strings.Contains(body, "../") {
			t.Fatalf("links not absolute against B: %s", body)
		}
	})
	t.Run("PEP 691 JSON", func(t *testing.T) {
		resp, body := request(t, c, http.MethodGet, a.URL+"/simple/x/",
			fbHeader("Accept", "application/vnd.pypi.simple.v1+json"))
		if resp.StatusCode != 200 || resp.Header.Get("X-Nora-Upstream") != keys[1] {
			t.Fatalf("got %d %v", resp.StatusCode, resp.Header)
		}
		var page struct {
			Files []struct {
				URL    string            `json:"url"`
				Hashes map[string]string `json:"hashes"`
			} `json:"files"`
		}
		if err := json.Unmarshal([]byte(body), &page); err != nil {
			t.Fatalf("served page is not JSON: %v: %s", err, body)
		}
		if len(page.Files) != 1 || page.Files[0].URL != want || page.Files[0].Hashes["sha256"] != "0123abcd" {
			t.Fatalf("files %+v", page.Files)
		}
		if resp.ContentLength != int64(len(body)) {
			t.Fatalf("Content-Length %d, body %d bytes", resp.ContentLength, len(body))
		}
	})
}
