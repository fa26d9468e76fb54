package proxy

import (
	"bytes"
	"compress/gzip"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
)

// TestNPMCandidateTarballsNameTheAddressedRegistry: a packument carries
// absolute tarball URLs of the registry that wrote it, and npm, pnpm and
// yarn copy dist.tarball into the lockfile (package-lock.json's resolved).
// A packument registry B serves while A is down must name A's URLs, the
// path below B's URL put below A's, so the lockfile written during the
// outage still installs from A alone once A is back, and the tarball GET to
// A fails over to B by itself while A is down. A tarball B lists on a host
// that is not below its URL (a CDN) is left as it is, the document is
// otherwise byte for byte B's, and a gzip packument (npm asks for gzip)
// comes back gzip.
func TestNPMCandidateTarballsNameTheAddressedRegistry(t *testing.T) {
	tgz := []byte("\x1f\x8b tarball bytes of lfpkg 1.0.0")
	var docB string
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { t.Error("A is open") })
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/reg/lfpkg":
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("ETag", `"b-etag"`)
			if strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
				w.Header().Set("Content-Encoding", "gzip")
				gz := gzip.NewWriter(w)
				io.WriteString(gz, docB)
				gz.Close()
				return
			}
			io.WriteString(w, docB)
		case "/reg/@e2e/scoped":
			// npm asks for /@e2e%2fscoped, pnpm for /@e2e%2Fscoped.
			w.Header().Set("Content-Type", "application/vnd.npm.install-v1+json")
			fmt.Fprintf(w, `{"name":"@e2e/scoped","versions":{"1.0.0":{"dist":{"tarball":"%s/reg/@e2e/scoped/-/scoped-1.0.0.tgz"}}}}`, "http://"+r.Host)
		case "/reg/lfpkg/-/lfpkg-1.0.0.tgz":
			w.Write(tgz)
		default:
			http.NotFound(w, r)
		}
	})
	docB = fmt.Sprintf(`{"name":"lfpkg","readme":"see %[1]s/reg/lfpkg/-/lfpkg-1.0.0.tgz",`+
		`"versions":{"1.0.0":{"name":"lfpkg","version":"1.0.0","dist":{"integrity":"sha512-x","tarball" : "%[1]s/reg/lfpkg/-/lfpkg-1.0.0.tgz"}},`+
		`"0.9.0":{"dist":{"tarball":"https://cdn.example/lfpkg-0.9.0.tgz"}}},"dist-tags":{"latest":"1.0.0"}}`, b.URL)
	tp := newTestProxy(t, fmt.Sprintf(`
[circuit_breaker]
enabled = true
[registries]
enable = "npm"
[npm]
proxies = ["%s", "%s/reg/"]
`, a.URL, b.URL), nil)
	keys := fbKeys(t, tp, "npm")
	fbForceOpen(t, tp, keys[0])
	c := proxyClient(t, tp, nil)
	want := strings.ReplaceAll(docB, `"tarball" : "`+b.URL+`/reg/`, `"tarball" : "`+a.URL+`/`)

	check := func(t *testing.T, resp *http.Response, body string) {
		t.Helper()
		if resp.StatusCode != 200 || resp.Header.Get("X-Nora-Upstream") != keys[1] {
			t.Fatalf("got %d %v", resp.StatusCode, resp.Header)
		}
		if body != want {
			t.Fatalf("packument from B:\n got %s\nwant %s", body, want)
		}
		if resp.Header.Get("ETag") != "" {
			t.Errorf("rewritten packument kept B's ETag %q", resp.Header.Get("ETag"))
		}
	}
	t.Run("identity", func(t *testing.T) {
		resp, body := request(t, c, http.MethodGet, a.URL+"/lfpkg", fbHeader("Accept", "application/json", "Accept-Encoding", "identity"))
		check(t, resp, body)
	})
	t.Run("gzip", func(t *testing.T) {
		resp, raw := request(t, c, http.MethodGet, a.URL+"/lfpkg", fbHeader("Accept", "application/json", "Accept-Encoding", "gzip"))
		if resp.Header.Get("Content-Encoding") != "gzip" {
			t.Fatalf("Content-Encoding %q, want gzip", resp.Header.Get("Content-Encoding"))
		}
		zr, err := gzip.NewReader(bytes.NewReader([]byte(raw)))
		if err != nil {
			t.Fatal(err)
		}
		body, err := io.ReadAll(zr)
		if err != nil {
			t.Fatal(err)
		}
		check(t, resp, string(body))
	})
	t.Run("scoped, abbreviated", func(t *testing.T) {
		for _, p := range []string{"/@e2e%2fscoped", "/@e2e%2Fscoped"} {
			resp, body := request(t, c, http.MethodGet, a.URL+p, fbHeader("Accept", "application/vnd.npm.install-v1+json"))
			want := `{"name":"@e2e/scoped","versions":{"1.0.0":{"dist":{"tarball":"` + a.URL + `/@e2e/scoped/-/scoped-1.0.0.tgz"}}}}`
			if resp.StatusCode != 200 || body != want {
				t.Errorf("GET %s: %d %s, want %s", p, resp.StatusCode, body, want)
			}
		}
	})
	t.Run("tarball at A's URL fails over to B", func(t *testing.T) {
		var doc struct {
			Versions map[string]struct {
				Dist struct{ Tarball string } `json:"dist"`
			} `json:"versions"`
		}
		if err := json.Unmarshal([]byte(want), &doc); err != nil {
			t.Fatal(err)
		}
		resp, body := request(t, c, http.MethodGet, doc.Versions["1.0.0"].Dist.Tarball, nil)
		if resp.StatusCode != 200 || body != string(tgz) || resp.Header.Get("X-Nora-Upstream") != keys[1] {
			t.Fatalf("tarball %s: %d %v %q", doc.Versions["1.0.0"].Dist.Tarball, resp.StatusCode, resp.Header, body)
		}
	})
}
