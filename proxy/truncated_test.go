package proxy

import (
	"io"
	"net/http"
	"strings"
	"testing"
)

// breakOff answers 500 bytes of a chunked body, then drops the connection
// without the terminating chunk: an upstream that broke off.
func breakOff(w http.ResponseWriter, r *http.Request) {
	_, _ = io.WriteString(w, strings.Repeat("h", 500))
	w.(http.Flusher).Flush()
	if conn, _, err := http.NewResponseController(w).Hijack(); err == nil {
		_ = conn.Close()
	}
}

// readTruncated fails unless the body ends with an error: a client must see
// a truncated body, never a short one that looks whole (docs/behaviour.md
// §5.3).
func readTruncated(t *testing.T, what string, resp *http.Response) {
	t.Helper()
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err == nil {
		t.Fatalf("%s: the upstream broke off after 500 bytes, the client read %d bytes and a clean end", what, len(body))
	}
}

func TestUpstreamBreakOffReachesThePlainClient(t *testing.T) {
	o := newUpstream(t, breakOff)
	tp := newTestProxy(t, `
[registries]
enable = "maven"
[maven]
proxies = ["`+o.URL+`/maven2"]
`, nil)
	c := proxyClient(t, tp, nil)
	for _, u := range []string{o.URL + "/maven2/g/a/1/a-1.jar", o.URL + "/outside-the-base"} {
		resp, err := c.Get(u)
		if err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		readTruncated(t, u, resp)
	}
}

func TestUpstreamBreakOffReachesTheInterceptedClient(t *testing.T) {
	ix := newIxIntercept(t, breakOff)
	resp, err := ix.client(t, false).Get(ix.up.URL + "/maven2/g/a.jar")
	if err != nil {
		t.Fatal(err)
	}
	readTruncated(t, "intercepted", resp)
}
