package proxy

import (
	"fmt"
	"net/http"
	"strconv"
	"testing"

	"github.com/nora-breaker/nora-breaker/breakerstate"
)

// Answers without a body (a HEAD's, 204, 304) are complete at their
// headers on every path: their Content-Length describes the GET, not bytes
// still to come, so it must neither cut the client off nor count against a
// healthy upstream. containerd and the docker daemon send HEAD for every
// manifest.

// manifestLength is the Content-Length the fake registry announces.
const manifestLength = 1234

// bodylessHandler answers HEAD with the GET's Content-Length and no body,
// and a GET carrying If-None-Match with 304.
func bodylessHandler(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Length", strconv.Itoa(manifestLength))
	w.Header().Set("Docker-Content-Digest", "sha256:abc")
	switch {
	case r.Header.Get("If-None-Match") != "":
		w.WriteHeader(http.StatusNotModified)
	case r.Method == http.MethodHead:
		w.WriteHeader(http.StatusOK)
	default:
		w.WriteHeader(http.StatusOK)
		w.Write(make([]byte, manifestLength))
	}
}

// checkBodyless sends ten HEADs and a conditional GET through c and checks
// each answer and that the breaker of key did not move.
func checkBodyless(t *testing.T, tp *testProxy, c *http.Client, url, key string) {
	t.Helper()
	for i := range 10 {
		resp, body := request(t, c, http.MethodHead, url, nil)
		if resp.StatusCode != 200 || resp.ContentLength != manifestLength || body != "" ||
			resp.Header.Get("Docker-Content-Digest") != "sha256:abc" {
			t.Fatalf("HEAD %d: %d length %d body %q headers %v", i, resp.StatusCode, resp.ContentLength, body, resp.Header)
		}
	}
	resp, body := request(t, c, http.MethodGet, url, fbHeader("If-None-Match", `"v1"`))
	if resp.StatusCode != http.StatusNotModified || body != "" {
		t.Fatalf("conditional GET: %d %q", resp.StatusCode, body)
	}
	if s := breakerOf(t, tp, key); s.State != breakerstate.Closed || s.FailureCount != 0 {
		t.Fatalf("breaker after body-less answers: %s, %d failures", s.State, s.FailureCount)
	}
	if resp, body := request(t, c, http.MethodGet, url, nil); resp.StatusCode != 200 || len(body) != manifestLength {
		t.Fatalf("GET afterwards: %d, %d bytes", resp.StatusCode, len(body))
	}
}

func TestHealthBodylessAnswersIntercepted(t *testing.T) {
	ix := newIxIntercept(t, bodylessHandler)
	for _, h2 := range []bool{false, true} {
		t.Run(fmt.Sprintf("h2=%v", h2), func(t *testing.T) {
			checkBodyless(t, ix.tp, ix.client(t, h2), ix.up.URL+"/maven2/v2/lib/hello/manifests/1", ixKey(ix.up.URL))
		})
	}
}

func TestHealthBodylessAnswersPlain(t *testing.T) {
	up := newUpstream(t, bodylessHandler)
	tp := newTestProxy(t, ixMaven(up.URL, true, ""), nil)
	checkBodyless(t, tp, proxyClient(t, tp, nil), up.URL+"/maven2/lib/hello/1/hello-1.pom", ixKey(up.URL))
}

// TestHealthBodylessAnswersThroughFallback: the addressed upstream is open,
// the second one answers the HEAD; neither breaker moves.
func TestHealthBodylessAnswersThroughFallback(t *testing.T) {
	a := newUpstream(t, func(w http.ResponseWriter, r *http.Request) { t.Error("A is open and must not be asked") })
	b := newUpstream(t, bodylessHandler)
	tp := newTestProxy(t, biMavenChain(3, 10, a.URL+"/m2", b.URL+"/m2"), nil)
	keys := fbKeys(t, tp, "maven")
	fbForceOpen(t, tp, keys[0])
	c := proxyClient(t, tp, nil)
	for i := range 10 {
		resp, body := request(t, c, http.MethodHead, a.URL+"/m2/lib/hello/1/hello-1.pom", nil)
		if resp.StatusCode != 200 || resp.ContentLength != manifestLength || body != "" ||
			resp.Header.Get("X-Nora-Upstream") != keys[1] {
			t.Fatalf("HEAD %d: %d length %d headers %v", i, resp.StatusCode, resp.ContentLength, resp.Header)
		}
	}
	if s := breakerOf(t, tp, keys[1]); s.State != breakerstate.Closed || s.FailureCount != 0 {
		t.Fatalf("B after body-less answers: %s, %d failures", s.State, s.FailureCount)
	}
}

// TestHealthBodylessAnswersFromStale: with the upstream down, a HEAD is
// answered from the stored GET: its headers and length, no body.
func TestHealthBodylessAnswersFromStale(t *testing.T) {
	e := newStaleEnv(t, bodylessHandler)
	url := e.base + "/lib/hello/1/hello-1.pom"
	if resp, _ := getURL(t, e.c, url); resp.StatusCode != 200 {
		t.Fatalf("priming GET: %d", resp.StatusCode)
	}
	fbWaitStored(t, e.tp, "maven", url, nil)
	e.down.Store(true)
	for i := range 10 {
		resp, body := request(t, e.c, http.MethodHead, url, nil)
		if resp.StatusCode != 200 || resp.ContentLength != manifestLength || body != "" ||
			resp.Header.Get("X-Nora-Stale") != "true" {
			t.Fatalf("stale HEAD %d: %d length %d headers %v", i, resp.StatusCode, resp.ContentLength, resp.Header)
		}
	}
}
