package proxy

import (
	"bytes"
	"compress/gzip"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// gzipped is b compressed as a server's gzip Content-Encoding.
func gzipped(t testing.TB, b string) []byte {
	t.Helper()
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	if _, err := io.WriteString(w, b); err != nil || w.Close() != nil {
		t.Fatal("gzip failed")
	}
	return buf.Bytes()
}

// TestFallbackPyPICompressedPagesRewritten: index B, on another host than
// the index the client addressed, answers pip's Accept-Encoding: gzip,
// deflate with a gzipped simple page (HTML and PEP 691 JSON) whose file
// links are relative. The client gets the page gzipped, as B chose, with
// the links absolute against B. It failed while compressed pages were
// passed on untouched: pip then asked the addressed index, which was down,
// for every file.
func TestFallbackPyPICompressedPagesRewritten(t *testing.T) {
	const rel = "../../packages/x-1.0.tar.gz#sha256=0123abcd"
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { t.Error("A is open") })
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		page, ct := fmt.Sprintf(`<!DOCTYPE html><html><body><a href="%s">x-1.0.tar.gz</a></body></html>`, rel), "text/html"
		if strings.Contains(r.Header.Get("Accept"), "json") {
			page = fmt.Sprintf(`{"meta":{"api-version":"1.1"},"name":"x","files":[{"filename":"x-1.0.tar.gz","url":%q}]}`, rel)
			ct = "application/vnd.pypi.simple.v1+json"
		}
		w.Header().Set("Content-Type", ct)
		w.Header().Set("Vary", "Accept-Encoding")
		if !strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
			t.Errorf("B was asked without the client's Accept-Encoding: %q", r.Header.Get("Accept-Encoding"))
		}
		w.Header().Set("Content-Encoding", "gzip")
		_, _ = w.Write(gzipped(t, page))
	})
	tp := newTestProxy(t, pypiConfig(a.URL, b.URL), nil)
	keys := fbKeys(t, tp, "pypi")
	fbForceOpen(t, tp, keys[0])
	c := proxyClient(t, tp, nil)
	want := b.URL + "/packages/x-1.0.tar.gz#sha256=0123abcd"
	for _, accept := range []string{"text/html", "application/vnd.pypi.simple.v1+json"} {
		t.Run(accept, func(t *testing.T) {
			resp, body := request(t, c, http.MethodGet, a.URL+"/simple/x/",
				fbHeader("Accept", accept, "Accept-Encoding", "gzip, deflate"))
			if resp.StatusCode != 200 || resp.Header.Get("X-Nora-Upstream") != keys[1] ||
				resp.Header.Get("Content-Encoding") != "gzip" || resp.ContentLength != int64(len(body)) {
				t.Fatalf("got %d, %d bytes, %v", resp.StatusCode, len(body), resp.Header)
			}
			zr, err := gzip.NewReader(strings.NewReader(body))
			if err != nil {
				t.Fatalf("the page is not gzip: %v", err)
			}
			page, err := io.ReadAll(zr)
			if err != nil {
				t.Fatalf("the page does not decode: %v", err)
			}
			if !strings.Contains(string(page), want) || strings.Contains(string(page), "../") {
				t.Fatalf("links not absolute against B: %s", page)
			}
		})
	}
}

// TestFallbackPyPIUnreadablePageKeepsTheStaleCopy: A served the page (its
// links absolute) and it was kept; later, with A down, index B answers in
// an encoding the proxy cannot read, so its relative links cannot be made
// right. The client gets B's page as it came, but the kept copy stays A's:
// with every index down, pip is served the page that works.
func TestFallbackPyPIUnreadablePageKeepsTheStaleCopy(t *testing.T) {
	const good = `<a href="https://files.test/x-1.0.tar.gz#sha256=ab">x-1.0.tar.gz</a>`
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		_, _ = io.WriteString(w, good)
	})
	b := newUpstream(t, func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		if r.URL.Path != "/simple/x/" {
			// A file, in no coding at all: kept for sure, which orders
			// the test after whatever was kept of the page.
			_, _ = io.WriteString(w, "file bytes")
			return
		}
		w.Header().Set("Content-Encoding", "br")
		_, _ = io.WriteString(w, "\x0b\x02\x80brotli bytes with relative links")
	})
	dir := t.TempDir()
	tp := newTestProxy(t, pypiConfig(a.URL, b.URL)+fmt.Sprintf("[sidecar]\nstale_dir = %q\n", dir), nil)
	c := proxyClient(t, tp, nil)
	page, hdr := a.URL+"/simple/x/", fbHeader("Accept", "text/html", "Accept-Encoding", "gzip, deflate, br")
	if resp, body := request(t, c, http.MethodGet, page, hdr); resp.StatusCode != 200 || body != good {
		t.Fatalf("healthy: %d %q", resp.StatusCode, body)
	}
	fbWaitStored(t, tp, "pypi", page, hdr)
	tp.Clock.Advance(time.Minute) // the copy is old enough for a new answer to replace it

	keys := fbKeys(t, tp, "pypi")
	fbForceOpen(t, tp, keys[0])
	resp, body := request(t, c, http.MethodGet, page, hdr)
	if resp.StatusCode != 200 || resp.Header.Get("X-Nora-Upstream") != keys[1] || resp.Header.Get("Content-Encoding") != "br" ||
		!strings.Contains(body, "brotli bytes") {
		t.Fatalf("A down: %d %q %v", resp.StatusCode, body, resp.Header)
	}
	file := a.URL + "/simple/x/x-1.0.tar.gz"
	if resp, _ := request(t, c, http.MethodGet, file, nil); resp.StatusCode != 200 {
		t.Fatalf("file from B: %d", resp.StatusCode)
	}
	fbWaitStored(t, tp, "pypi", file, nil)

	fbForceOpen(t, tp, keys[1])
	resp, body = request(t, c, http.MethodGet, page, hdr)
	if resp.Header.Get("X-Nora-Stale") != "true" || body != good {
		t.Fatalf("every index down: %d stale=%q %q, want A's kept page %q", resp.StatusCode,
			resp.Header.Get("X-Nora-Stale"), body, good)
	}
}
