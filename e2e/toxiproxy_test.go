//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"path/filepath"
	"testing"
	"time"

	"github.com/nora-breaker/nora-breaker/internal/listenaddr"
)

// toxiproxy is a running toxiproxy server driven through its HTTP API.
type toxiproxy struct {
	api string
	c   *http.Client
}

// startToxiproxy starts the toxiproxy server installed by run.sh on port 0
// and finds its API's port in /proc (the server only logs "127.0.0.1:0").
func startToxiproxy(t *testing.T, s suite, dir string) *toxiproxy {
	t.Helper()
	p := startProc(t, dir, "toxiproxy", cleanEnv(), filepath.Join(s.tools, "toxiproxy-server"),
		"-host", "127.0.0.1", "-port", "0")
	tp := &toxiproxy{api: "http://" + p.listening(t, 20*time.Second),
		c: &http.Client{Timeout: 5 * time.Second, Transport: &http.Transport{Proxy: nil}}}
	waitHTTP(t, tp.api+"/version", 200, 20*time.Second)
	return tp
}

// call sends one API request, fails the test on an unexpected status and
// returns the answer's body.
func (tp *toxiproxy) call(t *testing.T, method, path string, body any) []byte {
	t.Helper()
	var rd io.Reader
	if body != nil {
		b, _ := json.Marshal(body)
		rd = bytes.NewReader(b)
	}
	req, _ := http.NewRequest(method, tp.api+path, rd)
	req.Header.Set("Content-Type", "application/json")
	resp, err := tp.c.Do(req)
	if err != nil {
		t.Fatalf("toxiproxy %s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	msg, _ := io.ReadAll(resp.Body)
	if resp.StatusCode >= 300 {
		t.Fatalf("toxiproxy %s %s: %d %s", method, path, resp.StatusCode, msg)
	}
	return msg
}

// proxy creates a toxiproxy listener forwarding to upstream and returns its
// address. The port is held (listenaddr.Hold) for the test's lifetime:
// setEnabled(false) closes toxiproxy's listener, and without the hold the
// port would be free for another process until setEnabled(true) binds it
// again.
func (tp *toxiproxy) proxy(t *testing.T, name, upstream string) string {
	t.Helper()
	hold, err := listenaddr.NewHold()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hold.Close() })
	body := tp.call(t, "POST", "/proxies", map[string]any{"name": name, "listen": hold.Addr(), "upstream": upstream, "enabled": true})
	var created struct{ Listen string }
	if err := json.Unmarshal(body, &created); err != nil {
		t.Fatalf("toxiproxy create %s: %v: %s", name, err, body)
	}
	if created.Listen != hold.Addr() {
		t.Fatalf("toxiproxy create %s: listens on %q, want the held %s", name, created.Listen, hold.Addr())
	}
	return created.Listen
}

// addToxic installs a toxic on both directions' upstream side of a proxy.
func (tp *toxiproxy) addToxic(t *testing.T, proxy, toxic, kind string, attrs map[string]any) {
	t.Helper()
	tp.call(t, "POST", "/proxies/"+proxy+"/toxics", map[string]any{
		"name": toxic, "type": kind, "stream": "upstream", "toxicity": 1.0, "attributes": attrs})
}

// removeToxic takes a toxic away again.
func (tp *toxiproxy) removeToxic(t *testing.T, proxy, toxic string) {
	t.Helper()
	tp.call(t, "DELETE", "/proxies/"+proxy+"/toxics/"+toxic, nil)
}

// setEnabled turns a proxy off (its listener closes: connections are
// refused, open ones are cut) or back on (it listens on the same address).
func (tp *toxiproxy) setEnabled(t *testing.T, proxy string, on bool) {
	t.Helper()
	tp.call(t, "POST", "/proxies/"+proxy, map[string]any{"enabled": on})
}
